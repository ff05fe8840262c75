"""FLASH_ATTN_EXT on CANN0 (aclnnFusedInferAttentionScoreV2) against a numpy reference with ggml's
semantics: softmax(scale * Q K^T + mask) V per query head, GQA broadcast of the KV heads, result
permuted to [Dv, n_head, n_q, n_seq]. K/V are F16 views into a larger cache, as the KV-cache
runner passes them; the mask is F16 with padded rows and -inf holes. Plus what supports_op declines.

Shapes given to new_tensor are ggml order (ne[0] fastest); numpy arrays are the reverse.
"""

import numpy as np
import pytest

rng = np.random.default_rng(4321)


def _flash_attn_ext(clm, ctx, q, k, v, mask, scale, max_bias=0.0, softcap=0.0):
    if hasattr(ctx, "flash_attn_ext"):
        return ctx.flash_attn_ext(q, k, v, mask, scale, max_bias, softcap)
    out = clm.ffi.new("clm_tensor **")
    clm.check(clm.lib.clm_flash_attn_ext(ctx._handle(), q.c, k.c, v.c,
                                         clm.ffi.NULL if mask is None else mask.c, scale, max_bias,
                                         softcap, out), "clm_flash_attn_ext")
    return ctx._tensor(out)


def _reference(q, k, v, mask, scale):
    """q (n_seq, n_head, n_q, D), k/v (n_seq, n_head_kv, n_kv, D), mask (n_q, n_kv) or None ->
    (n_seq, n_q, n_head, D): ggml's permuted result in numpy order."""
    group = q.shape[1] // k.shape[1]
    k = np.repeat(k.astype(np.float64), group, axis=1)
    v = np.repeat(v.astype(np.float64), group, axis=1)
    s = scale * np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k)
    if mask is not None:
        s = s + mask.astype(np.float64)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("bhqk,bhkd->bqhd", p, v)


def _causal_mask(n_q, n_q_pad, n_kv):
    """F16 (n_q_pad, n_kv): 0 / -inf, causal over the last n_q cells plus random holes; every
    real row keeps at least its diagonal cell."""
    mask = np.zeros((n_q_pad, n_kv), dtype=np.float32)
    for i in range(n_q):
        diag = n_kv - n_q + i
        mask[i, diag + 1:] = -np.inf
        holes = rng.random(diag) < 0.2
        mask[i, :diag][holes] = -np.inf
    mask[n_q:] = -np.inf
    return mask.astype(np.float16)


CASES = [
    # D, n_head, n_head_kv, n_q, n_kv, n_seq, permuted_q
    (64, 9, 3, 1, 37, 1, True),
    (64, 9, 3, 7, 64, 1, True),
    (128, 32, 8, 33, 100, 1, False),
    (128, 14, 2, 1, 256, 1, True),
    (64, 4, 4, 5, 48, 2, False),
    (64, 8, 2, 3, 40, 1, False),  # no mask
]


