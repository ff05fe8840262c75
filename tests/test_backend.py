"""The backend through its Python wrappers: devices, buffers, graph_compute against numpy, stream
ordering and events, and acl_host's device sanitizer surfacing as CannError (the process goes on).

Shapes passed to new_tensor are ggml order (ne[0] fastest); numpy arrays are the reverse.
"""

import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import package_file, run_python

rng = np.random.default_rng(1234)


def _host_only(clm):
    if clm.runtime_name() != "acl_host":
        pytest.skip("acl_host behaviour (the toolkit build runs on a real NPU)")


def _compute(device, backend, build, inputs):
    """Build a graph with build(ctx, tensors) -> result, place everything on the device, upload
    inputs {name: array}, run it and return the result (numpy order)."""
    from cann_llm import backend as clm
    with clm.Context() as ctx:
        tensors = {name: ctx.new_tensor(ttype, ne, name=name) for name, (ttype, ne, _) in inputs.items()}
        result = build(ctx, tensors)
        graph = ctx.new_graph().build_forward(result)
        with ctx.alloc_tensors(device.buffer_type):
            for name, (_, _, array) in inputs.items():
                if array is not None:
                    tensors[name].set(array)
            backend.graph_compute(graph)
            backend.synchronize()
            return result.get()


# ---- registry and devices ---------------------------------------------------------------------

def test_registry_lists_cann0(clm, device):
    registry = clm.Registry()
    assert registry.devices[0].name == "CANN0"
    assert device.type == clm.DeviceType.GPU   # as ggml-cann reports its devices
    if clm.runtime_name() == "acl_host":
        assert device.description == "acl_host"
    else:
        assert device.description.startswith("Ascend")


def test_device_memory_is_positive(device):
    free, total = device.memory()
    assert 0 < free <= total


def test_buffer_type_and_buffer(clm, device):
    buffer_type = device.buffer_type
    assert not buffer_type.is_host
    assert buffer_type.alignment > 0 and buffer_type.alignment & (buffer_type.alignment - 1) == 0
    assert device.supports_buft(buffer_type)
    with buffer_type.alloc_buffer(4096) as buffer:
        assert buffer.size >= 4096 and buffer.base != 0 and not buffer.is_host
        assert buffer.buffer_type == buffer_type
        buffer.usage = clm.BufferUsage.WEIGHTS
        assert buffer.usage == clm.BufferUsage.WEIGHTS
        buffer.clear(0)
    assert buffer.closed
    with pytest.raises(clm.CannError, match="freed"):
        buffer.size


def test_buffer_base_has_the_buffer_types_alignment(device):
    """ggml's allocator places tensors at base + offsets aligned to the buffer type's alignment
    (128), while aclrtMalloc promises only 64 bytes: the base must be rounded up by the backend.
    Sixteen small buffers, so a base that is 128-aligned by luck cannot hide a 64-aligned one."""
    buffer_type = device.buffer_type
    buffers = [buffer_type.alloc_buffer(size) for size in range(100, 1700, 100)]
    try:
        assert all(b.base % buffer_type.alignment == 0 for b in buffers), \
            [hex(b.base) for b in buffers]
        for b in buffers:
            b.clear(7)          # the whole promised size lies inside the allocation
    finally:
        for b in buffers:
            b.close()


def test_tensor_set_get_round_trip(clm, device):
    with clm.Context() as ctx:
        tensor = ctx.new_tensor(clm.TensorType.F32, (5, 3, 2), name="x")
        assert tensor.ne == (5, 3, 2, 1) and tensor.shape == (2, 3, 5)
        assert tensor.nb[:2] == (4, 20) and tensor.name == "x" and tensor.op == clm.Op.NONE
        buffer = ctx.alloc_tensors(device.buffer_type)
        values = rng.standard_normal((2, 3, 5), dtype=np.float32)
        tensor.set(values)
        assert np.array_equal(tensor.get(), values)
        with pytest.raises(ValueError, match="bytes"):
            tensor.set(values[:1])
        buffer.close()


