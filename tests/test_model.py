"""cann_llm.load / Model: devices (CANN0, two devices, the CPU reference, a backend that declines
ops), attention paths, batch invariance, qwen2 (QKV bias) and clear errors. Tiny random models
(tests/tiny_models.py) for the slow CPU reference; the default model elsewhere."""

import json
import pathlib

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

import cann_llm
from cann_llm import ContextFullError
from cann_llm.backend import Op
from cann_llm.model import Batch, Model

from conftest import GOLDEN_Q4_1 as GOLDEN, run_python
from tiny_models import write_tiny_model



@pytest.fixture(scope="module")
def default_path(default_model_path):
    return str(default_model_path)


@pytest.fixture(scope="module")
def smol(default_path):
    m = cann_llm.load(default_path, n_ctx=512, n_batch=64)
    yield m
    m.close()


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return str(write_tiny_model(tmp_path_factory.mktemp("m") / "tiny.gguf", arch="llama",
                                n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=128))


def _prompt():
    return json.loads(GOLDEN.read_text())["greedy"][1]["prompt_ids"]


def test_logits_shape_and_fresh_sequence(smol):
    ids = _prompt()
    a = smol.logits(ids)
    assert a.shape == (len(ids), smol.hparams.n_vocab) and a.dtype == np.float32
    b = smol.logits(ids)                        # a fresh sequence each time
    np.testing.assert_array_equal(a, b)


def test_cpu_reference_equals_device(tiny_llama):
    ids = [1, 5, 9, 200, 17, 3]
    with Model(tiny_llama, n_ctx=64) as dev, Model(tiny_llama, device="CPU", n_ctx=64) as cpu:
        np.testing.assert_allclose(dev.logits(ids), cpu.logits(ids), rtol=0, atol=2e-3)


def test_declining_backend_splits_to_cpu(tiny_llama):
    ids = [1, 5, 9, 200, 17, 3]
    with Model(tiny_llama, n_ctx=64) as dev, \
            Model(tiny_llama, n_ctx=64, decline={Op.RMS_NORM, Op.ROPE}) as mixed:
        np.testing.assert_allclose(mixed.logits(ids), dev.logits(ids), rtol=0, atol=2e-3)
        fg, plan = next(iter(mixed._graphs.values()))
        assert plan.counts()["CPU"] > 0 and len(plan.splits) > 10
        assert "split" in plan.describe()


@pytest.mark.parametrize("flash_attn", [True, False])
def test_f32_kv_cache_equals_cpu(tiny_llama, flash_attn):
    """-ctk/-ctv f32: FLASH_ATTN_EXT on CANN takes F16 K/V only, so with flash attention each
    layer's attention runs on the CPU reference (SET_ROWS stays on the device); the soft_max path
    runs on the device. Either way the logits equal the CPU reference's with the same cache."""
    ids = [1, 5, 9, 200, 17, 3]
    kw = dict(n_ctx=64, flash_attn=flash_attn, type_k="f32", type_v="f32")
    with Model(tiny_llama, **kw) as dev, Model(tiny_llama, device="CPU", **kw) as cpu, \
            Model(tiny_llama, n_ctx=64, flash_attn=flash_attn) as f16:
        assert dev.kv.k[0].type.name == "F32" and dev.kv.v[1].type.name == "F32"
        a = dev.logits(ids)
        np.testing.assert_allclose(a, cpu.logits(ids), rtol=0, atol=1e-5)
        np.testing.assert_allclose(a, f16.logits(ids), rtol=0, atol=2e-3)   # F16 rounding only
        fg, plan = next(iter(dev._graphs.values()))
        on_cpu = {n.name for sp in plan.splits if sp.slot == dev.sched.cpu
                  for n in sp.nodes}
        n_layer = dev.hparams.n_layer
        assert on_cpu == ({f"__fattn__-{il}" for il in range(n_layer)} if flash_attn else set())
        assert "(K f32, V f32)" in dev.describe()


def test_unsupported_kv_type_is_refused_before_loading(tiny_llama):
    with pytest.raises(ValueError, match=r"type_k='q8_0': KV cache type q8_0 is not supported "
                                         r"\(SET_ROWS on CANN .*\); supported: f16, f32"):
        cann_llm.load(tiny_llama, n_ctx=64, type_k="q8_0")


def test_qwen2_tiny_runs_with_qkv_bias(tmp_path):
    path = write_tiny_model(tmp_path / "q.gguf", arch="qwen2", n_embd=64, n_layer=2, n_head=4,
                            n_head_kv=2, n_ff=128)
    ids = [1, 7, 42, 99]
    with Model(path, n_ctx=64) as dev, Model(path, device="CPU", n_ctx=64) as cpu:
        # Q, K and V load as one tensor, their biases as one too (test_weight_fusion)
        assert dev.hparams.qkv_bias and "blk.0.attn_qkv.bias" in dev.weights.tensors
        np.testing.assert_allclose(dev.logits(ids), cpu.logits(ids), rtol=0, atol=2e-3)


