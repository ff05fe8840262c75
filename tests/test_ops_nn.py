"""The elementwise / normalisation / position ops on the CANN device against numpy references
with ggml's semantics: RMS_NORM, SCALE, SILU, SWIGLU (fused, swapped, split), ARGMAX, SOFT_MAX
(scale, F16/F32 mask with -inf, ALiBi), ROPE (normal, neox, partial, YaRN, freq_factors, the
per-graph sin/cos cache) and SET_ROWS.

Shapes given to new_tensor are ggml order (ne[0] fastest); numpy arrays are the reverse.
"""

import numpy as np
import pytest

rng = np.random.default_rng(4321)


def nmse(out, ref):
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    return float(np.sum((out - ref) ** 2) / max(np.sum(ref ** 2), 1e-30))


def run(device, backend, build, inputs, extra=None):
    """inputs {name: (type, ne, array|None)}; build(ctx, t) -> result or list of results.
    Returns the results' data (numpy order) after one graph_compute."""
    from cann_llm import backend as clm
    with clm.Context() as ctx:
        t = {name: ctx.new_tensor(ttype, ne, name=name) for name, (ttype, ne, _) in inputs.items()}
        results = build(ctx, t)
        single = not isinstance(results, (list, tuple))
        results = [results] if single else list(results)
        graph = ctx.new_graph()
        for r in results:
            graph.build_forward(r)
        for r in results:
            assert device.supports_op(r), f"{r.op_desc} is declined"
        with ctx.alloc_tensors(device.buffer_type):   # the buffer lives for the block
            for name, (_, _, array) in inputs.items():
                if array is not None:
                    t[name].set(array)
            backend.graph_compute(graph)
            backend.synchronize()
            if extra is not None:
                extra(t, graph)
            out = [r.get() for r in results]
    return out[0] if single else out


@pytest.fixture(scope="module")
def T():
    from cann_llm import backend as clm
    return clm.TensorType


# ---- RMS_NORM, SCALE, SILU, SWIGLU, ARGMAX ------------------------------------------------------

@pytest.mark.parametrize("ne", [(64, 3), (576, 7, 2), (33, 1)])
def test_rms_norm(device, backend, T, ne):
    x = rng.standard_normal(tuple(reversed(ne))).astype(np.float32) * 3
    out = run(device, backend, lambda ctx, t: ctx.rms_norm(t["x"], 1e-5), {"x": (T.F32, ne, x)})
    xd = x.astype(np.float64)
    ref = xd / np.sqrt(np.mean(xd * xd, axis=-1, keepdims=True) + 1e-5)
    assert nmse(out, ref) < 1e-10


@pytest.mark.parametrize("s, b", [(0.125, 0.0), (-2.5, 0.75)])
def test_scale_with_bias(device, backend, T, s, b):
    x = rng.standard_normal((5, 40)).astype(np.float32)
    out = run(device, backend, lambda ctx, t: ctx.scale(t["x"], s, b), {"x": (T.F32, (40, 5), x)})
    np.testing.assert_allclose(out, x * np.float32(s) + np.float32(b), rtol=1e-6, atol=1e-6)


def silu(v):
    v = v.astype(np.float64)
    return v / (1.0 + np.exp(-v))


@pytest.mark.parametrize("dtype", ["F32", "F16"])
def test_silu(device, backend, T, dtype):
    npt = np.float32 if dtype == "F32" else np.float16
    x = (rng.standard_normal((3, 70)) * 4).astype(npt)
    out = run(device, backend, lambda ctx, t: ctx.silu(t["x"]), {"x": (T[dtype], (70, 3), x)})
    assert out.dtype == npt
    np.testing.assert_allclose(out.astype(np.float64), silu(x), rtol=2e-3 if dtype == "F16" else 1e-5, atol=1e-3 if dtype == "F16" else 1e-6)


@pytest.mark.parametrize("swapped", [False, True])
def test_swiglu_fused(device, backend, T, swapped):
    x = rng.standard_normal((2, 3, 2 * 48)).astype(np.float32)
    out = run(device, backend, lambda ctx, t: ctx.swiglu(t["x"], swapped), {"x": (T.F32, (96, 3, 2), x)})
    a, b = x[..., :48], x[..., 48:]
    if swapped:
        a, b = b, a
    assert out.shape == (2, 3, 48)
    assert nmse(out, silu(a) * b) < 1e-12


