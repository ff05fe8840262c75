"""The CANN backend's ADD + RMS_NORM + MUL(weight) fusion (one aclnnAddRmsNorm, CANN_LLM_FUSION):
taken in llama-style graphs (the backend counts the fused launches), the same logits bit for bit as
the three separate launches (acl_host computes both the same way), and off while profiling per
node. CANN_LLM_FUSION is read when a backend is created, so each model below gets its own."""

import numpy as np
import pytest

from cann_llm import profiler
from cann_llm.model import Model

from tiny_models import write_tiny_model


def _fused(model) -> int:
    return sum(slot.backend.stats()["fused_add_rms_norm"] for slot in model.sched.slots[:-1])


def _run(path, monkeypatch, fusion: str, ids, n_decode=0, **kw):
    """Prompt logits, then n_decode greedy single-token steps' logits, and the fused count."""
    monkeypatch.setenv("CANN_LLM_FUSION", fusion)
    with Model(path, n_ctx=128, **kw) as m:
        out = [m.logits(ids)]
        seq = list(ids)
        for _ in range(n_decode):
            seq.append(int(np.argmax(out[-1][-1])))
            out.append(m.logits(seq)[-1:])
        n = _fused(m)
        if n_decode:    # the first graph again: a replay of its capture gives the same logits
            np.testing.assert_array_equal(m.logits(ids), out[0])
            stats = m.sched.slots[0].backend.stats()
            assert stats["graph_replays"] > 0 and _fused(m) == n   # counted when issued only
        return out, n


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return str(write_tiny_model(tmp_path_factory.mktemp("m") / "tiny.gguf", arch="llama",
                                n_embd=64, n_layer=3, n_head=4, n_head_kv=2, n_ff=128))


def test_tiny_llama_fused_equals_unfused(tiny_llama, monkeypatch):
    ids = [1, 5, 9, 200, 17, 3]
    on, n_on = _run(tiny_llama, monkeypatch, "1", ids, n_decode=2)
    off, n_off = _run(tiny_llama, monkeypatch, "0", ids, n_decode=2)
    assert n_off == 0
    # per graph, every norm but the first layer's attn_norm (which follows the embedding's
    # GET_ROWS): each layer's ffn_inp -> ffn_norm, each residual -> the next layer's attn_norm or
    # the output norm: 2 * n_layer = 6
    assert n_on > 0 and n_on % 6 == 0
    for a, b in zip(on, off):
        np.testing.assert_array_equal(a, b)


def test_default_model_fused_equals_unfused(default_model_path, monkeypatch):
    """30 layers: 60 of the 61 norms per graph (the output norm's MUL takes the last residual's
    memory, so that one writes its xOut to a pool temporary)."""
    ids = [1, 504, 3060, 314, 253, 1167, 30, 2]
    on, n_on = _run(str(default_model_path), monkeypatch, "1", ids, n_decode=2)
    off, n_off = _run(str(default_model_path), monkeypatch, "0", ids, n_decode=2)
    assert n_on > 0 and n_on % 60 == 0 and n_off == 0
    for a, b in zip(on, off):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("value", ["0", "off", "false", "no"])
def test_switch_values(tiny_llama, monkeypatch, value):
    _, n = _run(tiny_llama, monkeypatch, value, [1, 2, 3])
    assert n == 0


def test_off_while_profiling(tiny_llama, monkeypatch, tmp_path):
    """The profiler times each node, so a profiled run launches the three nodes separately (and
    its trace shows the RMS_NORMs); the logits stay the same."""
    ids = [1, 5, 9, 200, 17, 3]
    want, n_on = _run(tiny_llama, monkeypatch, "1", ids)
    assert n_on > 0
    profiler.start(str(tmp_path / "trace.json"))
    try:
        got, n_prof = _run(tiny_llama, monkeypatch, "1", ids)
    finally:
        profiler.stop()
    assert n_prof == 0
    np.testing.assert_array_equal(got[0], want[0])
    assert "RMS_NORM" in (tmp_path / "trace.json").read_text()


# ---- the scheduler's graphs: the RMS_NORM's own result is needed elsewhere, so no fusion ----------
def _norm_graph(device, monkeypatch, fusion, decline=(), norm_out=False, reader=False):
    """ADD -> RMS_NORM -> MUL(weight) on the device; with `reader` a SILU of the norm too (on the
    CPU when UNARY is declined: another split reads the norm), with `norm_out` the caller reads
    the norm. Returns the outputs and the backend's fused count."""
    from cann_llm import backend as be
    from cann_llm.backend import TensorType
    from cann_llm.sched import DeviceSlot, Scheduler
    monkeypatch.setenv("CANN_LLM_FUSION", fusion)
    rng = np.random.default_rng(3)
    wctx = be.Context(8)
    w = wctx.new_tensor(TensorType.F32, [64], name="w")
    wbuf = wctx.alloc_tensors(device.buffer_type)
    wbuf.usage = be.BufferUsage.WEIGHTS
    w.set(1 + 0.1 * rng.standard_normal(64).astype(np.float32))
    slot = DeviceSlot(device, decline=set(decline))
    try:
        ctx = be.Context(64)
        x = ctx.new_tensor(TensorType.F32, [64, 5], name="x").mark_input()
        y = ctx.new_tensor(TensorType.F32, [64, 5], name="y").mark_input()
        s = ctx.add(x, y)
        n = ctx.rms_norm(s, 1e-5)
        m = ctx.mul(n, w)
        g = ctx.new_graph(64)
        g.build_forward(m)
        outputs = {"m": m, "s": s}
        if reader:
            t = ctx.silu(n)
            g.build_forward(t)
            outputs["t"] = t
        if norm_out:
            outputs["n"] = n
        plan = Scheduler([slot]).plan(g, {"x": x, "y": y}, outputs)
        vals = {"x": rng.standard_normal((5, 64)).astype(np.float32),
                "y": rng.standard_normal((5, 64)).astype(np.float32)}
        got = {k: v.copy() for k, v in plan.run(vals).items()}
        return got, slot.backend.stats()["fused_add_rms_norm"]
    finally:
        slot.close()
        wbuf.close()
        wctx.close()


@pytest.mark.parametrize("case", [dict(), dict(reader=True), dict(reader=True, decline={"UNARY"}),
                                  dict(norm_out=True)])
def test_norm_read_elsewhere_is_not_fused(device, monkeypatch, case):
    from cann_llm.backend import Op
    kw = dict(case)
    kw["decline"] = {getattr(Op, d) for d in kw.get("decline", ())}
    on, n_on = _norm_graph(device, monkeypatch, "1", **kw)
    off, n_off = _norm_graph(device, monkeypatch, "0", **kw)
    assert n_off == 0
    assert n_on > 0 if not (kw.get("reader") or kw.get("norm_out")) else n_on == 0
    assert on.keys() == off.keys()
    for k in on:
        np.testing.assert_array_equal(on[k], off[k])
