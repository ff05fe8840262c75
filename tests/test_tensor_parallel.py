"""Tensor parallelism: the split of a model over ranks (cann_llm.tensor_parallel), the ALL_REDUCE /
ALL_GATHER nodes between two processes over acl_host's HCCL, and the golden tests through Ray
(cann_llm.tp_model): logits of 2 and 4 ranks against one process on a tiny GGUF whose head counts
divide, 2 ranks on the default model (9 heads, 3 KV heads: an uneven split), the CLI, and a rank
that dies (an error at once, never a hang)."""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from tiny_models import write_tiny_model


def rel_err(a, b) -> float:
    return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b.astype(np.float64)))


# ---- the split --------------------------------------------------------------------------------

def test_layout_keeps_kv_groups_and_aligns_ffn_and_vocabulary(default_model_path):
    from cann_llm.loader import open_gguf
    from cann_llm.tensor_parallel import Shard, TPError, plan_layout
    hp = open_gguf(default_model_path).hparams          # 9 heads, 3 KV heads, n_ff 1536
    lay = plan_layout(hp, 2)
    assert lay.kv_heads == ((0, 1), (1, 3)) and lay.q_per_kv == 3
    assert lay.ff == ((0, 768), (768, 1536)) and lay.vocab_rows == hp.n_vocab // 2
    three = plan_layout(hp, 3)
    assert three.kv_heads == ((0, 1), (1, 2), (2, 3))
    assert all(a % 32 == 0 and b % 32 == 0 for a, b in three.ff) and three.ff[-1][1] == 1536
    shards = [Shard(hp, lay, r) for r in range(2)]
    assert [s.hparams.n_head for s in shards] == [3, 6]
    assert [s.hparams.n_head_kv for s in shards] == [1, 2]
    assert sum(s.hparams.n_ff for s in shards) == hp.n_ff
    sl = shards[1].slice_of("blk.4.attn_output.weight")
    assert sl.cols == (3 * 64, 6 * 64) and not sl.rows
    assert shards[1].slice_of("blk.4.attn_k.weight").rows == ((64, 128),)
    assert shards[0].slice_of("blk.0.ffn_down.weight").cols == (0, 768)
    assert shards[1].slice_of("token_embd.weight").rows == ((24576, 24576),)
    assert shards[1].slice_of("blk.0.attn_norm.weight") == type(sl)()     # every rank, whole
    with pytest.raises(TPError, match="3 KV heads.*at most 3 ranks"):
        plan_layout(hp, 4)
    with pytest.raises(TPError, match="at least 1"):
        plan_layout(hp, 0)


def test_layout_of_fused_projections_moe_and_padding(tmp_path):
    from cann_llm.loader import open_gguf
    from cann_llm.tensor_parallel import Shard, TPError, plan_layout
    phi = open_gguf(write_tiny_model(tmp_path / "phi.gguf", arch="phi3", n_embd=128, n_head=8,
                                     n_head_kv=4, n_ff=256, n_vocab=301)).hparams
    lay = plan_layout(phi, 4)
    assert lay.vocab_rows == 76                      # 301 rows: 76, 76, 76 and 73 + 3 padding
    last = Shard(phi, lay, 3)
    assert last.slice_of("token_embd.weight").rows == ((228, 73),)
    assert last.slice_of("token_embd.weight").pad_rows == 3
    d = phi.head_dim
    qkv = Shard(phi, lay, 1).slice_of("blk.0.attn_qkv.weight").rows      # [Q | K | V] rows
    assert qkv == ((2 * d, 2 * d), (8 * d + d, d), (12 * d + d, d))
    assert Shard(phi, lay, 1).slice_of("blk.0.ffn_up.weight").rows == ((64, 64), (256 + 64, 64))
    moe = open_gguf(write_tiny_model(tmp_path / "moe.gguf", arch="qwen3moe")).hparams
    with pytest.raises(TPError, match="mixture-of-experts"):
        plan_layout(moe, 2)


# ---- the collectives between two processes (no Ray) ----------------------------------------

def _collective_rank(rank: int, root_queue, result_queue) -> None:
    os.environ.update(CANN_LLM_HOST_DEVICES="2", ASCEND_RT_VISIBLE_DEVICES=str(rank),
                      CANN_LLM_HCCL_TIMEOUT="20")
    try:
        from cann_llm import backend as be
        dev = be.Registry().devices[0]
        with dev.init_backend() as stream, be.Context(16) as ctx:
            if rank == 0:
                info = stream.comm_root_info()
                root_queue.put(info)
                root_queue.put(info)
            stream.comm_init(2, rank, root_queue.get() if rank else info)
            a = ctx.new_tensor(be.TensorType.F32, [5, 3])
            h = ctx.new_tensor(be.TensorType.F16, [7])
            g = ctx.new_tensor(be.TensorType.F32, [4, 2])
            outs = [ctx.all_reduce(a), ctx.all_reduce(h), ctx.all_gather(g, 2)]
            graph = ctx.new_graph(16)
            for t in outs:
                graph.build_forward(t)
            buf = ctx.alloc_tensors(dev.buffer_type)
            a.set(np.arange(15, dtype=np.float32).reshape(3, 5) * (rank + 1))
            h.set(np.full(7, 0.25 * (rank + 1), dtype=np.float16))
            g.set(np.full((2, 4), rank + 10, dtype=np.float32))
            stream.graph_compute(graph)
            stream.synchronize()
            result_queue.put((rank, [t.get() for t in outs]))
            buf.close()
    except BaseException as exc:        # the parent reports it
        result_queue.put((rank, repr(exc)))