def test_empty_swiglu_is_skipped(device, backend, T):
    # aclnnSwiGlu refuses empty tensors; an empty node has nothing to compute (as in ggml)
    out = run(device, backend, lambda ctx, t: ctx.swiglu(t["x"]), {"x": (T.F32, (96, 0, 2), None)})
    assert out.shape == (2, 0, 48)


def test_swiglu_split(device, backend, T):
    a = rng.standard_normal((4, 80)).astype(np.float32)
    b = rng.standard_normal((4, 80)).astype(np.float32)
    out = run(device, backend, lambda ctx, t: ctx.swiglu_split(t["a"], t["b"]),
              {"a": (T.F32, (80, 4), a), "b": (T.F32, (80, 4), b)})
    assert nmse(out, silu(a) * b) < 1e-12


def test_argmax_first_maximum(device, backend, T):
    x = rng.standard_normal((6, 1000)).astype(np.float32)
    x[2, 17] = x[2, 900] = 50.0  # a tie: the first one wins, as ggml
    out = run(device, backend, lambda ctx, t: ctx.argmax(t["x"]), {"x": (T.F32, (1000, 6), x)})
    assert out.dtype == np.int32
    assert out.tolist() == np.argmax(x, axis=-1).tolist()
    assert out[2] == 17


def test_argmax_of_long_rows_is_the_first_maximum(device, backend, T):
    """Rows longer than acl_host's ArgMax chunk (16384 values, scanned in parallel, combined in
    order): ties across chunks go to the lowest id, the first NaN wins over any number (as
    torch), a row of -inf gives 0, and -0.0 ties with 0.0."""
    n = 70000
    x = rng.standard_normal((6, n)).astype(np.float32)
    x[0, [60000, 20000, 50000]] = 9.0                 # a tie over three chunks
    x[1, 40000], x[1, 30000], x[1, 5] = np.nan, np.nan, 1e30   # NaN beats the largest number
    x[2] = -np.inf
    x[3] = -1.0
    x[3, 33000], x[3, 16384] = 0.0, -0.0              # equal: the first one, a chunk's first value
    x[4, n - 1] = 9.0                                 # the last value, in the short last chunk
    x[5, 16383] = x[5, 16384] = 9.0                   # across a chunk boundary
    out = run(device, backend, lambda ctx, t: ctx.argmax(t["x"]), {"x": (T.F32, (n, 6), x)})
    assert out.tolist() == [20000, 30000, 0, 16384, n - 1, 16383]
    assert out.tolist() == np.argmax(x, axis=-1).tolist()


# ---- SOFT_MAX ------------------------------------------------------------------------------------

def alibi_slopes(max_bias, n_head):
    n_head_log2 = 1 << int(np.floor(np.log2(n_head)))
    m0 = 2.0 ** (-max_bias / n_head_log2)
    m1 = 2.0 ** (-(max_bias / 2.0) / n_head_log2)
    return np.array([m0 ** (h + 1) if h < n_head_log2 else m1 ** (2 * (h - n_head_log2) + 1)
                     for h in range(n_head)])


