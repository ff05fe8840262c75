"""ROPE as one aclnnRotaryPositionEmbedding against the composition it replaces (CANN_LLM_ROPE):
the same bits over normal and NeoX, freq_factors, YaRN, token counts, positions, head counts and
a strided x, with the launch counted (stats rope_fused) on the fused backend only; partial
rotation and F16 keep the composition; a bad CANN_LLM_ROPE is refused at backend init.

Shapes are ggml order (ne[0] fastest); numpy arrays the reverse.
"""

import os

import numpy as np
import pytest

rng = np.random.default_rng(2026)


def _backend(device, rope):
    """A backend created under CANN_LLM_ROPE=rope (None: unset); the variable is read at init."""
    old = os.environ.pop("CANN_LLM_ROPE", None)
    try:
        if rope is not None:
            os.environ["CANN_LLM_ROPE"] = rope
        return device.init_backend()
    finally:
        os.environ.pop("CANN_LLM_ROPE", None)
        if old is not None:
            os.environ["CANN_LLM_ROPE"] = old


@pytest.fixture(scope="module")
def backends(device):
    fused, composed = _backend(device, None), _backend(device, "composed")
    yield fused, composed
    fused.close()
    composed.close()


def _rope_both(device, backends, x, pos, params, ff=None, x_type="F32", qkv_view=False):
    """The ROPE of x (numpy (ne3, tokens, heads, head_dim)) on both backends: (fused, composed)
    outputs as raw arrays and the number of fused launches each made. qkv_view: x is the first
    third of each token row of a wider tensor (a strided view, as a fused QKV projection gives)."""
    from cann_llm import backend as clm
    T = clm.TensorType
    ne3, n_tok, n_head, head_dim = x.shape
    npt = np.float16 if x_type == "F16" else np.float32
    outs, launches = [], []
    for be in backends:
        before = be.stats()["rope_fused"]
        with clm.Context() as ctx:
            if qkv_view:
                big = ctx.new_tensor(T[x_type], (3 * head_dim * n_head, n_tok, ne3))
                es = 2 if x_type == "F16" else 4
                row = 3 * head_dim * n_head * es
                tx = ctx.view_4d(big, (head_dim, n_head, n_tok, ne3), (head_dim * es, row, row * n_tok))
            else:
                tx = ctx.new_tensor(T[x_type], (head_dim, n_head, n_tok, ne3))
            tp = ctx.new_tensor(T.I32, (n_tok,))
            tf = ctx.new_tensor(T.F32, (head_dim // 2,)) if ff is not None else None
            r = ctx.rope_ext(tx, tp, tf, **params)
            graph = ctx.new_graph().build_forward(r)
            assert device.supports_op(r)
            with ctx.alloc_tensors(device.buffer_type):
                if qkv_view:
                    wide = np.zeros((ne3, n_tok, 3 * n_head * head_dim), dtype=npt)
                    wide[..., :n_head * head_dim] = x.reshape(ne3, n_tok, -1)
                    big.set(wide)
                else:
                    tx.set(x.astype(npt))
                tp.set(pos)
                if tf is not None:
                    tf.set(ff)
                be.graph_compute(graph)
                be.synchronize()
                outs.append(np.asarray(r.get()).copy())
        launches.append(be.stats()["rope_fused"] - before)
    return outs, launches


CASES = {
    "normal": dict(mode=0),
    "neox": dict(mode=2),
    "neox-freq": dict(mode=2, freq_base=1e6, freq_scale=0.5),
    "yarn-neox": dict(mode=2, n_ctx_orig=4096, freq_scale=0.25, ext_factor=1.0, beta_fast=32.0, beta_slow=1.0),
    "yarn-normal": dict(mode=0, n_ctx_orig=2048, freq_scale=0.5, ext_factor=0.5, attn_factor=0.9,
                        beta_fast=16.0, beta_slow=2.0),
    "freq_factors-neox": dict(mode=2, ff=True),
    "freq_factors-normal": dict(mode=0, ff=True),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("n_tok, n_head, head_dim", [(1, 9, 64), (5, 14, 64), (67, 2, 128), (8, 3, 34)])
def test_fused_rope_has_the_bits_of_the_composition(device, backends, case, n_tok, n_head, head_dim):
    params = dict(CASES[case])
    use_ff = params.pop("ff", False)
    params["n_dims"] = head_dim
    x = (rng.standard_normal((1, n_tok, n_head, head_dim)) * 3).astype(np.float32)
    pos = rng.integers(0, 30000, n_tok).astype(np.int32)
    ff = (1.0 + rng.random(head_dim // 2) * 8).astype(np.float32) if use_ff else None
    (fused, composed), (n_fused, n_composed) = _rope_both(device, backends, x, pos, params, ff)
    assert n_fused >= 1 and n_composed == 0   # counted when issued (eagerly and when captured)
    assert fused.view(np.uint32).tobytes() == composed.view(np.uint32).tobytes()


@pytest.mark.parametrize("mode", [0, 2])
def test_fused_rope_on_a_strided_view_and_ne3(device, backends, mode):
    x = rng.standard_normal((1, 6, 4, 64)).astype(np.float32)
    pos = np.arange(100, 106, dtype=np.int32)
    (fused, composed), launches = _rope_both(device, backends, x, pos, dict(n_dims=64, mode=mode), qkv_view=True)
    assert launches[0] >= 1 and launches[1] == 0
    assert fused.tobytes() == composed.tobytes()
    x2 = rng.standard_normal((2, 3, 4, 64)).astype(np.float32)   # ne3 = 2: B of the BSND view
    (fused, composed), launches = _rope_both(device, backends, x2, np.arange(3, dtype=np.int32),
                                             dict(n_dims=64, mode=mode))
    assert launches[0] >= 1 and launches[1] == 0
    assert fused.tobytes() == composed.tobytes()


@pytest.mark.parametrize("what", ["partial", "f16"])
def test_partial_rotation_and_f16_keep_the_composition(device, backends, what):
    x = rng.standard_normal((1, 4, 3, 64)).astype(np.float32)
    pos = np.arange(4, dtype=np.int32)
    params = dict(n_dims=32 if what == "partial" else 64, mode=2)
    (fused, composed), launches = _rope_both(device, backends, x, pos, params,
                                             x_type="F16" if what == "f16" else "F32")
    assert launches == [0, 0]
    assert fused.tobytes() == composed.tobytes()


def test_bad_cann_llm_rope_is_refused(device):
    with pytest.raises(Exception, match="CANN_LLM_ROPE=fast: expected auto or composed"):
        _backend(device, "fast")


# ---- whole models: the same logits, prompt and decode (captured and replayed) -------------------

def _model_logits(path, monkeypatch, rope, ids, n_decode=2):
    """Prompt logits, then n_decode greedy steps' logits, and the fused ROPE count."""
    from cann_llm.model import Model
    monkeypatch.setenv("CANN_LLM_ROPE", rope)
    with Model(path, n_ctx=128) as m:
        def count():
            return sum(slot.backend.stats()["rope_fused"] for slot in m.sched.slots[:-1])
        loaded = count()   # the load's warm-up graph
        out = [m.logits(ids)]
        seq = list(ids)
        for _ in range(n_decode):
            seq.append(int(np.argmax(out[-1][-1])))
            out.append(m.logits(seq)[-1:])
        np.testing.assert_array_equal(m.logits(ids), out[0])   # a replay of the first capture
        return out, count() - loaded


@pytest.mark.parametrize("arch", ["llama", "qwen2"])   # normal and NeoX rotation
def test_tiny_models_fused_equals_composed(tmp_path, monkeypatch, arch):
    from tiny_models import write_tiny_model
    path = str(write_tiny_model(tmp_path / "tiny.gguf", arch=arch, n_embd=64, n_layer=2, n_head=4,
                                n_head_kv=2, n_ff=128))
    ids = [1, 5, 9, 200, 17, 3]
    fused, n_fused = _model_logits(path, monkeypatch, "auto", ids)
    composed, n_composed = _model_logits(path, monkeypatch, "composed", ids)
    assert n_fused > 0 and n_fused % 4 == 0 and n_composed == 0   # Q and K of 2 layers per graph
    for a, b in zip(fused, composed):
        np.testing.assert_array_equal(a, b)


def test_default_model_fused_equals_composed(default_model_path, monkeypatch):
    ids = [1, 504, 3060, 314, 253, 1167, 30, 2]
    fused, n_fused = _model_logits(str(default_model_path), monkeypatch, "auto", ids)
    composed, n_composed = _model_logits(str(default_model_path), monkeypatch, "composed", ids)
    assert n_fused > 0 and n_fused % 60 == 0 and n_composed == 0   # 30 layers' Q and K per graph
    for a, b in zip(fused, composed):
        np.testing.assert_array_equal(a, b)