def test_all_reduce_and_all_gather_between_two_processes():
    """ALL_REDUCE (F32, F16) and ALL_GATHER nodes of one graph on two ranks, each a process
    with its own device and runtime, the communicator made from rank 0's RootInfo."""
    ctx = mp.get_context("spawn")
    root_q, result_q = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=_collective_rank, args=(r, root_q, result_q)) for r in range(2)]
    for p in procs:
        p.start()
    results = dict(result_q.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    for rank in (0, 1):
        got = results[rank]
        assert not isinstance(got, str), f"rank {rank}: {got}"
        reduced, half, gathered = got
        np.testing.assert_array_equal(reduced, np.arange(15, dtype=np.float32).reshape(3, 5) * 3)
        np.testing.assert_array_equal(half, np.full(7, 0.75, dtype=np.float16))
        assert gathered.shape == (2, 1, 2, 4)       # numpy order of [4, 2, 1, 2]: rank outermost
        np.testing.assert_array_equal(gathered[0], np.full((1, 2, 4), 10, dtype=np.float32))
        np.testing.assert_array_equal(gathered[1], np.full((1, 2, 4), 11, dtype=np.float32))


def test_a_collective_without_a_communicator_is_an_error(clm, device, backend):
    with clm.Context(8) as ctx:
        a = ctx.new_tensor(clm.TensorType.F32, [8])
        out = ctx.all_reduce(a)
        graph = ctx.new_graph(8).build_forward(out)
        buf = ctx.alloc_tensors(device.buffer_type)
        a.set(np.ones(8, dtype=np.float32))
        with pytest.raises(clm.CannError, match="has no communicator"):
            backend.graph_compute(graph)
            backend.synchronize()
        buf.close()
        with pytest.raises(clm.CannError, match="needs a float tensor"):
            ctx.all_gather(ctx.new_tensor(clm.TensorType.I32, [4]), 2)


# ---- through Ray ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ray_cluster():
    """One local Ray cluster for the module with 4 NPU resources (acl_host devices)."""
    import ray          # the scale extra, part of the test extra
    logging.getLogger("ray._private.accelerators.npu").setLevel(logging.CRITICAL)
    ray.init(address="local", resources={"NPU": 4}, include_dashboard=False,
             logging_level=logging.ERROR)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    """Head counts that 2 and 4 divide, Q8_0 matrices (block-aligned column slices), untied."""
    return write_tiny_model(tmp_path_factory.mktemp("tp") / "tiny.gguf", n_embd=128, n_head=8,
                            n_head_kv=4, n_ff=256, n_layer=2, weight_type=QT.Q8_0, tied=False,
                            weight_scale=0.05, n_vocab=301)


KW = dict(n_ctx=256, n_batch=64)


def test_two_and_four_ranks_give_the_logits_of_one(ray_cluster, tiny_path):
    import cann_llm
    from cann_llm.tp_model import TPModel
    ids = list(range(3, 300, 7))                          # every vocabulary shard's tokens
    with cann_llm.load(tiny_path, **KW) as one:
        ref = one.logits(ids)
        ref_embd = one.embed(ids[:9])
    for n in (2, 4):
        tp = TPModel(tiny_path, n, **KW)
        try:
            assert tp._dag is not None                  # the steps go through a compiled graph
            got = tp.logits(ids)
            assert got.shape == ref.shape
            err = rel_err(got, ref)
            print(f"{n} ranks: relative error {err:.2e}, max |diff| {np.abs(got - ref).max():.2e}")
            assert err < 5e-3
            assert (got.argmax(axis=1) == ref.argmax(axis=1)).all()
            np.testing.assert_allclose(tp.embed(ids[:9]), ref_embd, atol=5e-3)
            assert tp.devices == [f"CANN{d}" for d in tp.rank_devices]
            assert len(set(tp.rank_devices)) == n        # one device per rank
        finally:
            tp.close()


def test_two_ranks_give_the_logits_and_tokens_of_one_on_the_default_model(ray_cluster,
                                                                            default_model_path):
    """SmolLM2-135M: 9 heads / 3 KV heads split 3 + 6 (whole KV groups), the FFN 768 + 768,
    the tied embedding and output by vocabulary; logits within F16 rounding of one process and
    the same greedy answer."""
    import cann_llm
    from cann_llm.tp_model import TPModel
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    with cann_llm.load(default_model_path, **KW) as one:
        ids = one.tokenize("The quick brown fox jumps over the lazy dog because")
        ref = one.logits(ids)
        ref_text = "".join(one.chat(messages, max_tokens=24, temperature=0))
    tp = TPModel(default_model_path, 2, **KW)
    try:
        got = tp.logits(ids)
        err, worst = rel_err(got, ref), float(np.abs(got - ref).max())
        ulp = np.spacing(np.float16(np.abs(ref).max()))     # one F16 step at the logits' scale
        print(f"default model, 2 ranks: relative error {err:.2e}, max |diff| {worst:.3f} "
              f"({worst / ulp:.1f} F16 steps at |logit| {np.abs(ref).max():.1f})")
        assert err < 5e-3 and worst < 16 * ulp
        assert (got.argmax(axis=1) == ref.argmax(axis=1)).all()
        assert "".join(tp.chat(messages, max_tokens=24, temperature=0)) == ref_text
    finally:
        tp.close()


def test_a_dead_rank_is_an_error_at_once(ray_cluster, tiny_path):
    """Rank 1's process is killed: the next step raises RankError within seconds (rank 0's HCCL
    wait sees the process gone), later steps refuse at once."""
    from cann_llm.tp_model import RankError, TPModel
    tp = TPModel(tiny_path, 2, compiled_graph=False, **KW)     # plain actor calls, this time
    try:
        assert tp._dag is None
        tp.logits([5, 6, 7])
        pid = ray_cluster.get(tp._actors[1].__ray_call__.remote(lambda rank: os.getpid()))
        os.kill(pid, signal.SIGKILL)                  # the process of rank 1 dies
        for _ in range(100):
            if not os.path.exists(f"/proc/{pid}"):
                break
            time.sleep(0.05)
        t0 = time.perf_counter()
        with pytest.raises(RankError, match="rank failed"):
            tp.logits([5, 6, 7])
        assert time.perf_counter() - t0 < 30          # CANN_LLM_HCCL_TIMEOUT is 60: no wait
        with pytest.raises(RankError, match="failed earlier"):
            list(tp.generate([5, 6], max_tokens=2))
    finally:
        tp.close()


def _cli(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "cann_llm.cli", *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          env={**os.environ, **(env or {})})


def test_cli_run_with_tensor_parallel_answers_as_one_process(ray_cluster, default_model_path):
    """`cann-llm run --tensor-parallel 2` (joining the module's cluster through RAY_ADDRESS)
    prints the greedy answer of a single process."""
    args = ["run", "-p", "Name a color.", "-n", "12", "--temp", "0", "-c", "256"]
    single = _cli(*args)
    assert single.returncode == 0, single.stderr
    address = ray_cluster.get_runtime_context().gcs_address
    tp = _cli(*args, "--tensor-parallel", "2", env={"RAY_ADDRESS": address})
    assert tp.returncode == 0, tp.stderr
    assert tp.stdout == single.stdout and tp.stdout.strip()


def test_serve_with_tensor_parallel_answers_as_one_process(ray_cluster, default_model_path,
                                                             monkeypatch):
    """`cann-llm serve --tensor-parallel 2`: the engine thread loads the ranks; a greedy chat
    completion is the single process's answer, and SIGTERM still drains and exits 0."""
    import cann_llm
    from serve_util import Server
    messages = [{"role": "user", "content": "Name a color."}]
    with cann_llm.load(default_model_path, n_ctx=512) as one:
        ref = "".join(one.chat(messages, max_tokens=12, temperature=0))
    monkeypatch.setenv("RAY_ADDRESS", ray_cluster.get_runtime_context().gcs_address)
    server = Server(default_model_path, "--tensor-parallel", "2", "-c", "512", "--parallel", "2")
    try:
        assert "tensor parallel over CANN" in server.log()
        r = server.client.post("/v1/chat/completions", json={
            "messages": messages, "max_tokens": 12, "temperature": 0})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == ref
    finally:
        assert server.stop() == 0, server.log()


def test_cli_refuses_a_split_it_cannot_make(default_model_path):
    bad = _cli("run", "-p", "hi", "--tensor-parallel", "4")
    assert bad.returncode == 1 and "3 KV heads" in bad.stderr and "at most 3" in bad.stderr
    assert bad.stderr.count("\n") == 1
    zero = _cli("run", "-p", "hi", "--tensor-parallel", "0")
    assert zero.returncode == 1 and "--tensor-parallel must be >= 1" in zero.stderr
    both = _cli("run", "-p", "hi", "--tensor-parallel", "2", "--device", "CANN0,CANN1")
    assert both.returncode == 1 and "cannot be combined with --device" in both.stderr