def soft_max_ref(x, mask, scale, max_bias):
    """x numpy (ne3, ne2, ne1, ne0); mask (ne3m, ne2m, >= ne1, ne0) or None."""
    v = x.astype(np.float64) * scale
    if mask is not None:
        m = mask.astype(np.float64)[:, :, :x.shape[2], :]
        m = np.tile(m, (x.shape[0] // m.shape[0], x.shape[1] // m.shape[1], 1, 1))
        if max_bias > 0:
            m = m * alibi_slopes(max_bias, x.shape[1])[None, :, None, None]
        v = v + m
    v = v - v.max(axis=-1, keepdims=True)
    e = np.exp(v)
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("mask_type", [None, "F16", "F32"])
@pytest.mark.parametrize("max_bias", [0.0, 8.0])
def test_soft_max(device, backend, T, mask_type, max_bias):
    ne = (37, 5, 6, 1)   # n_kv, n_q, n_head, 1
    x = rng.standard_normal(tuple(reversed(ne))).astype(np.float32)
    inputs = {"x": (T.F32, ne, x)}
    mask = None
    if mask_type is not None:
        npt = np.float16 if mask_type == "F16" else np.float32
        mask = np.zeros((1, 1, 8, 37), dtype=npt)  # more rows than n_q, as llama.cpp pads
        mask[..., 30:] = -np.inf                   # masked cells
        mask[0, 0, 1, 3] = -np.inf
        mask[0, 0, 2, :5] = rng.standard_normal(5).astype(npt)
        inputs["mask"] = (T[mask_type], (37, 8, 1, 1), mask)
    out = run(device, backend,
              lambda ctx, t: ctx.soft_max_ext(t["x"], t.get("mask"), 0.3, max_bias), inputs)
    ref = soft_max_ref(x, mask, 0.3, max_bias)
    assert np.all(out[..., 30:] == 0) if mask is not None else True
    assert nmse(out, ref) < 1e-12


@pytest.mark.parametrize("max_bias", [0.0, 4.0])
def test_soft_max_mask_tiles_over_heads(device, backend, T, max_bias):
    ne = (16, 3, 4, 2)
    x = rng.standard_normal(tuple(reversed(ne))).astype(np.float32)
    mask = rng.standard_normal((1, 2, 3, 16)).astype(np.float16)   # ne2m = 2 tiles over 4 heads
    out = run(device, backend, lambda ctx, t: ctx.soft_max_ext(t["x"], t["m"], 0.5, max_bias),
              {"x": (T.F32, ne, x), "m": (T.F16, (16, 3, 2, 1), mask)})
    assert nmse(out, soft_max_ref(x, mask, 0.5, max_bias)) < 1e-12


# ---- ROPE ------------------------------------------------------------------------------------------

def rope_ref(x, pos, n_dims, mode, n_ctx_orig=0, freq_base=10000.0, freq_scale=1.0,
             ext_factor=0.0, attn_factor=1.0, beta_fast=32.0, beta_slow=1.0, ff=None):
    """ggml's rope_ext in float64; x numpy (ne3, n_tokens, n_head, head_dim)."""
    half = n_dims // 2
    k = np.arange(half)
    theta_extrap = pos.astype(np.float64)[:, None] * (freq_base ** (-2.0 / n_dims)) ** k[None, :]
    if ff is not None:
        theta_extrap = theta_extrap / ff[:half].astype(np.float64)[None, :]
    theta_interp = freq_scale * theta_extrap
    mscale = attn_factor
    theta = theta_interp
    if ext_factor != 0.0:
        def corr_dim(n_rot):
            return n_dims * np.log(n_ctx_orig / (n_rot * 2 * np.pi)) / (2 * np.log(freq_base))
        lo = max(0.0, np.floor(corr_dim(beta_fast)))
        hi = min(n_dims - 1.0, np.ceil(corr_dim(beta_slow)))
        ramp = 1.0 - np.clip((k - lo) / max(0.001, hi - lo), 0.0, 1.0)
        mix = ramp * ext_factor
        theta = theta_interp * (1 - mix) + theta_extrap * mix
        mscale *= 1.0 + 0.1 * np.log(1.0 / freq_scale)
    c = (np.cos(theta) * mscale)[None, :, None, :]
    s = (np.sin(theta) * mscale)[None, :, None, :]
    xd = x.astype(np.float64)
    out = xd.copy()
    if mode == 0:
        x0, x1 = xd[..., 0:n_dims:2], xd[..., 1:n_dims:2]
        out[..., 0:n_dims:2] = x0 * c - x1 * s
        out[..., 1:n_dims:2] = x0 * s + x1 * c
    else:
        x0, x1 = xd[..., :half], xd[..., half:n_dims]
        out[..., :half] = x0 * c - x1 * s
        out[..., half:n_dims] = x0 * s + x1 * c
    return out


ROPE_CASES = {
    "normal": dict(n_dims=64, mode=0),
    "neox": dict(n_dims=64, mode=2),
    "partial-normal": dict(n_dims=32, mode=0),
    "partial-neox": dict(n_dims=48, mode=2),
    "freq": dict(n_dims=64, mode=2, freq_base=1e6, freq_scale=0.5),
    "yarn": dict(n_dims=64, mode=2, n_ctx_orig=4096, freq_base=10000.0, freq_scale=0.25,
                 ext_factor=1.0, attn_factor=1.0, beta_fast=32.0, beta_slow=1.0),
    "yarn-normal": dict(n_dims=64, mode=0, n_ctx_orig=2048, freq_scale=0.5, ext_factor=0.5,
                        attn_factor=0.9, beta_fast=16.0, beta_slow=2.0),
    "freq_factors": dict(n_dims=64, mode=2, ff=True),
}


@pytest.mark.parametrize("case", list(ROPE_CASES))
def test_rope(device, backend, T, case):
    params = dict(ROPE_CASES[case])
    use_ff = params.pop("ff", False)
    head_dim, n_head, n_tok = 64, 3, 5
    x = rng.standard_normal((1, n_tok, n_head, head_dim)).astype(np.float32)
    pos = np.array([0, 1, 7, 300, 5000], dtype=np.int32)
    ff = (1.0 + rng.random(head_dim // 2) * 8).astype(np.float32) if use_ff else None
    inputs = {"x": (T.F32, (head_dim, n_head, n_tok, 1), x), "pos": (T.I32, (n_tok,), pos)}
    if use_ff:
        inputs["ff"] = (T.F32, (head_dim // 2,), ff)
    out = run(device, backend, lambda ctx, t: ctx.rope_ext(t["x"], t["pos"], t.get("ff"), **params),
              inputs).reshape(x.shape)
    ref = rope_ref(x, pos, ff=ff, **params)
    assert nmse(out, ref) < 1e-9
    if params["n_dims"] < head_dim:
        assert np.array_equal(out[..., params["n_dims"]:], x[..., params["n_dims"]:])


def test_rope_cache_is_shared_in_a_graph_and_rebuilt_per_graph(device, backend, T):
    """Q and K rope in one graph share the sin/cos tables; new positions in the next
    graph_compute of the same graph give new angles."""
    from cann_llm import backend as clm
    head_dim, n_tok = 64, 4
    q = rng.standard_normal((1, n_tok, 4, head_dim)).astype(np.float32)
    k = rng.standard_normal((1, n_tok, 2, head_dim)).astype(np.float32)
    with clm.Context() as ctx:
        tq = ctx.new_tensor(T.F32, (head_dim, 4, n_tok, 1))
        tk = ctx.new_tensor(T.F32, (head_dim, 2, n_tok, 1))
        tp = ctx.new_tensor(T.I32, (n_tok,))
        rq = ctx.rope_ext(tq, tp, None, head_dim, 2, freq_base=10000.0)
        rk = ctx.rope_ext(tk, tp, None, head_dim, 2, freq_base=10000.0)
        graph = ctx.new_graph().build_forward(rq).build_forward(rk)
        with ctx.alloc_tensors(device.buffer_type):
            tq.set(q)
            tk.set(k)
            for pos in (np.arange(n_tok, dtype=np.int32), np.array([9, 10, 11, 12], dtype=np.int32)):
                tp.set(pos)
                backend.graph_compute(graph)
                backend.synchronize()
                assert nmse(rq.get(), rope_ref(q, pos, head_dim, 2)) < 1e-9
                assert nmse(rk.get(), rope_ref(k, pos, head_dim, 2)) < 1e-9


# ---- SET_ROWS --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dst_type, idx_type", [("F16", "I64"), ("F32", "I32"), ("F16", "I32")])
def test_set_rows(device, backend, T, dst_type, idx_type):
    ne0, n_rows, n = 40, 10, 3
    npt = np.float16 if dst_type == "F16" else np.float32
    idt = np.int64 if idx_type == "I64" else np.int32
    dst = rng.standard_normal((n_rows, ne0)).astype(npt)
    src = rng.standard_normal((n, ne0)).astype(np.float32)
    rows = np.array([7, 0, 4], dtype=idt)
    out = run(device, backend, lambda ctx, t: ctx.set_rows(t["dst"], t["src"], t["rows"]),
              {"dst": (T[dst_type], (ne0, n_rows), dst), "src": (T.F32, (ne0, n), src),
               "rows": (T[idx_type], (n,), rows)})
    ref = dst.copy()
    ref[rows] = src.astype(npt)
    assert np.array_equal(out.reshape(ref.shape), ref)


def test_set_rows_broadcasts_row_ids(device, backend, T):
    """src [ne0, n, 4, 1] with row ids [n, 2]: head i2 takes ids[:, i2 % 2], as ggml."""
    ne0, n_rows, n = 8, 6, 2
    dst = np.zeros((1, 4, n_rows, ne0), dtype=np.float16)
    src = rng.standard_normal((1, 4, n, ne0)).astype(np.float32)
    rows = np.array([[1, 5], [2, 0]], dtype=np.int64)   # numpy (2, n)
    out = run(device, backend, lambda ctx, t: ctx.set_rows(t["dst"], t["src"], t["rows"]),
              {"dst": (T.F16, (ne0, n_rows, 4, 1), dst), "src": (T.F32, (ne0, n, 4, 1), src),
               "rows": (T.I64, (n, 2), rows)})
    ref = dst.copy()
    for i2 in range(4):
        for i in range(n):
            ref[0, i2, rows[i2 % 2, i]] = src[0, i2, i].astype(np.float16)
    assert np.array_equal(out.reshape(ref.shape), ref)
