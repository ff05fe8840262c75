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


# ---- the ops of a mixture-of-experts FFN (llama.cpp's build_moe_ffn) ------------------------------

def selection_loop(row, descending):
    """Argsort by repeated selection: the best remaining value, the first index among equals (the
    order of a stable sort)."""
    left, order = list(range(len(row))), []
    while left:
        best = left[0]
        for i in left[1:]:
            if (row[i] > row[best]) if descending else (row[i] < row[best]):
                best = i
        order.append(best)
        left.remove(best)
    return order


@pytest.mark.parametrize("order", [clm.SortOrder.ASC, clm.SortOrder.DESC])
def test_argsort_without_ties_against_selection_loop(order):
    x = uniform(2, 3, 4, 37, lo=-5, hi=5)
    got = ref.op_argsort(x, order)
    assert got.shape == x.shape and got.dtype == np.int32
    for index in np.ndindex(*x.shape[:-1]):
        assert got[index].tolist() == selection_loop(x[index], order == clm.SortOrder.DESC)


# ggml's CPU argsort is std::sort, not stable: rows up to 16 long are insertion-sorted (stable),
# longer rows leave ties in introsort's order. Recorded from llama-cpp-python 0.3.36's
# libggml-cpu.so (GCC's libstdc++) on x = ((37 i) % mod) / 4; Qwen3-MoE routes over 128 experts.
GGML_TIED_ARGSORT = {
    (24, 5, clm.SortOrder.ASC): [0, 5, 20, 10, 15, 23, 3, 18, 8, 13, 1, 21, 16, 11, 6, 14, 9, 19,
                                 4, 12, 17, 7, 22, 2],
    (24, 5, clm.SortOrder.DESC): [22, 2, 17, 7, 12, 4, 19, 9, 14, 1, 21, 16, 11, 6, 13, 8, 18, 3,
                                  23, 10, 15, 5, 20, 0],
    (128, 11, clm.SortOrder.ASC): [
        22, 33, 99, 88, 0, 11, 55, 110, 66, 121, 77, 44, 14, 80, 25, 91, 69, 58, 102, 36, 113, 47,
        3, 124, 61, 127, 39, 50, 72, 28, 83, 94, 17, 105, 116, 6, 75, 86, 97, 108, 53, 119, 64, 42,
        9, 20, 31, 1, 122, 111, 12, 100, 89, 23, 78, 67, 34, 45, 56, 37, 48, 103, 26, 15, 70, 81,
        114, 92, 4, 59, 125, 18, 51, 84, 95, 40, 106, 73, 29, 7, 117, 62, 98, 10, 109, 120, 43, 21,
        87, 32, 65, 54, 76, 57, 35, 2, 123, 68, 112, 46, 13, 24, 101, 90, 79, 93, 5, 82, 115, 60,
        16, 71, 126, 27, 104, 38, 49, 19, 52, 63, 85, 118, 96, 8, 41, 30, 107, 74],
    (128, 11, clm.SortOrder.DESC): [
        118, 41, 107, 52, 30, 63, 96, 19, 74, 85, 8, 115, 38, 104, 49, 126, 82, 27, 60, 5, 71, 93,
        16, 57, 13, 35, 101, 112, 46, 68, 90, 123, 24, 2, 79, 76, 43, 54, 98, 65, 87, 120, 21, 109,
        10, 32, 40, 73, 95, 18, 117, 62, 7, 29, 51, 84, 106, 37, 92, 70, 15, 4, 125, 48, 81, 103,
        59, 26, 114, 89, 122, 12, 78, 1, 67, 23, 56, 100, 111, 34, 45, 119, 97, 86, 64, 108, 9, 75,
        20, 31, 42, 53, 127, 83, 6, 17, 116, 28, 39, 105, 50, 72, 61, 94, 80, 3, 124, 14, 91, 69,
        25, 113, 36, 58, 47, 102, 66, 33, 110, 0, 22, 44, 121, 11, 77, 99, 88, 55],
}


@pytest.mark.parametrize("n, mod, order", list(GGML_TIED_ARGSORT))
def test_argsort_ties_in_ggml_cpu_order(n, mod, order):
    x = (((np.arange(n) * 37) % mod) * 0.25).astype(np.float32)
    want = GGML_TIED_ARGSORT[(n, mod, order)]
    assert ref.op_argsort(x.reshape(1, 1, 1, n), order).reshape(-1).tolist() == want
    # the same row among untied rows of a batch, and the top 8 as argsort_top_k reads them
    batch = np.stack([uniform(n), x, uniform(n)]).reshape(1, 3, 1, n)
    got = ref.op_argsort(batch, order)
    assert got[0, 1, 0].tolist() == want
    assert got[0, 0, 0].tolist() == selection_loop(batch[0, 0, 0], order == clm.SortOrder.DESC)


