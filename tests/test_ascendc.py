"""The AscendC kernels of ascendc_ops/ through the backend: quantizing copies write exactly the
bytes of ggml's reference quantizer (gguf.quants) at its edge cases, GET_ROWS gives F16 results
and repeated ids, captured graphs replay kernel launches; libacl_host's copies of the kernels,
launched through their aclrtlaunch_* entry points, show the host shim rejecting a misaligned
DataCopy and an over-capacity unified buffer; CANN_LLM_ASCENDC=0 turns the kernels off.
Shapes passed to new_tensor are ggml order; numpy arrays are the reverse.
"""

import os

import gguf
import numpy as np
import pytest

from conftest import package_file, run_python
from test_backend import _compute as compute_on_device

rng = np.random.default_rng(2468)


def _compute(device, backend, build, inputs):
    """test_backend's _compute, failing when the device declines the result's op (a declined op
    would not run the kernel under test)."""
    def build_supported(ctx, t):
        out = build(ctx, t)
        assert device.supports_op(out), f"{out.op_desc} is declined"
        return out
    return compute_on_device(device, backend, build_supported, inputs)


def _edge_values(n_groups: int) -> np.ndarray:
    """Groups of 32 at the quantizers' edges, then random groups: rounding ties of x / d (Q8_0:
    2.5 with d = 1 rounds away from zero), largest and smallest of equal magnitude (Q4_0 takes
    the first), all zero, all -0, one value, a huge and a tiny magnitude."""
    g = []
    g.append(np.r_[127.0, 2.5, -2.5, 0.5, -0.5, 1.5, np.zeros(26)])
    g.append(np.r_[-8.0, 0.5, -0.5, 7.5, -7.5, 3.5, np.zeros(26)])
    g.append(np.r_[3.0, -3.0, np.ones(30)])
    g.append(np.r_[-3.0, 3.0, np.ones(30)])
    g.append(np.zeros(32))
    g.append(np.full(32, -0.0))
    g.append(np.r_[np.zeros(31), -5.0])
    g.append(rng.standard_normal(32) * 1e4)
    g.append(rng.standard_normal(32) * 1e-3)
    edges = np.array(g, dtype=np.float32)
    n_rest = max(n_groups - len(edges), 0)
    rest = rng.standard_normal((n_rest, 32)) * rng.uniform(0.01, 100, (n_rest, 1))
    return np.concatenate([edges, rest.astype(np.float32)])[:n_groups].reshape(-1)


