"""The numpy reference backend against independent formulas: explicit loops written the way
ggml's CPU kernels are (rope with YaRN, softmax with ALiBi), attention through the explicit
softmax path, quantized get_rows against gguf.quants, and whole graphs with views through
evaluate(). Arrays are numpy order (ne reversed); tensors are created in ggml order.
"""

import math

import numpy as np
import pytest
from gguf import GGMLQuantizationType, quants

from cann_llm import backend as clm
from cann_llm import reference as ref

rng = np.random.default_rng(7)
T = clm.TensorType


def uniform(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


# ---- rope: an explicit loop in the style of ggml's rope_f32 ----------------------------------------

def rope_loop(x, pos, n_dims, mode, n_ctx_orig, freq_base, freq_scale, ext_factor, attn_factor,
              beta_fast, beta_slow, freq_factors=None):
    """x (ne3, n_tokens, n_head, head_dim) float32; mirrors ggml (float32 theta recurrence)."""
    def corr_dim(n_rot):
        return n_dims * math.log(n_ctx_orig / (n_rot * 2 * math.pi)) / (2 * math.log(freq_base))
    low = max(0.0, math.floor(corr_dim(beta_fast)))
    high = min(n_dims - 1.0, math.ceil(corr_dim(beta_slow)))
    theta_scale = np.float32(freq_base) ** np.float32(-2.0 / n_dims)
    out = x.astype(np.float32).copy()
    for i3 in range(x.shape[0]):
        for t in range(x.shape[1]):
            for h in range(x.shape[2]):
                theta_base = np.float32(pos[t])
                for i0 in range(0, x.shape[3], 2):
                    if i0 >= n_dims:
                        break
                    ic = i0 // 2
                    ff = 1.0 if freq_factors is None else freq_factors[ic]
                    theta_extrap = theta_base / ff
                    theta = freq_scale * theta_extrap
                    mscale = attn_factor
                    if ext_factor != 0.0:
                        y = (i0 // 2 - low) / max(0.001, high - low)
                        ramp = (1 - min(1.0, max(0.0, y))) * ext_factor
                        theta = theta * (1 - ramp) + theta_extrap * ramp
                        mscale *= 1.0 + 0.1 * math.log(1.0 / freq_scale)
                    c, s = math.cos(theta) * mscale, math.sin(theta) * mscale
                    if mode == ref.ROPE_TYPE_NEOX:
                        a, b = ic, ic + n_dims // 2
                    else:
                        a, b = i0, i0 + 1
                    x0, x1 = x[i3, t, h, a], x[i3, t, h, b]
                    out[i3, t, h, a] = x0 * c - x1 * s
                    out[i3, t, h, b] = x0 * s + x1 * c
                    theta_base = np.float32(theta_base * theta_scale)
    return out


@pytest.mark.parametrize("mode", [0, ref.ROPE_TYPE_NEOX])
@pytest.mark.parametrize("n_dims,freq_scale,ext_factor,attn_factor,ff", [
    (16, 1.0, 0.0, 1.0, False),      # plain
    (8, 1.0, 0.0, 1.0, False),       # partial rotation: dims 8..15 pass through
    (16, 0.25, 1.0, 1.0, False),     # YaRN
    (16, 0.5, 0.5, 0.9, True),       # YaRN + attn_factor + freq_factors
])
def test_rope_matches_explicit_loop(mode, n_dims, freq_scale, ext_factor, attn_factor, ff):
    x = uniform(1, 5, 3, 16)
    pos = rng.integers(0, 300, size=5)
    factors = rng.uniform(0.9, 1.1, size=n_dims // 2) if ff else None
    args = (n_dims, mode, 4096, 10000.0, freq_scale, ext_factor, attn_factor, 32.0, 1.0)
    got = ref.op_rope(x, pos, factors, *args)
    want = rope_loop(x, pos, *args, freq_factors=factors)
    # the loop keeps ggml's float32 theta recurrence; the reference computes theta in float64
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-4)
    if n_dims < 16:
        np.testing.assert_array_equal(got[..., n_dims:], x[..., n_dims:])


def test_rope_yarn_corr_dims_values():
    # ggml_rope_yarn_corr_dims for a Llama-like model: n_dims 128, n_ctx_orig 4096, base 10000
    low, high = ref.rope_yarn_corr_dims(128, 4096, 10000.0, 32.0, 1.0)
    want_low = math.floor(128 * math.log(4096 / (32 * 2 * math.pi)) / (2 * math.log(10000)))
    want_high = math.ceil(128 * math.log(4096 / (1 * 2 * math.pi)) / (2 * math.log(10000)))
    assert (low, high) == (max(0, want_low), min(127, want_high)) == (20, 46)


def test_rope_position_zero_is_identity_times_attn_factor():
    x = uniform(1, 1, 2, 8)
    got = ref.op_rope(x, np.array([0]), None, 8, 0, 0, 10000.0, 1.0, 0.0, 0.5, 32.0, 1.0)
    np.testing.assert_allclose(got, 0.5 * x, rtol=1e-7)


# ---- softmax ------------------------------------------------------------------------------------------

def test_soft_max_mask_and_alibi_against_loop():
    n_head, rows, cols = 6, 3, 10
    x = uniform(1, n_head, rows, cols)
    mask = uniform(1, 1, rows + 2, cols)              # more mask rows than rows (padding)
    mask[0, 0, 1, 3] = -np.inf
    scale, max_bias = 0.3, 8.0
    got = ref.op_soft_max(x, mask, scale, max_bias)
    n_head_log2 = 1 << int(math.floor(math.log2(n_head)))   # 4
    m0, m1 = 2 ** (-max_bias / n_head_log2), 2 ** (-max_bias / 2 / n_head_log2)
    for h in range(n_head):
        slope = m0 ** (h + 1) if h < n_head_log2 else m1 ** (2 * (h - n_head_log2) + 1)
        for r in range(rows):
            w = x[0, h, r].astype(np.float64) * scale + slope * mask[0, 0, r]
            e = np.exp(w - w.max())
            np.testing.assert_allclose(got[0, h, r], e / e.sum(), rtol=1e-12)
    assert got[0, :, 1, 3].max() == 0.0


def test_soft_max_without_mask_sums_to_one():
    x = uniform(2, 3, 4, 7, lo=-20, hi=20)
    got = ref.op_soft_max(x, None, 1.0, 0.0)
    np.testing.assert_allclose(got.sum(-1), 1.0, rtol=1e-12)
    np.testing.assert_array_equal(got.argmax(-1), x.argmax(-1))


def test_alibi_slopes_are_ggmls():
    assert np.allclose(ref.alibi_slopes(8, 8.0), [2.0 ** -(i + 1) for i in range(8)])
    assert np.all(ref.alibi_slopes(5, 0.0) == 1.0)


# ---- attention ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("n_head,n_head_kv", [(4, 4), (6, 2), (7, 1)])
def test_flash_attn_matches_explicit_softmax_path(n_head, n_head_kv):
    d, n_kv, n_q = 16, 11, 3
    q, k, v = uniform(1, n_head, n_q, d), uniform(1, n_head_kv, n_kv, d), uniform(1, n_head_kv, n_kv, 8)
    mask = np.where(rng.random((1, 1, n_q, n_kv)) < 0.3, -np.inf, 0.0).astype(np.float32)
    mask[..., 0] = 0.0
    scale = 1 / math.sqrt(d)
    got = ref.op_flash_attn_ext(q, k, v, mask, scale, 0.0, 0.0)
    assert got.shape == (1, n_q, n_head, 8)       # ggml's permuted result
    group = n_head // n_head_kv
    for h in range(n_head):
        kh, vh = k[0, h // group], v[0, h // group]
        kq = ref.op_mul_mat(kh[None, None], q[0, h][None, None])[0, 0]   # (n_q, n_kv)
        p = ref.op_soft_max(kq[None, None], mask, scale, 0.0)[0, 0]
        np.testing.assert_allclose(got[0, :, h], p @ vh, rtol=1e-10, atol=1e-12)


def test_flash_attn_softcap_and_alibi():
    q, k, v = uniform(1, 2, 2, 4, lo=-5, hi=5), uniform(1, 2, 5, 4, lo=-5, hi=5), uniform(1, 2, 5, 4)
    mask = uniform(1, 1, 2, 5)
    got = ref.op_flash_attn_ext(q, k, v, mask, 0.5, 4.0, 3.0)
    slopes = ref.alibi_slopes(2, 4.0)
    for h in range(2):
        s = 3.0 * np.tanh(q[0, h].astype(np.float64) @ k[0, h].T * 0.5 / 3.0) + slopes[h] * mask[0, 0]
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        np.testing.assert_allclose(got[0, :, h], p @ v[0, h], rtol=1e-10)


# ---- matmul, rows, norms, glu ------------------------------------------------------------------------

def test_mul_mat_broadcast_against_einsum_loop():
    a = uniform(1, 2, 5, 8)        # weights [k=8, m=5, 2, 1]
    b = uniform(3, 6, 4, 8)        # [k=8, n=4, 6, 3]: a's 2 batches each serve 3 of b's
    got = ref.op_mul_mat(a, b)
    assert got.shape == (3, 6, 4, 5)
    for i3 in range(3):
        for i2 in range(6):
            want = b[i3, i2].astype(np.float64) @ a[0, i2 // 3].astype(np.float64).T
            np.testing.assert_allclose(got[i3, i2], want, rtol=1e-12)


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0", "Q4_1"])
def test_get_rows_of_quantized_table_is_dequantize(qtype):
    gtype = GGMLQuantizationType[qtype]
    table = uniform(1, 2, 9, 64)                     # [64, 9 rows, 2, 1]
    blocks = quants.quantize(table, gtype)
    rows = rng.integers(0, 9, size=(1, 1, 2, 4))     # [4, 2, 1]
    got = ref.op_get_rows(ref.decode(T[qtype], blocks), rows)
    full = quants.dequantize(blocks, gtype)
    assert got.shape == (1, 2, 4, 64)
    for i2 in range(2):
        np.testing.assert_array_equal(got[0, i2], full[0, i2][rows[0, 0, i2]])


def test_set_rows_broadcast_indices():
    dst = uniform(2, 3, 10, 4)
    src = uniform(2, 3, 2, 4)
    rows = np.array([[[7, 1]]])                      # (1, ne12=1, ne11=1, n=2): shared by planes
    got = ref.op_set_rows(dst, src, rows[None])
    want = dst.astype(np.float64).copy()
    for i3 in range(2):
        for i2 in range(3):
            for i, r in enumerate(rows[0, 0]):
                want[i3, i2, r] = src[i3, i2, i]
    np.testing.assert_array_equal(got, want)


def test_rms_norm_formula():
    x = uniform(1, 2, 3, 33, lo=-10, hi=10)
    got = ref.op_rms_norm(x, 1e-5)
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64 ** 2).sum(-1, keepdims=True) / 33 + 1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-14)


def test_swiglu_fused_swapped_and_split():
    a = uniform(1, 1, 3, 8, lo=-5, hi=5).astype(np.float64)
    silu = lambda x: x / (1 + np.exp(-x))  # noqa: E731
    np.testing.assert_allclose(ref.op_glu(a, None, False), silu(a[..., :4]) * a[..., 4:])
    np.testing.assert_allclose(ref.op_glu(a, None, True), silu(a[..., 4:]) * a[..., :4])
    np.testing.assert_allclose(ref.op_glu(a, a + 1, False), silu(a) * (a + 1))


# gelu / gelu_erf / tanh: element-by-element loops on math.tanh / math.erf, as ggml_gelu_f32 and
# ggml_vec_gelu_erf_f32 write them (in float64). The reference avoids their cancellation of 1 + tanh
# and 1 + erf for negative x, so the two differ there by a few float64 ulps of |x| (atol).
def gelu_loop(x):
    return np.array([0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * v * (1 + 0.044715 * v * v)))
                     for v in np.asarray(x, np.float64).reshape(-1)]).reshape(np.shape(x))


