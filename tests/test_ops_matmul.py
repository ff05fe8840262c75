"""MUL_MAT and GET_ROWS on CANN0 against numpy: float weights (aclnnMm / aclnnMatmul), quantized
weights in the device layouts (aclnnWeightQuantBatchMatmulV2), ggml batch broadcasting, permuted
and transposed activations, N past 65535; row gathers from float and quantized tables with only
the gathered rows dequantized. Quantized references come from gguf.quants. And
scripts/bench_gemm_kernel.py builds its harness against the decode kernels and reports each type.

Shapes given to new_tensor are ggml order (ne[0] fastest); numpy arrays are the reverse.
"""

import platform
import re
import subprocess
import sys

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf import quants

rng = np.random.default_rng(2024)


def nmse(got, ref):
    return float(np.sum((got.astype(np.float64) - ref) ** 2) / np.sum(ref.astype(np.float64) ** 2))


def _weights(clm, type_name, shape):
    """Random weights of numpy shape `shape` (last axis = K): (host bytes for set(), the values
    the device should use as float64)."""
    w = rng.standard_normal(shape).astype(np.float32)
    if type_name == "F32":
        return w, w.astype(np.float64)
    if type_name == "F16":
        h = w.astype(np.float16)
        return h, h.astype(np.float64)
    if type_name == "BF16":
        from cann_llm import dtypes
        bits = dtypes.bf16_bits(w)
        return bits, dtypes.bf16_to_f32(bits).astype(np.float64)
    qt = QT[type_name]
    raw = quants.quantize(w, qt)
    return raw, quants.dequantize(raw, qt).astype(np.float64)


def _run(backend, out, *inputs):
    graph = out._ctx.new_graph().build_forward(out)
    backend.graph_compute(graph)
    backend.synchronize()
    return out.get()


# ---- MUL_MAT -------------------------------------------------------------------------------------
MM_CASES = [
    # weight type, K, N, M, (ne02, ne03), (ne12, ne13)
    ("F32", 64, 48, 5, (1, 1), (1, 1)),
    ("F16", 96, 33, 1, (1, 1), (1, 1)),
    ("F16", 128, 40, 9, (2, 1), (6, 2)),
    ("BF16", 64, 24, 3, (1, 1), (1, 1)),
    ("F32", 32, 16, 4, (3, 2), (3, 2)),
    ("Q8_0", 256, 96, 1, (1, 1), (1, 1)),
    ("Q8_0", 128, 50, 7, (1, 1), (1, 1)),
    ("Q4_0", 256, 96, 1, (1, 1), (1, 1)),
    ("Q4_0", 512, 70, 33, (1, 1), (1, 1)),
    ("Q4_0", 32, 20, 3, (1, 1), (1, 1)),     # K == 32: per-channel scales
    ("Q4_1", 256, 64, 1, (1, 1), (1, 1)),
    ("Q4_1", 192, 40, 17, (1, 1), (1, 1)),
    ("Q4_0", 64, 16, 2, (2, 1), (4, 1)),     # batched quantized weights, broadcast
    ("Q8_0", 64, 16, 3, (1, 1), (2, 3)),
]


@pytest.mark.parametrize("wtype,K,N,M,wb,xb", MM_CASES)
def test_mul_mat_matches_numpy(clm, device, backend, wtype, K, N, M, wb, xb):
    T = clm.TensorType
    w_host, w_ref = _weights(clm, wtype, (wb[1], wb[0], N, K))
    x = rng.standard_normal((xb[1], xb[0], M, K)).astype(np.float32)
    with clm.Context() as ctx:
        w = ctx.new_tensor(T[wtype], (K, N, wb[0], wb[1]), name="w")
        b = ctx.new_tensor(T.F32, (K, M, xb[0], xb[1]), name="x")
        out = ctx.mul_mat(w, b)
        assert device.supports_op(out)
        with ctx.alloc_tensors(device.buffer_type):
            w.set(w_host)
            b.set(x)
            got = _run(backend, out)
    r2, r3 = xb[0] // wb[0], xb[1] // wb[1]
    w_b = np.repeat(np.repeat(w_ref, r3, axis=0), r2, axis=1)   # (ne13, ne12, N, K)
    ref = np.einsum("abmk,abnk->abmn", x.astype(np.float64), w_b)
    got = got.reshape(ref.shape)
    assert nmse(got, ref) < 5e-4, f"NMSE {nmse(got, ref):.3e}"