# ---- ops through graph_compute ------------------------------------------------------------------

@pytest.mark.parametrize("ne_b", [(8, 4, 3), (8, 1, 3), (8, 4, 1), (8, 1, 1), (1, 4, 3)])
def test_add_broadcasts_like_numpy(clm, device, backend, ne_b):
    a = rng.standard_normal((3, 4, 8), dtype=np.float32)
    b = rng.standard_normal(tuple(reversed(ne_b)), dtype=np.float32)
    out = _compute(device, backend, lambda ctx, t: ctx.add(t["a"], t["b"]), {
        "a": (clm.TensorType.F32, (8, 4, 3), a), "b": (clm.TensorType.F32, ne_b, b)})
    np.testing.assert_allclose(out, a + b, rtol=1e-6, atol=1e-6)


@st.composite
def _broadcast_shapes(draw):
    """(ne_a, ne_b) in ggml order with b broadcastable to a (a->ne[i] % b->ne[i] == 0)."""
    ne_a = [draw(st.integers(1, 7)) for _ in range(4)]
    ne_b = [draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0])) for n in ne_a]
    return tuple(ne_a), tuple(ne_b)


@settings(max_examples=40, deadline=None)
@given(shapes=_broadcast_shapes())
def test_add_broadcasts_any_divisor_shape(clm, device, shapes):
    ne_a, ne_b = shapes
    a = rng.standard_normal(tuple(reversed(ne_a)), dtype=np.float32)
    b = rng.standard_normal(tuple(reversed(ne_b)), dtype=np.float32)
    repeats = tuple(na // nb for na, nb in zip(reversed(ne_a), reversed(ne_b)))
    with device.init_backend() as stream:
        out = _compute(device, stream, lambda ctx, t: ctx.add(t["a"], t["b"]), {
            "a": (clm.TensorType.F32, ne_a, a), "b": (clm.TensorType.F32, ne_b, b)})
    np.testing.assert_allclose(out.reshape(a.shape), a + np.tile(b, repeats), rtol=1e-6, atol=1e-6)


def test_mul_broadcasts_like_numpy(clm, device, backend):
    a = rng.standard_normal((2, 3, 16), dtype=np.float32)
    b = rng.standard_normal((1, 1, 16), dtype=np.float32)
    out = _compute(device, backend, lambda ctx, t: ctx.mul(t["a"], t["b"]), {
        "a": (clm.TensorType.F32, (16, 3, 2), a), "b": (clm.TensorType.F32, (16, 1, 1), b)})
    np.testing.assert_allclose(out, a * b, rtol=1e-6)


@pytest.mark.parametrize("src_type, dst_type", [("F32", "F16"), ("F16", "F32"), ("F32", "F32"),
                                                ("F16", "F16")])
def test_cpy_converts_like_numpy(clm, device, backend, src_type, dst_type):
    src_dtype = np.float16 if src_type == "F16" else np.float32
    dst_dtype = np.float16 if dst_type == "F16" else np.float32
    values = (rng.standard_normal((4, 33)) * 100).astype(src_dtype)
    out = _compute(device, backend, lambda ctx, t: ctx.cpy(t["src"], t["dst"]), {
        "src": (clm.TensorType[src_type], (33, 4), values),
        "dst": (clm.TensorType[dst_type], (33, 4), None)})
    assert out.dtype == dst_dtype
    assert np.array_equal(out, values.astype(dst_dtype))


def test_graph_nodes_are_topological(clm):
    with clm.Context() as ctx:
        a = ctx.new_tensor(clm.TensorType.F32, (4,), name="a")
        b = ctx.new_tensor(clm.TensorType.F32, (4,), name="b")
        ab = ctx.add(a, b)
        result = ctx.mul(ab, a)
        graph = ctx.new_graph().build_forward(result)
        assert [n.op for n in graph.nodes] == [clm.Op.ADD, clm.Op.MUL]
        assert graph.nodes[-1] == result and graph.nodes[0] == ab
        assert {leaf.name for leaf in graph.leafs} == {"a", "b"}
        assert result.src == [ab, a]


def test_views_share_data(clm, device):
    with clm.Context() as ctx:
        x = ctx.new_tensor(clm.TensorType.F32, (6, 4), name="x")
        xt = ctx.transpose(x)
        reshaped = ctx.reshape(x, (12, 2))
        permuted = ctx.permute(x, 1, 0, 2, 3)
        assert xt.ne[:2] == (4, 6) and permuted.ne[:2] == (4, 6) and reshaped.ne[:2] == (12, 2)
        assert not xt.is_contiguous and reshaped.is_contiguous
        buffer = ctx.alloc_tensors(device.buffer_type)
        values = np.arange(24, dtype=np.float32).reshape(4, 6)
        x.set(values)
        assert xt.data == x.data == reshaped.data
        assert np.array_equal(reshaped.get(), values.reshape(2, 12))
        with pytest.raises(clm.CannError):
            xt.get()
        buffer.close()


@pytest.mark.parametrize("src_offs, dst_offs", [(0, 0), (3, 0), (0, 5), (16, 32)])
def test_cpy_tensor_async_between_views(clm, device, src_offs, dst_offs):
    # aclrtMemcpyAsync within a device needs 64-byte aligned addresses: views at odd offsets
    # must still copy (the backend falls back to a synchronous copy)
    with clm.Context() as ctx:
        a = ctx.new_tensor(clm.TensorType.F32, (64,), name="a")
        b = ctx.new_tensor(clm.TensorType.F32, (64,), name="b")
        src = ctx.view_4d(a, (24,), (96, 96, 96), 4 * src_offs)
        dst = ctx.view_4d(b, (24,), (96, 96, 96), 4 * dst_offs)
        buffer = ctx.alloc_tensors(device.buffer_type)
        values = np.arange(64, dtype=np.float32)
        a.set(values)
        b.set(-values)
        with device.init_backend() as stream:
            stream.cpy_tensor_async(stream, src, dst)
            stream.synchronize()
        expected = -values
        expected[dst_offs:dst_offs + 24] = values[src_offs:src_offs + 24]
        assert np.array_equal(b.get(), expected)
        buffer.close()


# ---- streams and events -------------------------------------------------------------------------

def test_stream_runs_work_in_order(clm, device, backend):
    with clm.Context() as ctx:
        x = ctx.new_tensor(clm.TensorType.F32, (64,), name="x")
        bias = ctx.new_tensor(clm.TensorType.F32, (64,), name="bias")
        y = ctx.add(x, bias)
        graph = ctx.new_graph().build_forward(y)
        buffer = ctx.alloc_tensors(device.buffer_type)
        bias.set(np.full(64, 0.5, np.float32))
        first, second = np.arange(64, dtype=np.float32), -np.arange(64, dtype=np.float32)
        backend.set_tensor_async(x, first)
        backend.graph_compute(graph)
        out_first = backend.get_tensor_async(y)
        backend.set_tensor_async(x, second)
        backend.graph_compute(graph)
        out_second = backend.get_tensor_async(y)
        backend.synchronize()
        assert np.array_equal(out_first, first + 0.5)
        assert np.array_equal(out_second, second + 0.5)
        buffer.close()


def test_set_tensors_async_uploads_each_pair_in_order(clm, device, backend):
    """A graph's inputs in one call: every pair lands (a non-contiguous array too), the arrays stay
    alive until synchronize, and a copy that does not fit raises with the C side's message."""
    with clm.Context() as ctx:
        x = ctx.new_tensor(clm.TensorType.F32, (64,), name="x")
        bias = ctx.new_tensor(clm.TensorType.F32, (64,), name="bias")
        y = ctx.add(x, bias)
        graph = ctx.new_graph().build_forward(y)
        buffer = ctx.alloc_tensors(device.buffer_type)
        wide = np.arange(128, dtype=np.float32)
        backend.set_tensors_async([(x, wide[::2]), (bias, np.full(64, 0.25, np.float32))])
        backend.graph_compute(graph)
        out = backend.get_tensor_async(y)
        backend.synchronize()
        assert np.array_equal(out, wide[::2] + 0.25)
        with pytest.raises(clm.CannError):
            backend.set_tensors_async([(x, np.zeros(65, np.float32))])
        backend.synchronize()
        buffer.close()


_CROSS_STREAM = """
import numpy as np
from cann_llm import backend as clm
device = clm.Registry().devices[0]
producer, consumer = device.init_backend(), device.init_backend()
ctx = clm.Context()
x = ctx.new_tensor(clm.TensorType.F32, (32,), name="x")
y = ctx.new_tensor(clm.TensorType.F32, (32,), name="y")
y_written = ctx.cpy(ctx.add(x, x), y)  # on the producer stream: y = x + x
z = ctx.mul(y, x)                      # on the consumer stream, reads y (a leaf of its graph)
g_produce = ctx.new_graph().build_forward(y_written)
g_consume = ctx.new_graph().build_forward(z)
buffer = ctx.alloc_tensors(device.buffer_type)
buffer.clear(0)
values = np.arange(1, 33, dtype=np.float32)
x.set(values)
event = device.new_event()
producer.graph_compute(g_produce)
producer.event_record(event)
if WAIT:
    consumer.event_wait(event)
consumer.graph_compute(g_consume)
consumer.synchronize()
got = z.get()
producer.synchronize()
print("RIGHT" if np.array_equal(got, 2 * values * values) else "WRONG", got[:4].tolist())
"""


def test_event_orders_two_streams(clm, device):
    result = run_python("WAIT = True\n" + _CROSS_STREAM)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("RIGHT"), result.stdout


@pytest.mark.parametrize("wait, verdict", [(True, "RIGHT"),
                                           (False, "WRONG")])
def test_deferred_mode_makes_missing_event_wait_wrong(clm, wait, verdict):
    _host_only(clm)
    result = run_python(f"WAIT = {wait}\n" + _CROSS_STREAM, env={"CANN_LLM_HOST_DEFERRED": "1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(verdict), result.stdout


_MISSING_SYNC = """
import numpy as np
from cann_llm import backend as clm
device = clm.Registry().devices[0]
stream = device.init_backend()
ctx = clm.Context()
x = ctx.new_tensor(clm.TensorType.F32, (16,), name="x")
y = ctx.add(x, x)
graph = ctx.new_graph().build_forward(y)
buffer = ctx.alloc_tensors(device.buffer_type)
buffer.clear(0)
x.set(np.arange(1, 17, dtype=np.float32))
stream.graph_compute(graph)
if SYNC:
    stream.synchronize()
got = y.get()
stream.synchronize()
print("RIGHT" if np.array_equal(got, 2 * np.arange(1, 17, dtype=np.float32)) else
      ("ZEROS" if not got.any() else "OTHER"), got[:4].tolist())
"""


@pytest.mark.parametrize("sync, verdict", [(True, "RIGHT"), (False, "ZEROS")])
def test_deferred_mode_makes_missing_synchronize_wrong(clm, sync, verdict):
    _host_only(clm)
    result = run_python(f"SYNC = {sync}\n" + _MISSING_SYNC, env={"CANN_LLM_HOST_DEFERRED": "1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(verdict), result.stdout


# ---- the device sanitizer (acl_host) ---------------------------------------------------------------

def _add_graph(clm, ctx, n=256):
    x = ctx.new_tensor(clm.TensorType.F32, (n,), name="x")
    y = ctx.add(x, x)
    return x, y, ctx.new_graph().build_forward(y)


def _still_works(clm, device):
    """After a sanitizer error, a fresh stream still computes correctly."""
    with device.init_backend() as stream:
        out = _compute(device, stream, lambda ctx, t: ctx.add(t["a"], t["a"]),
                       {"a": (clm.TensorType.F32, (8,), np.ones(8, np.float32))})
    assert np.array_equal(out, np.full(8, 2, np.float32))


def test_out_of_bounds_tensor_is_an_error(clm, device, backend):
    _host_only(clm)
    with clm.Context() as ctx:
        x, y, graph = _add_graph(clm, ctx)
        buffer = ctx.alloc_tensors(device.buffer_type)
        x.data = buffer.base + buffer.size - 16   # 1 KiB tensor, 16 bytes left in the buffer
        with pytest.raises(clm.CannError) as failure:
            backend.graph_compute(graph)
            backend.synchronize()
        assert re.search(r"(?i)bound|outside|past|beyond|overflow|out of range|exceed",
                         str(failure.value)), str(failure.value)
        buffer.close()
    _still_works(clm, device)


def test_use_after_free_is_an_error(clm, device, backend):
    _host_only(clm)
    with clm.Context() as ctx:
        x, y, graph = _add_graph(clm, ctx)
        buffer = ctx.alloc_tensors(device.buffer_type)
        buffer.close()
        with pytest.raises(clm.CannError) as failure:
            backend.graph_compute(graph)
            backend.synchronize()
        # the freed block is either still quarantined or no longer device memory at all
        assert re.search(r"(?i)free|quarantin|not device memory", str(failure.value)), \
            str(failure.value)
    _still_works(clm, device)


def test_out_of_memory_is_an_error(clm, device):
    _, total = device.memory()
    with pytest.raises(clm.CannError) as failure:
        device.buffer_type.alloc_buffer(total + (1 << 30))
    assert failure.value.status == clm.Status.ERR_OUT_OF_MEMORY
    _still_works(clm, device)


_ACL_CDEF = """
int aclInit(const char *configPath);
int aclrtSetDevice(int32_t deviceId);
int aclrtMalloc(void **devPtr, size_t size, int policy);
int aclrtFree(void *devPtr);
int aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, int kind);
const char *aclGetRecentErrMsg(void);
"""
ACL_SUCCESS, ACL_ERROR_REPEAT_INITIALIZE = 0, 100002
ACL_MEMCPY_HOST_TO_DEVICE, ACL_MEMCPY_DEVICE_TO_HOST = 1, 2


@pytest.fixture
def acl(clm):
    """libacl_host.so itself through a tiny ABI-mode ffi (a test of acl_host, not the backend)."""
    _host_only(clm)
    import cffi
    ffi = cffi.FFI()
    ffi.cdef(_ACL_CDEF)
    lib = ffi.dlopen(str(package_file("libacl_host.so")))
    assert lib.aclInit(ffi.NULL) in (ACL_SUCCESS, ACL_ERROR_REPEAT_INITIALIZE)
    assert lib.aclrtSetDevice(0) == ACL_SUCCESS
    return ffi, lib


def test_acl_unknown_free_is_an_error(acl):
    ffi, lib = acl
    host_block = ffi.new("char[]", 64)
    assert lib.aclrtFree(host_block) != ACL_SUCCESS
    assert ffi.string(lib.aclGetRecentErrMsg())
    device_ptr = ffi.new("void **")
    assert lib.aclrtMalloc(device_ptr, 64, 0) == ACL_SUCCESS
    assert lib.aclrtFree(device_ptr[0]) == ACL_SUCCESS
    assert lib.aclrtFree(device_ptr[0]) != ACL_SUCCESS          # double free
    assert re.search(rb"(?i)free", ffi.string(lib.aclGetRecentErrMsg()))


def test_acl_wrong_memcpy_kind_is_an_error(acl):
    ffi, lib = acl
    device_ptr = ffi.new("void **")
    assert lib.aclrtMalloc(device_ptr, 64, 0) == ACL_SUCCESS
    host = ffi.new("char[]", 64)
    try:
        # host -> device data described as device -> host: the sanitizer knows which is which
        assert lib.aclrtMemcpy(device_ptr[0], 64, host, 64, ACL_MEMCPY_DEVICE_TO_HOST) != 0
        assert ffi.string(lib.aclGetRecentErrMsg())
        assert lib.aclrtMemcpy(device_ptr[0], 64, host, 64, ACL_MEMCPY_HOST_TO_DEVICE) == 0
        assert lib.aclrtMemcpy(device_ptr[0], 64, host, 128, ACL_MEMCPY_HOST_TO_DEVICE) != 0
    finally:
        assert lib.aclrtFree(device_ptr[0]) == ACL_SUCCESS


def test_alloc_tensors_places_aligned_and_splits_past_max_size(clm, device):
    """The one placement helper (ggml_backend_alloc_ctx_tensors): aligned offsets in order,
    guards on both sides, a new buffer where the next tensor would pass max_size, views placed
    in their source's buffer."""
    buft = device.buffer_type
    align = buft.alignment
    with clm.Context() as ctx:
        ts = [ctx.new_tensor(clm.TensorType.F32, (n,), name=f"t{n}") for n in (3, 100, 5)]
        view = ctx.reshape(ts[1], (10, 10))
        sizes = [(buft.alloc_size(t) + align - 1) // align * align for t in ts]
        [(entries, total)] = clm.layout_tensors(ctx.tensors, buft)
        assert [(t, off) for t, off, _ in entries] == [(ts[0], 0), (ts[1], sizes[0]),
                                                      (ts[2], sizes[0] + sizes[1])]
        assert total == sum(sizes)
        [(guarded, g_total)] = clm.layout_tensors(ctx.tensors, buft, guard=1)
        assert [off for _, off, _ in guarded] == [align, 2 * align + sizes[0],
                                                  3 * align + sizes[0] + sizes[1]]
        assert g_total == 4 * align + sum(sizes)
        buffers = clm.alloc_tensors(ctx.tensors, buft, max_size=sizes[0] + sizes[1],
                                    usage=clm.BufferUsage.WEIGHTS)
        assert len(buffers) == 2
        assert [b.usage for b in buffers] == [clm.BufferUsage.WEIGHTS] * 2
        assert ts[0].in_buffer(buffers[0]) and ts[1].in_buffer(buffers[0])
        assert ts[2].in_buffer(buffers[1]) and view.in_buffer(buffers[0])
        assert view.data == ts[1].data == buffers[0].base + sizes[0]
        assert ts[1].buffer_usage == clm.BufferUsage.WEIGHTS
        assert ts[1].buffer_type_id == buft.id
        for b in buffers:
            b.close()


def test_tensor_graph_accessors(clm):
    """What the scheduler and the reference read and rewire, without touching C structs."""
    with clm.Context() as ctx:
        a = ctx.new_tensor(clm.TensorType.F32, (4, 2), name="a").mark_input()
        b = ctx.new_tensor(clm.TensorType.F32, (4, 2), name="b")
        s = ctx.scale(ctx.add(a, b), 2.0, 0.5).mark_output()
        assert a.flags & clm.TensorFlag.INPUT and s.flags & clm.TensorFlag.OUTPUT
        assert list(s.op_params.view(np.float32)[:2]) == [2.0, 0.5]
        assert s.op_params_bytes[:8] == np.float32([2.0, 0.5]).tobytes()
        view = ctx.view_4d(b, (2, 2, 1, 1), (16, 32, 32), offset=8)
        assert view.is_view and view.storage == b and view.view_src == b and view.view_offs == 8
        assert not b.is_view and b.storage == b and b.view_src is None and not b.has_data
        soft = ctx.soft_max_ext(a, None)
        assert soft.sources == [a]
        add = s.sources[0]
        assert add.sources == [a, b]
        add.set_src(1, a)
        assert add.sources == [a, a]
        alias = ctx.new_tensor(clm.TensorType.F32, (2, 2))
        alias.set_strides(view.nb)
        assert alias.nb == view.nb
        assert a.buffer_usage is None and a.buffer_type_id is None