def test_soft_max_path_equals_flash(default_path, smol):
    """The SOFT_MAX attention path and FLASH_ATTN_EXT agree on every logit. They round
    differently (F16 activations downstream turn a last-bit difference into an F16 step), so the
    bound is the largest difference seen over the golden prompts: 0.031-0.079 with glibc's expf in
    SwiGlu, 0.032-0.070 with acl_host's own exp; 0.05 had only held for this prompt."""
    ids = _prompt()
    with cann_llm.load(default_path, n_ctx=512, n_batch=64, flash_attn=False) as sm:
        np.testing.assert_allclose(sm.logits(ids), smol.logits(ids), rtol=0, atol=0.1)


def test_same_tokens_alone_or_in_a_batch(smol):
    a, b = _prompt(), json.loads(GOLDEN.read_text())["greedy"][3]["prompt_ids"]
    alone = list(smol.generate(a, max_tokens=6, temperature=0))
    smol.kv.clear()
    smol._seq_tokens = []
    n = len(a) + len(b)
    batch = Batch(a + b, list(range(len(a))) + list(range(len(b))), [0] * len(a) + [1] * len(b),
                  [False] * (len(a) - 1) + [True] + [False] * (len(b) - 1) + [True])
    logits = smol.decode(batch)
    assert n == len(batch) and logits.shape[0] == 2
    toks, pos = [int(logits[0].argmax()), int(logits[1].argmax())], [len(a), len(b)]
    got = [toks[0]]
    for _ in range(5):
        out = smol.decode(Batch(toks, pos, [0, 1], [True, True]))
        toks = [int(out[0].argmax()), int(out[1].argmax())]
        pos = [pos[0] + 1, pos[1] + 1]
        got.append(toks[0])
    smol.kv.clear()
    assert got == alone


def test_generate_streams_and_stops(smol):
    ids = _prompt()
    out = list(smol.generate(ids, max_tokens=5, temperature=0))
    assert len(out) == 5
    t = smol.timings()
    assert t["prompt_tokens"] == len(ids) and t["gen_tokens"] == 5
    first = out[0]
    assert list(smol.generate(ids, max_tokens=5, temperature=0, stop=[first])) == []
    text = "".join(smol.chat([{"role": "user", "content": "Say hi"}], max_tokens=4,
                             temperature=0))
    assert isinstance(text, str) and text


def test_decode_graph_is_reused(smol):
    ids = _prompt()
    list(smol.generate(ids, max_tokens=3, temperature=0))
    n_graphs = len(smol._graphs)
    plan = smol._graphs[next(reversed(smol._graphs))][1]
    list(smol.generate(ids, max_tokens=8, temperature=0))
    assert len(smol._graphs) <= n_graphs + 1
    assert smol._graphs[next(reversed(smol._graphs))][1] is plan


def test_prompt_longer_than_context(default_path):
    with cann_llm.load(default_path, n_ctx=32, n_batch=32) as m:
        with pytest.raises(ContextFullError, match="n_ctx=32"):
            m.logits(list(range(10, 50)))
        with pytest.raises(ContextFullError):
            list(m.generate(list(range(10, 50)), max_tokens=2))
        with pytest.raises(ContextFullError, match="context"):
            list(m.generate(list(range(10, 40)), max_tokens=10, temperature=0))


def _mapped_files():
    """Counter of the files mapped in this process, one per mapping."""
    from collections import Counter
    with open("/proc/self/maps") as f:
        return Counter(line.split(maxsplit=5)[5].strip() for line in f if len(line.split()) == 6)


def test_close_unmaps_the_models_files_at_once(default_path):
    """close() releases the GGUF's map and the weight cache's image then, not when a garbage
    collection finds the model's reference cycles: a server that swaps models would otherwise
    keep the old one's file pages in its resident set. (Other tests' models may map the same
    files: the mappings are counted.)"""
    import gc
    import os
    real = os.path.realpath(default_path)
    gc.disable()        # what a collection would free does not count
    try:
        before = _mapped_files()
        m = cann_llm.load(default_path, n_ctx=64)
        list(m.generate([1, 2, 3], max_tokens=2))
        assert _mapped_files()[real] > before[real]
        m.close()
        after = _mapped_files()
        grown = {p: n - before[p] for p, n in after.items()
                 if n > before[p] and (p == real or p.endswith(".clmw"))}
        assert not grown, grown
    finally:
        gc.enable()


def test_n_ctx_beyond_training(default_path):
    with pytest.raises(ValueError, match="training context"):
        cann_llm.load(default_path, n_ctx=10 ** 6)


def test_unknown_device(default_path):
    with pytest.raises(ValueError, match="CANN7"):
        cann_llm.load(default_path, device="CANN7", n_ctx=64)


_SUB = """
import json, numpy as np, cann_llm
ids = json.load(open({golden!r}))["greedy"][1]["prompt_ids"]
one = cann_llm.load({path!r}, n_ctx=64, n_batch=64).logits(ids)
m = cann_llm.load({path!r}, device="CANN0,CANN1", n_ctx=64, n_batch=64)
two = m.logits(ids)
fg, plan = next(iter(m._graphs.values()))
print(sorted(plan.counts()), len(plan.splits), float(np.abs(one - two).max()))
"""