def test_argsort_ties_short_rows_are_stable_and_long_rows_ordered():
    tied = rng.integers(0, 3, size=(50, 16)).astype(np.float32)
    for row in tied:                      # up to 16 elements std::sort is an insertion sort
        assert ref.std_sort_indices(row, True) == selection_loop(row, True)
        assert ref.std_sort_indices(row, False) == selection_loop(row, False)
    for n in (17, 64, 128, 300):          # longer: a permutation whose values are in order
        for row in rng.integers(0, 4, size=(10, n)).astype(np.float32):
            for descending in (False, True):
                idx = ref.std_sort_indices(row, descending)
                assert sorted(idx) == list(range(n))
                values = row[idx] * (-1 if descending else 1)
                assert all(values[i] <= values[i + 1] for i in range(n - 1))
    # -0.0 and 0.0 tie (they compare equal), as in C
    assert ref.op_argsort(np.array([0.0, -0.0, 0.0], np.float32).reshape(1, 1, 1, 3),
                          clm.SortOrder.DESC).reshape(-1).tolist() == [0, 1, 2]


def test_sum_rows_clamp_and_div_against_loops():
    x = uniform(2, 3, 4, 9, lo=-4, hi=4)
    got = ref.op_sum_rows(x)
    assert got.shape == (2, 3, 4, 1)
    for index in np.ndindex(2, 3, 4):
        acc = 0.0
        for v in x[index]:                                   # ggml_vec_sum_f32: a double sum
            acc += float(v)
        assert got[index][0] == pytest.approx(acc, rel=1e-14, abs=1e-14)

    def c_clamp(v, lo, hi):                                  # MAX(MIN(v, hi), lo), C's macros
        m = v if v < hi else hi
        return m if m > lo else lo

    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-9, 3.5, -3.5], np.float32)
    values = np.concatenate([x.reshape(-1), special])
    for lo, hi in [(-0.5, 0.5), (6.103515625e-5, math.inf), (-math.inf, 0.25), (0.5, -0.5)]:
        got = ref.op_clamp(values, lo, hi)
        want = [c_clamp(float(v), lo, hi) for v in values]
        np.testing.assert_array_equal(got, want)
    assert ref.op_clamp(np.array([np.nan]), 0.0, 1.0)[0] == 1.0    # a NaN becomes max

    a = uniform(2, 6, 3, 8)
    b = uniform(1, 3, 1, 4, lo=0.5, hi=2)
    b[0, 0, 0, 0] = 0.0
    got = ref.op_div(a, b)
    with np.errstate(divide="ignore"):
        for i3, i2, i1, i0 in np.ndindex(*a.shape):
            want = np.float64(a[i3, i2, i1, i0]) / np.float64(b[i3 % 1, i2 % 3, i1 % 1, i0 % 4])
            assert got[i3, i2, i1, i0] == want


def mul_mat_id_loop(as_, b, ids):
    """ggml's CPU mul_mat_id as a loop: out[t, e, n] = sum_k as_[ids[t, e], n, k] b[t, e % n_b1, k]
    (as_ (n_as, N, K), b (n_tokens, n_b1, K), ids (n_tokens, n_ids))."""
    n_tokens, n_ids = ids.shape
    out = np.zeros((n_tokens, n_ids, as_.shape[1]))
    for t in range(n_tokens):
        for e in range(n_ids):
            w, row = as_[ids[t, e]], b[t, e % b.shape[1]]
            for n in range(as_.shape[1]):
                out[t, e, n] = sum(float(w[n, k]) * float(row[k]) for k in range(as_.shape[2]))
    return out


@pytest.mark.parametrize("n_b1", [1, 3])
def test_mul_mat_id_against_loop(n_b1):
    as_ = uniform(1, 5, 6, 16)                         # 5 experts [K=16, N=6]
    b = uniform(1, 4, n_b1, 16)                        # 4 tokens, one row or one per slot
    ids = np.array([[4, 0, 2], [1, 1, 3], [0, 4, 2], [3, 2, 1]], np.int32)   # 3 slots per token
    got = ref.op_mul_mat_id(as_, b, ids[None, None])
    assert got.shape == (1, 4, 3, 6)
    np.testing.assert_allclose(got[0], mul_mat_id_loop(as_[0], b[0], ids), rtol=1e-12, atol=1e-13)
    with pytest.raises(ref.ReferenceError, match="out of range"):
        ref.op_mul_mat_id(as_, b, (ids + 2)[None, None])