@pytest.mark.parametrize("wtype", ["F32", "F16", "Q4_0"])
def test_mul_mat_permuted_and_transposed_activations(clm, device, backend, wtype):
    T = clm.TensorType
    K, N, M, H = 64, 24, 5, 3
    w_host, w_ref = _weights(clm, wtype, (N, K))
    x = rng.standard_normal((H, M, K)).astype(np.float32)        # logical [K, M, H]
    xt = rng.standard_normal((K, M)).astype(np.float32)          # stored [M, K], transposed view
    with clm.Context() as ctx:
        w = ctx.new_tensor(T[wtype], (K, N), name="w")
        src = ctx.new_tensor(T.F32, (K, H, M, 1), name="x_src")      # numpy (M, H, K)
        xp = ctx.permute(src, 0, 2, 1, 3)                              # [K, M, H]
        out = ctx.mul_mat(w, xp)
        src_t = ctx.new_tensor(T.F32, (M, K), name="xt_src")         # numpy (K, M)
        out_t = ctx.mul_mat(w, ctx.transpose(src_t))                   # [K, M] with nb0 = M*4
        assert device.supports_op(out) and device.supports_op(out_t)
        with ctx.alloc_tensors(device.buffer_type):
            w.set(w_host)
            src.set(np.ascontiguousarray(x.transpose(1, 0, 2)))
            src_t.set(xt)
            got = _run(backend, out)
            got_t = _run(backend, out_t)
    ref = np.einsum("hmk,nk->hmn", x.astype(np.float64), w_ref)
    assert nmse(got.reshape(ref.shape), ref) < 5e-4
    ref_t = np.einsum("km,nk->mn", xt.astype(np.float64), w_ref)
    assert nmse(got_t.reshape(ref_t.shape), ref_t) < 5e-4


def test_mul_mat_n_past_65535(clm, device, backend):
    """The output projection of a large vocabulary: N is split in chunks of <= 65535 columns."""
    T = clm.TensorType
    K, N, M = 32, 70000, 2
    w_host, w_ref = _weights(clm, "Q4_0", (N, K))
    x = rng.standard_normal((M, K)).astype(np.float32)
    with clm.Context() as ctx:
        w = ctx.new_tensor(T.Q4_0, (K, N), name="output.weight")
        b = ctx.new_tensor(T.F32, (K, M), name="x")
        out = ctx.mul_mat(w, b)
        with ctx.alloc_tensors(device.buffer_type):
            w.set(w_host)
            b.set(x)
            got = _run(backend, out)
    ref = x.astype(np.float64) @ w_ref.T
    assert nmse(got, ref) < 5e-4
    # the last columns (second chunk) are right too
    tail = slice(65535, N)
    assert nmse(got[:, tail], ref[:, tail]) < 5e-4


def test_mul_mat_batch_invariant_rows(clm, device, backend):
    """Row r of an M=64 product is bit-identical to the same row computed alone."""
    T = clm.TensorType
    K, N = 256, 80
    w_host, _ = _weights(clm, "Q4_1", (N, K))
    x = rng.standard_normal((64, K)).astype(np.float32)
    with clm.Context() as ctx:
        w = ctx.new_tensor(T.Q4_1, (K, N), name="w")
        b64 = ctx.new_tensor(T.F32, (K, 64), name="x64")
        b1 = ctx.new_tensor(T.F32, (K, 1), name="x1")
        o64, o1 = ctx.mul_mat(w, b64), ctx.mul_mat(w, b1)
        with ctx.alloc_tensors(device.buffer_type):
            w.set(w_host)
            b64.set(x)
            y64 = _run(backend, o64).reshape(64, N)
            for r in (0, 31, 63):
                b1.set(x[r:r + 1])
                y1 = _run(backend, o1).reshape(N)
                assert np.array_equal(y1.view(np.uint32), y64[r].view(np.uint32))