def gelu_erf_loop(x):
    return np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2)))
                     for v in np.asarray(x, np.float64).reshape(-1)]).reshape(np.shape(x))


def tanh_loop(x):
    return np.array([math.tanh(v) for v in np.asarray(x, np.float64).reshape(-1)]).reshape(np.shape(x))


def test_gelu_gelu_erf_and_tanh_formulas():
    x = np.concatenate([uniform(200, lo=-12, hi=12), uniform(50, lo=-1e-3, hi=1e-3),
                        np.array([0.0, -0.0, 1.0, -1.0, 3.0, -3.0, 50.0, -50.0], np.float32)])
    np.testing.assert_allclose(ref._gelu(x), gelu_loop(x), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(ref._gelu_erf(x), gelu_erf_loop(x), rtol=1e-13, atol=1e-14)
    # deep in the negative tail the reference keeps its relative accuracy (the loops cannot)
    np.testing.assert_allclose(ref._gelu_erf(np.array([-8.0])), -4 * math.erfc(8 / math.sqrt(2)),
                               rtol=1e-13)
    np.testing.assert_allclose(ref._tanh(x), tanh_loop(x), rtol=1e-15)
    # values known from the definitions: gelu(1) (tanh form) and gelu_erf(1) = Phi(1)
    assert ref._gelu(np.array([1.0]))[0] == pytest.approx(0.8411919906082768, rel=1e-15)
    assert ref._gelu_erf(np.array([1.0]))[0] == pytest.approx(0.8413447460685429, rel=1e-15)
    # infinities: the limits (x at +inf, 0 at -inf), NaN stays NaN
    special = np.array([np.inf, -np.inf, np.nan])
    for fn in (ref._gelu, ref._gelu_erf):
        got = fn(special)
        assert got[0] == np.inf and got[1] == 0.0 and np.isnan(got[2])
    np.testing.assert_array_equal(ref._tanh(special[:2]), [1.0, -1.0])


@pytest.mark.parametrize("glu_op, act", [(clm.GluOp.GEGLU, gelu_loop),
                                         (clm.GluOp.GEGLU_ERF, gelu_erf_loop),
                                         (clm.GluOp.SWIGLU, lambda x: x / (1 + np.exp(-x)))])
def test_geglu_fused_swapped_and_split(glu_op, act):
    a = uniform(1, 2, 3, 10, lo=-6, hi=6).astype(np.float64)
    np.testing.assert_allclose(ref.op_glu(a, None, False, glu_op), act(a[..., :5]) * a[..., 5:],
                               rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(ref.op_glu(a, None, True, glu_op), act(a[..., 5:]) * a[..., :5],
                               rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(ref.op_glu(a, a + 1, False, glu_op), act(a) * (a + 1),
                               rtol=1e-13, atol=1e-13)


def test_gelu_tanh_and_geglu_nodes_through_compute_node():
    """The sub-op numbers of the C enums reach the right formula, and F16 nodes round once."""
    with clm.Context() as ctx:
        a = ctx.new_tensor(T.F32, (10, 3))
        h = ctx.new_tensor(T.F16, (10, 3))
        values = uniform(1, 1, 3, 10, lo=-5, hi=5)
        half = values[..., :5], values[..., 5:]
        for node, want in [(ctx.gelu(a), gelu_loop(values)), (ctx.gelu_erf(a), gelu_erf_loop(values)),
                           (ctx.tanh(a), tanh_loop(values)),
                           (ctx.geglu(a), gelu_loop(half[0]) * half[1]),
                           (ctx.geglu(a, swapped=True), gelu_loop(half[1]) * half[0]),
                           (ctx.geglu_erf(a), gelu_erf_loop(half[0]) * half[1]),
                           (ctx.geglu_split(a, a), gelu_loop(values) * values),
                           (ctx.geglu_erf_split(a, a), gelu_erf_loop(values) * values)]:
            assert ref.supports(node), node.op_desc
            np.testing.assert_allclose(ref.compute_node(node, [values] * len(node.sources)),
                                       want.astype(np.float32), rtol=1e-6, err_msg=node.op_desc)
        node = ctx.geglu_split(h, h)
        hv = values.astype(np.float16).astype(np.float32)
        np.testing.assert_array_equal(ref.compute_node(node, [hv, hv]),
                                      (gelu_loop(hv) * hv).astype(np.float16).astype(np.float32))


def test_argmax_first_of_ties():
    a = np.array([[[[1.0, 3.0, 3.0, -1.0], [0.0, 0.0, 0.0, 0.0]]]], dtype=np.float32)
    assert ref.op_argmax(a).reshape(-1).tolist() == [1, 0]


def test_encode_rounds_to_nearest_even():
    values = np.array([1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -8], dtype=np.float32)
    np.testing.assert_array_equal(ref.round_to(T.F16, values), [1.0, 1 + 2 ** -9, 1 + 2 ** -8])
    np.testing.assert_array_equal(ref.round_to(T.BF16, values[2:]), [1.0])


# ---- whole graphs through the C core's tensors ---------------------------------------------------------

def test_evaluate_graph_with_views_cpy_and_set_rows():
    with clm.Context() as ctx:
        x = ctx.new_tensor(T.F32, (4, 3, 2), name="x")
        dst = ctx.new_tensor(T.F16, (3, 4, 2), name="dst")
        cache = ctx.new_tensor(T.F16, (4, 6, 2), name="cache")
        rows = ctx.new_tensor(T.I64, (3, 2), name="rows")
        copied = ctx.cpy(ctx.permute(x, 1, 0, 2, 3), dst)            # transpose into f16
        written = ctx.set_rows(cache, x, rows)
        scaled = ctx.scale(ctx.cont(ctx.transpose(x)), 2.0, 1.0)
        graph = ctx.new_graph()
        for t in (copied, written, scaled):
            graph.build_forward(t)
        xv = uniform(2, 3, 4)
        cache0 = uniform(2, 6, 4).astype(np.float16)
        rows_v = np.array([[5, 0, 2], [1, 3, 4]], dtype=np.int64)
        values = ref.evaluate(graph, {"x": xv, "dst": np.zeros((2, 4, 3), np.float16),
                                      "cache": cache0, "rows": rows_v})
        np.testing.assert_array_equal(values[copied][0],
                                      np.swapaxes(xv, -1, -2).astype(np.float16).astype(np.float32))
        np.testing.assert_array_equal(values[dst], values[copied])   # the copy landed in dst
        want_cache = cache0.astype(np.float32)
        for i2 in range(2):
            want_cache[i2, rows_v[i2]] = xv[i2].astype(np.float16)
        np.testing.assert_array_equal(values[written][0], want_cache)
        np.testing.assert_allclose(values[scaled][0], np.swapaxes(xv, -1, -2) * 2 + 1, rtol=1e-7)


def test_evaluate_quantized_mul_mat_and_get_rows():
    with clm.Context() as ctx:
        w = ctx.new_tensor(T.Q4_1, (64, 5), name="w")
        x = ctx.new_tensor(T.F32, (64, 3), name="x")
        ids = ctx.new_tensor(T.I32, (2,), name="ids")
        prod = ctx.mul_mat(w, x)
        emb = ctx.get_rows(w, ids)
        graph = ctx.new_graph().build_forward(prod).build_forward(emb)
        wq = quants.quantize(uniform(5, 64), GGMLQuantizationType.Q4_1)
        xv = uniform(3, 64)
        values = ref.evaluate(graph, {"w": wq, "x": xv, "ids": np.array([4, 1], np.int32)})
        wd = quants.dequantize(wq, GGMLQuantizationType.Q4_1)
        np.testing.assert_allclose(values[prod][0, 0], xv @ wd.T, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(values[emb][0, 0], wd[[4, 1]])


def test_compute_node_rounds_to_node_type():
    with clm.Context() as ctx:
        a = ctx.new_tensor(T.F16, (8,))
        node = ctx.scale(a, 1.0 / 3.0, 0.0)
        values = uniform(1, 1, 1, 8).astype(np.float16).astype(np.float32)
        got = ref.compute_node(node, [values])
        np.testing.assert_array_equal(got, (values.astype(np.float64) / 3).astype(np.float16))


def test_unknown_op_raises_reference_error():
    with clm.Context() as ctx:
        a = ctx.new_tensor(T.F32, (4,))
        view = ctx.reshape(a, (2, 2))
        with pytest.raises(ref.ReferenceError):
            ref.compute_node(view, [np.zeros((1, 1, 1, 4), np.float32)])


def test_dispatch_table_covers_every_op_of_the_header():
    """The reference is the CPU device of the splitter: every op of cann_llm.h except the views
    and NONE has an entry in its table (the one list of what the CPU supports)."""
    known = {op.name for op in ref.SUPPORTED_OPS | ref.VIEW_OPS}
    missing = {op.name for op in clm.Op} - known - {"NONE"}
    assert missing == set()


def test_cpu_slot_supports_what_the_table_computes():
    from cann_llm import sched
    cpu = sched.CPUSlot()
    with clm.Context() as ctx:
        a = ctx.new_tensor(T.F32, (8, 2))
        silu, swiglu = ctx.silu(a), ctx.swiglu(a)
        assert cpu.supports(silu) and cpu.supports(swiglu)
        for node in (ctx.gelu(a), ctx.gelu_erf(a), ctx.tanh(a), ctx.geglu(a), ctx.geglu_erf(a),
                     ctx.geglu_split(a, a), ctx.geglu_erf_split(a, a)):
            assert cpu.supports(node), node.op_desc
        assert cpu.supports(ctx.reshape(a, (16,)))
        values = uniform(1, 1, 2, 8)
        np.testing.assert_allclose(ref.compute_node(silu, [values]), values / (1 + np.exp(-values)),
                                   rtol=1e-6)
        for node in (silu, swiglu):   # a sub-op the reference does not know (past the C enum)
            node.c.op_params[0] = len(clm.UnaryOp if node is silu else clm.GluOp)
            assert not ref.supports(node) and not cpu.supports(node)
            with pytest.raises(ref.ReferenceError):
                ref.compute_node(node, [values])