@pytest.mark.parametrize("D,n_head,n_head_kv,n_q,n_kv,n_seq,permuted_q", CASES)
def test_flash_attn_ext_matches_numpy(clm, device, backend, D, n_head, n_head_kv, n_q, n_kv, n_seq,
                                      permuted_q):
    F32, F16 = clm.TensorType.F32, clm.TensorType.F16
    use_mask = (D, n_head, n_q) != (64, 8, 3)
    scale = 1.0 / np.sqrt(D)
    n_ctx = n_kv + 16
    n_q_pad = (n_q + 7) // 8 * 8
    q_np = rng.standard_normal((n_seq, n_head, n_q, D)).astype(np.float32)
    k_np = rng.uniform(-1, 1, (n_seq, n_head_kv, n_kv, D)).astype(np.float16)
    v_np = rng.uniform(-1, 1, (n_seq, n_head_kv, n_kv, D)).astype(np.float16)
    mask_np = _causal_mask(n_q, n_q_pad, n_kv)
    # caches in the runner's layout: numpy (n_seq, n_ctx, n_head_kv, D), cells [0, n_kv) in use
    k_cache = np.zeros((n_seq, n_ctx, n_head_kv, D), dtype=np.float16)
    v_cache = np.full((n_seq, n_ctx, n_head_kv, D), np.nan, dtype=np.float16)
    k_cache[:, :n_kv] = k_np.transpose(0, 2, 1, 3)
    v_cache[:, :n_kv] = v_np.transpose(0, 2, 1, 3)
    v_cache[:, n_kv:] = 0

    with clm.Context() as ctx:
        if permuted_q:  # Qcur [D, n_head, n_q, n_seq] permuted to [D, n_q, n_head, n_seq]
            q_src = ctx.new_tensor(F32, (D, n_head, n_q, n_seq), name="Qcur")
            q = ctx.permute(q_src, 0, 2, 1, 3)
            q_host = q_np.transpose(0, 2, 1, 3)
        else:
            q_src = q = ctx.new_tensor(F32, (D, n_q, n_head, n_seq), name="q")
            q_host = q_np
        kc = ctx.new_tensor(F16, (D, n_head_kv, n_ctx, n_seq), name="cache_k")
        vc = ctx.new_tensor(F16, (D, n_head_kv, n_ctx, n_seq), name="cache_v")
        # views [D, n_kv, n_head_kv, n_seq] into the caches (strided, as the runner builds them)
        row = D * 2
        k = ctx.view_4d(kc, (D, n_kv, n_head_kv, n_seq), (row * n_head_kv, row, row * n_head_kv * n_ctx))
        v = ctx.view_4d(vc, (D, n_kv, n_head_kv, n_seq), (row * n_head_kv, row, row * n_head_kv * n_ctx))
        mask = ctx.new_tensor(F16, (n_kv, n_q_pad, 1, 1), name="kq_mask") if use_mask else None
        out = _flash_attn_ext(clm, ctx, q, k, v, mask, scale)
        assert out.ne == (D, n_head, n_q, n_seq) and out.type == F32
        assert device.supports_op(out)
        graph = ctx.new_graph().build_forward(out)
        with ctx.alloc_tensors(device.buffer_type):
            q_src.set(q_host)
            kc.set(k_cache)
            vc.set(v_cache)
            if use_mask:
                mask.set(mask_np.reshape(1, 1, n_q_pad, n_kv))
            backend.graph_compute(graph)
            backend.synchronize()
            got = out.get().reshape(n_seq, n_q, n_head, D)

    ref = _reference(q_np, k_np, v_np, mask_np[:n_q][None, None] if use_mask else None, scale)
    assert np.all(np.isfinite(got))
    nmse = np.sum((got - ref) ** 2) / np.sum(ref ** 2)
    assert nmse < 5e-4, f"NMSE {nmse:.3e}"


def _fa_node(clm, ctx, D=64, n_head=4, n_head_kv=2, k_type=None, max_bias=0.0, softcap=0.0):
    F32, F16 = clm.TensorType.F32, clm.TensorType.F16
    q = ctx.new_tensor(F32, (D, 3, n_head, 1))
    k = ctx.new_tensor(k_type if k_type is not None else F16, (D, 16, n_head_kv, 1))
    v = ctx.new_tensor(F16, (D, 16, n_head_kv, 1))
    mask = ctx.new_tensor(F16, (16, 8, 1, 1))
    return _flash_attn_ext(clm, ctx, q, k, v, mask, 0.125, max_bias, softcap)


def test_supports_op_declines_what_fused_attention_cannot_do(clm, device):
    with clm.Context() as ctx:
        assert device.supports_op(_fa_node(clm, ctx))
        assert device.supports_op(_fa_node(clm, ctx, D=128, n_head=32, n_head_kv=8))
        assert not device.supports_op(_fa_node(clm, ctx, softcap=30.0))   # no softcap in FIA
        assert device.supports_op(_fa_node(clm, ctx, max_bias=8.0))       # ALiBi: slopes in the pse
        assert not device.supports_op(_fa_node(clm, ctx, k_type=clm.TensorType.F32))  # K/V F16 only
        assert not device.supports_op(_fa_node(clm, ctx, D=40))           # D % 16 != 0


@pytest.mark.parametrize("n_q", [1, 4])
def test_nan_in_a_query_row_gives_nan_not_zeros(clm, device, backend, n_q):
    """A NaN score poisons its row's softmax on the NPU: the row comes out NaN (as the CPU
    reference gives), never as a quiet row of zeros; the other rows stay finite."""
    F32, F16 = clm.TensorType.F32, clm.TensorType.F16
    D, n_head, n_head_kv, n_kv = 64, 4, 2, 32
    q_np = rng.standard_normal((1, n_head, n_q, D)).astype(np.float32)
    q_np[0, 1, 0, :] = np.nan                          # head 1, row 0: every score NaN
    q_np[0, 2, n_q - 1, 5] = np.nan                    # head 2, last row
    kv = rng.uniform(-1, 1, (2, 1, n_head_kv, n_kv, D)).astype(np.float16)
    with clm.Context() as ctx:
        q = ctx.new_tensor(F32, (D, n_q, n_head, 1), name="q")
        k = ctx.new_tensor(F16, (D, n_kv, n_head_kv, 1), name="k")
        v = ctx.new_tensor(F16, (D, n_kv, n_head_kv, 1), name="v")
        mask = ctx.new_tensor(F16, (n_kv, n_q, 1, 1), name="kq_mask")
        out = _flash_attn_ext(clm, ctx, q, k, v, mask, 1.0 / np.sqrt(D))
        assert device.supports_op(out)
        graph = ctx.new_graph().build_forward(out)
        with ctx.alloc_tensors(device.buffer_type):
            q.set(q_np)
            k.set(kv[0])
            v.set(kv[1])
            mask.set(np.zeros((1, 1, n_q, n_kv), np.float16))
            backend.graph_compute(graph)
            backend.synchronize()
            got = out.get().reshape(n_q, n_head, D)
    bad = np.zeros((n_q, n_head), bool)
    bad[0, 1] = bad[n_q - 1, 2] = True
    assert np.isnan(got[bad]).all()
    assert np.isfinite(got[~bad]).all()