def test_mul_mat_declines_unsupported_weights(clm, device):
    T = clm.TensorType
    with clm.Context() as ctx:
        for wtype in ("Q4_K", "Q5_0", "Q6_K"):
            w = ctx.new_tensor(T[wtype], (256, 8), name="w")
            b = ctx.new_tensor(T.F32, (256, 2), name="x")
            assert not device.supports_op(ctx.mul_mat(w, b))
        # a view into a quantized tensor is not in the layout's regions
        w = ctx.new_tensor(T.Q8_0, (64, 8), name="w")
        wv = ctx.view_4d(w, (64, 4, 1, 1), (w.nb[1], w.nb[1] * 4, w.nb[1] * 4), w.nb[1] * 4)
        assert not device.supports_op(ctx.mul_mat(wv, ctx.new_tensor(T.F32, (64, 2), name="x")))


# ---- GET_ROWS ------------------------------------------------------------------------------------
GR_CASES = [
    ("F32", 40, 17, 5, (1, 1)),
    ("F16", 64, 30, 9, (2, 1)),
    ("BF16", 32, 10, 4, (1, 1)),
    ("Q8_0", 64, 50, 7, (1, 1)),
    ("Q4_0", 576, 100, 6, (1, 1)),
    ("Q4_1", 128, 33, 5, (1, 1)),
    ("Q4_0", 64, 12, 3, (2, 2)),
    ("Q4_1", 32, 20, 1, (1, 1)),
]


@pytest.mark.parametrize("ttype,ne0,n_rows,n,batch", GR_CASES)
def test_get_rows_matches_numpy(clm, device, backend, ttype, ne0, n_rows, n, batch):
    T = clm.TensorType
    t_host, t_ref = _weights(clm, ttype, (batch[1], batch[0], n_rows, ne0))
    ids = rng.integers(0, n_rows, size=(batch[1], batch[0], n)).astype(np.int32)
    ids[..., 0] = n_rows - 1
    with clm.Context() as ctx:
        table = ctx.new_tensor(T[ttype], (ne0, n_rows, batch[0], batch[1]), name="token_embd.weight")
        rows = ctx.new_tensor(T.I32, (n, batch[0], batch[1]), name="inp_tokens")
        out = ctx.get_rows(table, rows)
        assert device.supports_op(out)
        with ctx.alloc_tensors(device.buffer_type):
            table.set(t_host)
            rows.set(ids)
            got = _run(backend, out).reshape(batch[1], batch[0], n, ne0)
    ref = np.take_along_axis(t_ref, ids[..., None].astype(np.int64), axis=2)
    if ttype == "Q4_1":   # dequantized as the matmul reads it: (q + f16(8 + m/d)) * d
        assert nmse(got, ref) < 1e-6
        assert np.allclose(got, ref, rtol=0, atol=2e-2 * np.abs(ref).max())
    else:                 # exact: float gathers, q * d in F32
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=0)


def test_get_rows_declines(clm, device):
    T = clm.TensorType
    with clm.Context() as ctx:
        rows = ctx.new_tensor(T.I32, (3,), name="ids")
        for ttype in ("Q4_K", "Q5_0"):
            table = ctx.new_tensor(T[ttype], (256, 8), name="t")
            assert not device.supports_op(ctx.get_rows(table, rows))
        assert device.supports_op(ctx.get_rows(ctx.new_tensor(T.Q8_0, (64, 8), name="q"), rows))


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the kernel bench counts x86 TSC cycles")
def test_kernel_bench_builds_and_reports_each_weight_type():
    """The harness compiles against gemm.c's interface as it is, and measures every decode kernel
    (rates only printed, never compared: speed is not asserted)."""
    from conftest import REPO_ROOT
    out = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "bench_gemm_kernel.py"),
                          "--k", "64", "--n", "64", "--rows", "1,3", "--stream-mb", "1", "--quick"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    peak = re.search(r"F32 FMA peak \((avx512|avx2)\): ([0-9.]+), ([0-9.]+)", out.stdout)
    assert peak and float(peak[2]) > 0 and float(peak[3]) > 0, out.stdout
    rows = re.findall(r"^\| (\d+) \| (\w+) \| ([0-9.]+) \| \d+% \| ([0-9.]+) \| \d+% \| ([0-9.]+) \|$",
                      out.stdout, re.M)
    types = ["Q4_1", "Q4_0", "Q8_0"] + (["F16"] if peak[1] == "avx512" else [])
    assert [(r, t) for r, t, *_ in rows] == [(r, t) for r in ("1", "3") for t in types], out.stdout
    assert all(float(v) > 0 for *_, hot, streamed, gbs in rows for v in (hot, streamed, gbs))