@pytest.mark.parametrize("qtype", ["F16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K"])
def test_mul_mat_id_node_of_quantized_experts_is_dequantize(qtype):
    """Through compute_node, with the experts stored in `qtype`: the loop on the weights as
    gguf.quants dequantizes them (what the reference multiplies, as for MUL_MAT)."""
    k = 256 if qtype.endswith("_K") else 64
    weights = uniform(4, 5, k)                          # 4 experts [K, N=5]
    if qtype == "F16":
        stored = weights.astype(np.float16)
    elif qtype.endswith("_K"):               # gguf.quants has no K-quant quantizer: random blocks
        from tiny_models import random_blocks
        stored = random_blocks(GGMLQuantizationType[qtype], weights.size, rng).reshape(20, -1)
    else:
        stored = quants.quantize(weights, GGMLQuantizationType[qtype])
    decoded = ref.decode(T[qtype], stored).reshape(1, 4, 5, k)
    with clm.Context() as ctx:
        as_ = ctx.new_tensor(T[qtype], (k, 5, 4))
        b = ctx.new_tensor(T.F32, (k, 1, 3))
        ids = ctx.new_tensor(T.I32, (2, 3))
        node = ctx.mul_mat_id(as_, b, ids)
        assert node.ne == (5, 2, 3, 1) and node.type == T.F32 and ref.supports(node)
        bv = uniform(1, 3, 1, k)
        idv = np.array([[[[3, 0], [1, 3], [2, 2]]]], np.int32)
        got = ref.compute_node(node, [decoded, bv, idv])
        want = mul_mat_id_loop(decoded[0], bv[0], idv[0, 0])
        np.testing.assert_allclose(got[0], want.astype(np.float32), rtol=1e-5, atol=1e-5)


def test_get_rows_of_expert_probabilities_per_token():
    """build_moe_ffn's weights = get_rows(probs [1, n_expert, n_tokens], selected [n_used,
    n_tokens]): row ids batched over tokens, each token picking from its own probabilities."""
    probs = uniform(1, 5, 8, 1, lo=0, hi=1)            # (1, n_tokens=5, n_expert=8, 1)
    selected = rng.integers(0, 8, size=(1, 1, 5, 2))   # (1, 1, n_tokens, n_used=2)
    got = ref.op_get_rows(probs, selected)
    assert got.shape == (1, 5, 2, 1)
    for t in range(5):
        for e in range(2):
            assert got[0, t, e, 0] == probs[0, t, selected[0, 0, t, e], 0]
    with clm.Context() as ctx:                          # the constructor takes these shapes
        p = ctx.new_tensor(T.F32, (1, 8, 5))
        ids = ctx.argsort_top_k(ctx.new_tensor(T.F32, (8, 5)), 2)
        node = ctx.get_rows(p, ids)
        assert node.ne == (1, 2, 5, 1) and node.type == T.F32


def test_moe_nodes_through_compute_node_and_supports():
    with clm.Context() as ctx:
        a = ctx.new_tensor(T.F32, (8, 5))
        s = ctx.new_tensor(T.F32, (1, 5))
        values = uniform(1, 1, 5, 8, lo=0.1, hi=1)
        sums = values.sum(-1, keepdims=True)
        top = ctx.argsort_top_k(a, 3)
        assert top.ne == (3, 5, 1, 1) and top.nb[1] == 8 * 4 and top.type == T.I32
        assert top.op == clm.Op.VIEW and top.storage.op == clm.Op.ARGSORT
        assert top.storage.op_params[0] == clm.SortOrder.DESC
        sorted_desc = ref.compute_node(top.storage, [values])
        assert sorted_desc.dtype == np.int32
        assert [row[:3].tolist() for row in sorted_desc[0, 0]] == [
            selection_loop(row, True)[:3] for row in values[0, 0]]
        for node, srcs, want in [
                (ctx.argsort(a), [values], [[selection_loop(r, False) for r in values[0, 0]]]),
                (ctx.sum_rows(a), [values], sums),
                (ctx.clamp(a, 0.25, 0.75), [values], np.clip(values, 0.25, 0.75)),
                (ctx.div(a, s), [values, sums], values / sums)]:
            assert ref.supports(node), node.op_desc
            np.testing.assert_allclose(ref.compute_node(node, srcs), np.reshape(want, node_shape(node)),
                                       rtol=1e-6, err_msg=node.op_desc)
        node = ctx.argsort(a)                            # an order the reference does not know
        node.c.op_params[0] = len(clm.SortOrder)
        assert not ref.supports(node)
        with pytest.raises(ref.ReferenceError):
            ref.compute_node(node, [values])
        with pytest.raises(ValueError):
            ctx.argsort_top_k(a, 9)                      # k past ne0 (ggml asserts ne0 >= k)
        with pytest.raises(clm.CannError):
            ctx.argsort(a, 2)


def node_shape(node):
    return ref.np_shape(node)


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
    """The reference is the CPU device of the splitter: every op of cann_llm.h except the views,
    NONE and the collectives (only a device with a communicator runs them) has an entry in its
    table (the one list of what the CPU supports)."""
    known = {op.name for op in ref.SUPPORTED_OPS | ref.VIEW_OPS}
    missing = {op.name for op in clm.Op} - known - {"NONE"}
    assert missing == {op.name for op in ref.COLLECTIVE_OPS} == {"ALL_REDUCE", "ALL_GATHER"}
    with clm.Context() as ctx:
        a = ctx.new_tensor(T.F32, (8,))
        assert not ref.supports(ctx.all_reduce(a)) and not ref.supports(ctx.all_gather(a, 2))


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