def test_two_devices_equal_one(default_path):
    r = run_python(_SUB.format(golden=str(GOLDEN), path=default_path),
                   env={"CANN_LLM_HOST_DEVICES": "2"}, timeout=300)
    assert r.returncode == 0, r.stderr
    names, n_splits, diff = r.stdout.strip().rsplit(" ", 2)[0], *r.stdout.split()[-2:]
    assert "'CANN1'" in r.stdout and int(n_splits) >= 2
    assert float(diff) == 0.0


def test_out_of_device_memory(default_path):
    code = (f"import cann_llm\ntry:\n    cann_llm.load({default_path!r}, n_ctx=64)\n"
            "except MemoryError as e:\n    print('ERR', e)\n")
    # the weights are copied to device memory (from the weight cache they would be mapped)
    r = run_python(code, env={"CANN_LLM_HOST_MEMORY": "32M", "CANN_LLM_WEIGHT_CACHE": "off"})
    assert r.returncode == 0, r.stderr
    assert "ERR" in r.stdout and "memory" in r.stdout.lower()


def test_compute_buffer_out_of_memory_fails_the_load(tmp_path):
    """The load reserves the worst case's compute buffers (n_batch tokens over the whole
    context): weights that fit and a reserve that does not fail the load, naming the buffer."""
    path = write_tiny_model(tmp_path / "v.gguf", arch="qwen2", n_embd=64, n_layer=1, n_head=4,
                            n_head_kv=2, n_ff=128, n_vocab=70016, weight_type=QT.Q8_0)
    code = (f"import cann_llm\ntry:\n    cann_llm.load({str(path)!r}, n_ctx=512, n_batch=512)\n"
            "except MemoryError as e:\n    print('ERR', e)\nelse:\n    print('LOADED')\n")
    # 512 rows of 70016 F32 logits alone are 137 MiB
    r = run_python(code, env={"CANN_LLM_HOST_MEMORY": "96M", "CANN_LLM_WEIGHT_CACHE": "off"})
    assert r.returncode == 0, r.stderr
    assert "ERR cannot allocate" in r.stdout and "compute buffer on CANN0" in r.stdout, r.stdout
    ok = run_python(code.replace("n_batch=512", "n_batch=64"),
                    env={"CANN_LLM_HOST_MEMORY": "96M", "CANN_LLM_WEIGHT_CACHE": "off"})
    assert ok.returncode == 0 and "LOADED" in ok.stdout, ok.stdout + ok.stderr


@pytest.mark.parametrize("wtype", [QT.Q8_0, QT.Q4_1, QT.F16])
def test_large_vocabulary_logits_for_every_row(tmp_path, wtype):
    """A qwen2-shaped model whose output projection has more than 65535 rows (the
    WeightQuantBatchMatmulV2 column limit: the backend splits it): logits for every prompt row,
    and for a batch of sequences, agree with the CPU reference."""
    path = write_tiny_model(tmp_path / "v.gguf", arch="qwen2", n_embd=64, n_layer=1, n_head=4,
                            n_head_kv=2, n_ff=128, n_vocab=70016, weight_type=wtype, tied=False)
    ids = [1, 7, 42, 69999, 65535, 65536, 3]
    with Model(path, n_ctx=64) as dev, Model(path, device="CPU", n_ctx=64) as cpu:
        assert dev.hparams.n_vocab == 70016
        a, b = dev.logits(ids), cpu.logits(ids)
        assert a.shape == (len(ids), 70016)
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-3)
        batch = Batch([5, 6, 7], [0, 0, 0], [0, 1, 2], [True, True, True])
        dev.kv.clear()
        rows = dev.decode(batch)
        for s, tok in enumerate([5, 6, 7]):
            np.testing.assert_array_equal(rows[s], dev.logits([tok])[0])   # batch-invariant


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("scan", [False, True])
def test_a_non_finite_logit_anywhere_names_its_row(bad, scan):
    """decode()'s check, and a decode step's per-row scan (with or without bans) alike."""
    from cann_llm.model import NonFiniteLogitsError, _check_logits, _scan_logits
    pos, seqs = np.array([4, 5, 6]), np.array([0, 1, 2])
    bans = [None, np.array([37], np.int64), np.zeros(0, np.int64)]

    def check(logits):
        return _scan_logits(logits, pos, seqs, "m.gguf", bans) if scan else \
            _check_logits(logits, pos, seqs, "m.gguf")
    logits = np.zeros((3, 50), np.float32)
    logits[:, 20] = 1.0
    assert check(logits) == ([None, 20, 20] if scan else None)
    logits[1, 37] = bad
    with pytest.raises(NonFiniteLogitsError, match=r"position 5 \(sequence 1\) hold 1 NaN/inf"):
        check(logits)