@pytest.mark.parametrize("src", ["F32", "F16"])
@pytest.mark.parametrize("dst", ["Q8_0", "Q4_0"])
@pytest.mark.parametrize("ne", [(32, 1), (32 * 67, 5)])
def test_quantizing_copy_is_ggml_bit_for_bit(clm, device, backend, src, dst, ne):
    T = clm.TensorType
    n = ne[0] * ne[1]
    values = _edge_values(n // 32).reshape(ne[1], ne[0])
    if src == "F16":
        values = values.astype(np.float16)
    got = _compute(device, backend, lambda ctx, t: ctx.cpy(t["x"], t["q"]),
                   {"x": (T[src], ne, values), "q": (T[dst], ne, None)})
    want = gguf.quants.quantize(values.astype(np.float32), gguf.GGMLQuantizationType[dst])
    if dst == "Q4_0":
        # gguf takes the first value of largest magnitude even when that is 0, so an all -0
        # group gets d = +0; ggml's C keeps its initial max = +0.0f there, and d = -0
        want = want.reshape(-1, 18).copy()
        want[:, :2] = _ggml_q4_0_d(values.astype(np.float32).reshape(-1, 32)).view(np.uint8).reshape(-1, 2)
    assert np.asarray(got).tobytes() == want.tobytes()


def _ggml_q4_0_d(groups: np.ndarray) -> np.ndarray:
    """d of each group as ggml's quantize_row_q4_0_ref computes it (a loop, in float32)."""
    out = []
    for group in groups:
        amax, vmax = np.float32(0.0), np.float32(0.0)
        for v in group:
            if amax < abs(v):
                amax, vmax = abs(v), v
        out.append(np.float32(vmax) / np.float32(-8.0))
    return np.array(out, dtype=np.float32).astype(np.float16)


def test_get_rows_f16_result_with_repeated_ids(clm, device, backend):
    """Q8_0 rows dequantized in F32 (q * d, as gguf dequantizes) and rounded once to F16."""
    T = clm.TensorType
    table = rng.standard_normal((10, 64)).astype(np.float32)
    stored = gguf.quants.quantize(table, gguf.GGMLQuantizationType.Q8_0)
    ids = np.array([[3, 3, 9, 0, 3, 9, 1]], dtype=np.int32)
    got = _compute(device, backend,
                   lambda ctx, t: ctx.new_op(clm.Op.GET_ROWS, T.F16, [64, 7, 1, 1], [t["a"], t["ids"]]),
                   {"a": (T.Q8_0, [64, 10], stored), "ids": (T.I32, [7], ids)})
    rows = gguf.quants.dequantize(stored, gguf.GGMLQuantizationType.Q8_0)
    want = rows[ids[0]].astype(np.float16)
    assert np.asarray(got).reshape(7, 64).view(np.uint16).tolist() == want.view(np.uint16).tolist()


def test_captured_graph_replays_kernel_launches(clm, device):
    """GET_ROWS from a Q4_1 table, then CPY of the rows into Q8_0: replays read the new ids."""
    T = clm.TensorType
    saved = os.environ.get("GGML_CANN_ACL_GRAPH")
    os.environ["GGML_CANN_ACL_GRAPH"] = "1"
    try:
        backend = device.init_backend()
    finally:
        if saved is None:
            os.environ.pop("GGML_CANN_ACL_GRAPH")
        else:
            os.environ["GGML_CANN_ACL_GRAPH"] = saved
    table = rng.standard_normal((50, 256)).astype(np.float32)
    stored = gguf.quants.quantize(table, gguf.GGMLQuantizationType.Q4_1)
    rows = gguf.quants.dequantize(stored, gguf.GGMLQuantizationType.Q4_1)
    with backend, clm.Context() as ctx:
        a = ctx.new_tensor(T.Q4_1, [256, 50], name="a")
        ids = ctx.new_tensor(T.I32, [4], name="ids")
        q = ctx.new_tensor(T.Q8_0, [256, 4], name="q")
        out = ctx.cpy(ctx.get_rows(a, ids), q)
        graph = ctx.new_graph().build_forward(out)
        with ctx.alloc_tensors(device.buffer_type):
            a.set(stored)
            for step in range(3):
                pick = rng.integers(0, 50, size=4).astype(np.int32)
                ids.set(pick)
                backend.graph_compute(graph)
                backend.synchronize()
                got = gguf.quants.dequantize(q.get(), gguf.GGMLQuantizationType.Q8_0)
                want = gguf.quants.dequantize(
                    gguf.quants.quantize(rows[pick], gguf.GGMLQuantizationType.Q8_0),
                    gguf.GGMLQuantizationType.Q8_0)
                # the device dequantizes Q4_1 as (w + offset) * d (docs/quant_layouts.md): a row
                # may differ from ggml's by one fp16 rounding, and its Q8_0 by one step
                step_size = np.abs(want).max(axis=-1, keepdims=True) / 127
                assert np.all(np.abs(got - want) <= step_size * 1.01 + 1e-6)
        stats = backend.stats()
        assert stats["graph_captures"] == 1 and stats["graph_replays"] == 2


_ACL_CDEF = """
int aclInit(const char *configPath);
int aclrtSetDevice(int32_t deviceId);
int aclrtMalloc(void **devPtr, size_t size, int policy);
int aclrtFree(void *devPtr);
int aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, int kind);
int aclrtCreateStream(void **stream);
int aclrtDestroyStream(void *stream);
int aclrtSynchronizeStream(void *stream);
const char *aclGetRecentErrMsg(void);
uint32_t aclrtlaunch_clm_dup(uint32_t blockDim, void *stream, void *src, void *dst, uint32_t src_type,
                             uint32_t dst_type, uint64_t n, uint32_t tile);
"""
ACL_ERROR_RT_AICORE_EXCEPTION = 507015


def test_shim_rejects_misaligned_datacopy_and_overfull_unified_buffer(clm):
    """clm_dup (F32 -> F16) launched by hand: right values with the host tiling at any blockDim;
    a source that is not F32-aligned is a misaligned DataCopy, and a tile of 32768 elements needs
    2 x 128 KiB of input queue, more than the 910B's 192 KiB unified buffer. Both fail at
    synchronize as AI-core exceptions naming the rule, and the stream works after."""
    if clm.runtime_name() != "acl_host":
        pytest.skip("the host shim exists in the host build only")
    import cffi
    ffi = cffi.FFI()
    ffi.cdef(_ACL_CDEF)
    lib = ffi.dlopen(str(package_file("libacl_host.so")))
    assert lib.aclInit(ffi.NULL) in (0, 100002)
    assert lib.aclrtSetDevice(0) == 0
    n = 20000 + 3
    x = (rng.standard_normal(n) * 100).astype(np.float32)
    ptrs = ffi.new("void *[2]")
    stream = ffi.new("void **")
    assert lib.aclrtMalloc(ptrs + 0, n * 4, 0) == 0 and lib.aclrtMalloc(ptrs + 1, n * 2, 0) == 0
    assert lib.aclrtCreateStream(stream) == 0
    src, dst, s = ptrs[0], ptrs[1], stream[0]
    try:
        assert lib.aclrtMemcpy(src, n * 4, ffi.from_buffer(x), n * 4, 1) == 0
        for block_dim in (1, 3, 40):
            assert lib.aclrtlaunch_clm_dup(block_dim, s, src, dst, 0, 1, n, 8192) == 0
            assert lib.aclrtSynchronizeStream(s) == 0
            out = np.empty(n, dtype=np.float16)
            assert lib.aclrtMemcpy(ffi.from_buffer(out), n * 2, dst, n * 2, 2) == 0
            assert out.tobytes() == x.astype(np.float16).tobytes()
        for args, rule in [((ffi.cast("char *", src) + 2, n - 1, 8192), "not aligned to its element size"),
                           ((src, n, 32768), "over the 910B's 196608")]:
            assert lib.aclrtlaunch_clm_dup(2, s, args[0], dst, 0, 1, args[1], args[2]) == 0
            assert lib.aclrtSynchronizeStream(s) == ACL_ERROR_RT_AICORE_EXCEPTION
            message = ffi.string(lib.aclGetRecentErrMsg()).decode()
            assert "aclrtlaunch_clm_dup" in message and rule in message, message
        assert lib.aclrtlaunch_clm_dup(2, s, src, dst, 0, 1, n, 8192) == 0
        assert lib.aclrtSynchronizeStream(s) == 0
    finally:
        assert lib.aclrtDestroyStream(s) == 0
        assert lib.aclrtFree(src) == 0 and lib.aclrtFree(dst) == 0


def test_kernels_off_declines_quantizing_copies():
    code = """
from cann_llm import backend as clm
T = clm.TensorType
device = clm.Registry().devices[0]
with clm.Context() as ctx:
    x = ctx.new_tensor(T.F32, [64, 2])
    print(device.supports_op(ctx.cpy(x, ctx.new_tensor(T.Q8_0, [64, 2]))),
          device.supports_op(ctx.get_rows(ctx.new_tensor(T.Q8_0, [64, 9]), ctx.new_tensor(T.I32, [3]))))
"""
    on = run_python(code)
    off = run_python(code, env={"CANN_LLM_ASCENDC": "off"})
    assert on.returncode == 0 and off.returncode == 0, on.stderr + off.stderr
    assert on.stdout.split() == ["True", "True"]
    assert off.stdout.split() == ["False", "True"]      # GET_ROWS: the IndexSelect composition