@pytest.mark.parametrize("n_q,max_bias", [(1, 0.0), (1, 8.0), (5, 0.0), (5, 8.0)])
def test_temporaries_are_returned_to_the_pool(clm, device, backend, n_q, max_bias):
    """Every pool temporary of FLASH_ATTN_EXT (Q cast, attenMask, clamped mask, pse, output) is
    freed in LIFO order: the VMM pool holds nothing once the graph has run."""
    F32, F16 = clm.TensorType.F32, clm.TensorType.F16
    D, n_head, n_head_kv, n_kv = 64, 4, 2, 40
    with clm.Context() as ctx:
        q = ctx.new_tensor(F32, (D, n_q, n_head, 1), name="q")
        k = ctx.new_tensor(F16, (D, n_kv, n_head_kv, 1), name="k")
        v = ctx.new_tensor(F16, (D, n_kv, n_head_kv, 1), name="v")
        mask = ctx.new_tensor(F16, (n_kv, n_q, 1, 1), name="kq_mask")
        out = _flash_attn_ext(clm, ctx, q, k, v, mask, 0.125, max_bias)
        graph = ctx.new_graph().build_forward(out)
        with ctx.alloc_tensors(device.buffer_type):
            q.set(rng.standard_normal((1, n_head, n_q, D)).astype(np.float32))
            k.set(rng.uniform(-1, 1, (1, n_head_kv, n_kv, D)).astype(np.float16))
            v.set(rng.uniform(-1, 1, (1, n_head_kv, n_kv, D)).astype(np.float16))
            m = np.zeros((1, 1, n_q, n_kv), np.float16)
            m[..., -3:] = -np.inf
            mask.set(m)
            for _ in range(2):
                backend.graph_compute(graph)
                backend.synchronize()
                assert backend.stats()["pool_in_use"] == 0
            assert np.isfinite(out.get()).all()


def test_decode_row_with_every_key_masked_matches_the_npu(clm, device, backend):
    """Decode masks through a pse clamped to -65504 (ops_attention.c). acl_host skips such keys
    only when the row has another key: a row masked everywhere gets softmax over the equal
    biases, i.e. attention without the mask, as the NPU computes it (not a row of zeros)."""
    F32, F16 = clm.TensorType.F32, clm.TensorType.F16
    D, n_head, n_head_kv, n_kv = 64, 4, 2, 48
    q_np = rng.standard_normal((1, n_head, 1, D)).astype(np.float32)
    k_np = rng.uniform(-1, 1, (1, n_head_kv, n_kv, D)).astype(np.float16)
    v_np = rng.uniform(-1, 1, (1, n_head_kv, n_kv, D)).astype(np.float16)
    with clm.Context() as ctx:
        q = ctx.new_tensor(F32, (D, 1, n_head, 1), name="q")
        k = ctx.new_tensor(F16, (D, n_kv, n_head_kv, 1), name="k")
        v = ctx.new_tensor(F16, (D, n_kv, n_head_kv, 1), name="v")
        mask = ctx.new_tensor(F16, (n_kv, 1, 1, 1), name="kq_mask")
        out = _flash_attn_ext(clm, ctx, q, k, v, mask, 0.125)
        graph = ctx.new_graph().build_forward(out)
        with ctx.alloc_tensors(device.buffer_type):
            q.set(q_np)
            k.set(k_np)
            v.set(v_np)
            mask.set(np.full((1, 1, 1, n_kv), -np.inf, np.float16))
            backend.graph_compute(graph)
            backend.synchronize()
            got = out.get().reshape(1, 1, n_head, D)
    ref = _reference(q_np, k_np, v_np, None, 0.125)
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-3)
