"""Q8_0 / Q4_0 / Q4_1 tensors in the CANN device layout (docs/quant_layouts.md).

get(set(x)) returns x bit for bit (whole, in chunks at block splits, through views); the raw
device bytes equal a numpy build of the layout; Q4_1's device form (w + offset) * scale matches
gguf.quants.dequantize within the documented bound; misaligned ranges are clear errors.
Shapes passed to new_tensor are ggml order (ne[0] fastest).
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

gguf = pytest.importorskip("gguf")

TYPES = ["Q8_0", "Q4_0", "Q4_1"]
BLOCK_BYTES = {"Q8_0": 34, "Q4_0": 18, "Q4_1": 20}
DEVICE_BLOCK_BYTES = {"Q8_0": 34, "Q4_0": 18, "Q4_1": 22}
FP16_NINE = 0x4880

shapes = st.tuples(st.integers(1, 24).map(lambda k: 32 * k), st.integers(1, 5), st.integers(1, 3))
hyp = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _lib():
    from cann_llm.backend import check, ffi, lib
    return ffi, lib, check


def random_blocks(type_name: str, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    """Random ggml bytes (n_blocks, block bytes); about a quarter of the blocks get d = +-0."""
    raw = rng.integers(0, 256, (n_blocks, BLOCK_BYTES[type_name]), dtype=np.uint8)
    zero = rng.random(n_blocks) < 0.25
    raw[zero, 0] = 0
    raw[zero, 1] &= 0x80
    return raw


def device_layout(type_name: str, raw: np.ndarray) -> np.ndarray:
    """The spec in numpy: ggml blocks (n, block bytes) -> the device bytes of the whole tensor."""
    blocks = raw.reshape(-1, BLOCK_BYTES[type_name])
    d = blocks[:, 0:2].copy().view(np.uint16)[:, 0]
    if type_name == "Q8_0":
        return np.concatenate([blocks[:, 2:].ravel(), d.view(np.uint8)])
    qs = blocks[:, -16:]
    elements = np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.int16)   # (n, 32), 0..15
    nibbles = ((elements - 8) & 0xF).astype(np.uint8)                          # int4 q - 8
    quants = (nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)).ravel()
    if type_name == "Q4_0":
        return np.concatenate([quants, d.view(np.uint8)])
    m = blocks[:, 2:4].copy().view(np.uint16)[:, 0]
    d_zero = (d & 0x7FFF) == 0
    with np.errstate(all="ignore"):
        ratio = m.view(np.float16).astype(np.float32) / d.view(np.float16).astype(np.float32)
        offset = (np.float32(8) + ratio).astype(np.float16).view(np.uint16)
    scale = np.where(d_zero, m, d).astype(np.uint16)
    offset = np.where(d_zero, FP16_NINE, offset).astype(np.uint16)
    kept = np.where(d_zero, d, m).astype(np.uint16)
    return np.concatenate([quants] + [a.view(np.uint8) for a in (scale, offset, kept)])


def raw_device_bytes(clm, ctx, tensor, size: int) -> np.ndarray:
    """The bytes at the tensor's device address, read through an I8 tensor aliasing them."""
    alias = ctx.new_tensor(clm.TensorType.I8, (size,), name="raw alias")
    alias.c.buffer = tensor.c.buffer
    alias.c.data = tensor.c.data
    return alias.get().view(np.uint8)


def set_bytes(tensor, data: np.ndarray, offset: int) -> None:
    ffi, lib, check = _lib()
    data = np.ascontiguousarray(data, dtype=np.uint8)
    check(lib.clm_tensor_set(tensor.c, ffi.from_buffer(data), offset, data.nbytes), "clm_tensor_set")


def get_bytes(tensor, offset: int, size: int) -> np.ndarray:
    ffi, lib, check = _lib()
    out = np.empty(size, dtype=np.uint8)
    check(lib.clm_tensor_get(tensor.c, ffi.from_buffer(out), offset, size), "clm_tensor_get")
    return out


def _same_bits_nan_aware(got: np.ndarray, want: np.ndarray, type_name: str, n_blocks: int) -> None:
    """Equal bytes; Q4_1 offsets that are NaN only need to be NaN (payloads are not specified)."""
    if type_name != "Q4_1":
        np.testing.assert_array_equal(got, want)
        return
    off = 18 * n_blocks  # the offsets region
    got_off, want_off = (a[off:off + 2 * n_blocks].view(np.float16) for a in (got, want))
    nan = np.isnan(want_off)
    np.testing.assert_array_equal(np.isnan(got_off), nan)
    np.testing.assert_array_equal(got_off.view(np.uint16)[~nan], want_off.view(np.uint16)[~nan])
    np.testing.assert_array_equal(got[:off], want[:off])
    np.testing.assert_array_equal(got[off + 2 * n_blocks:], want[off + 2 * n_blocks:])


# ---- round trips and the device bytes ------------------------------------------------------

@hyp
@given(type_name=st.sampled_from(TYPES), ne=shapes, seed=st.integers(0, 2**32 - 1),
       n_splits=st.integers(0, 6))
def test_round_trip_and_device_bytes(clm, device, type_name, ne, seed, n_splits):
    rng = np.random.default_rng(seed)
    n_blocks = ne[0] * ne[1] * ne[2] // 32
    raw = random_blocks(type_name, n_blocks, rng)
    bb = BLOCK_BYTES[type_name]
    with clm.Context(16) as ctx:
        tensor = ctx.new_tensor(clm.TensorType[type_name], ne, name="w")
        alloc = device.buffer_type.alloc_size(tensor)
        padding = (512 - ne[0] % 512) % 512 // 32 * DEVICE_BLOCK_BYTES[type_name]
        assert alloc == n_blocks * DEVICE_BLOCK_BYTES[type_name] + padding
        with device.buffer_type.alloc_buffer(alloc) as buffer:
            buffer.clear(0x5A)
            tensor.alloc(buffer)
            splits = sorted(set(rng.integers(0, n_blocks + 1, n_splits).tolist()) | {0, n_blocks})
            for b0, b1 in zip(splits[:-1], splits[1:]):
                set_bytes(tensor, raw[b0:b1].ravel(), b0 * bb)
            assert tensor.get().tobytes() == raw.tobytes()
            got = raw_device_bytes(clm, ctx, tensor, alloc)
            n_data = n_blocks * DEVICE_BLOCK_BYTES[type_name]
            _same_bits_nan_aware(got[:n_data], device_layout(type_name, raw), type_name, n_blocks)
            assert not got[n_data:].any(), "init_tensor zeroes the padding row"
            # Reads in chunks at other splits.
            b = sorted(set(rng.integers(0, n_blocks + 1, 3).tolist()) | {0, n_blocks})
            parts = [get_bytes(tensor, b0 * bb, (b1 - b0) * bb) for b0, b1 in zip(b[:-1], b[1:])]
            assert np.concatenate(parts).tobytes() == raw.tobytes()


@hyp
@given(type_name=st.sampled_from(TYPES), ne=shapes, seed=st.integers(0, 2**32 - 1), data=st.data())
def test_views_map_to_the_base_regions(clm, device, type_name, ne, seed, data):
    rng = np.random.default_rng(seed)
    n_rows = ne[1] * ne[2]
    n_blocks = ne[0] * n_rows // 32
    row = ne[0] // 32 * BLOCK_BYTES[type_name]
    raw = random_blocks(type_name, n_blocks, rng).reshape(n_rows, row)
    r0 = data.draw(st.integers(0, n_rows - 1), label="r0")
    r1 = data.draw(st.integers(r0 + 1, n_rows), label="r1")
    with clm.Context(16) as ctx:
        tensor = ctx.new_tensor(clm.TensorType[type_name], ne, name="w")
        with ctx.alloc_tensors(device.buffer_type):
            tensor.set(raw.reshape(tensor.shape))
            view = ctx.view_4d(tensor, (ne[0], r1 - r0), (row, row * (r1 - r0), row * (r1 - r0)), r0 * row)
            assert view.get().tobytes() == raw[r0:r1].tobytes()
            # A view of the view: its last row, through the nested offset.
            inner = ctx.view_4d(view, (ne[0], 1), (row, row, row), (r1 - r0 - 1) * row)
            assert inner.get().tobytes() == raw[r1 - 1].tobytes()
            fresh = random_blocks(type_name, (r1 - r0) * row // BLOCK_BYTES[type_name], rng)
            view.set(fresh.reshape(view.shape))
            raw[r0:r1] = fresh.reshape(r1 - r0, row)
            assert tensor.get().tobytes() == raw.tobytes()
            alloc = device.buffer_type.alloc_size(tensor)
            got = raw_device_bytes(clm, ctx, tensor, alloc)[:n_blocks * DEVICE_BLOCK_BYTES[type_name]]
            _same_bits_nan_aware(got, device_layout(type_name, raw), type_name, n_blocks)


# ---- Q4_1: the device dequantization against gguf ---------------------------------------------

@hyp
@given(ne=shapes, seed=st.integers(0, 2**32 - 1), loc=st.floats(-4, 4), spread=st.floats(1e-3, 4))
def test_q4_1_device_dequantization(clm, device, ne, seed, loc, spread):
    rng = np.random.default_rng(seed)
    values = (loc + spread * rng.standard_normal((ne[2], ne[1], ne[0]))).astype(np.float32)
    values[..., :32] = np.float32(loc)      # one constant block per row: d = 0, q = 0
    quantized = gguf.quants.quantize(values, gguf.GGMLQuantizationType.Q4_1)
    want = gguf.quants.dequantize(quantized, gguf.GGMLQuantizationType.Q4_1).reshape(-1, 32)
    n_blocks = values.size // 32
    with clm.Context(16) as ctx:
        tensor = ctx.new_tensor(clm.TensorType.Q4_1, ne, name="w")
        with ctx.alloc_tensors(device.buffer_type):
            tensor.set(quantized)
            dev = raw_device_bytes(clm, ctx, tensor, n_blocks * 22)
    nib = dev[:16 * n_blocks].reshape(n_blocks, 16)
    w = np.stack([nib & 0xF, nib >> 4], axis=2).reshape(n_blocks, 32).astype(np.int8)
    w = np.where(w >= 8, w - 16, w).astype(np.float32)                  # int4
    fields = dev[16 * n_blocks:].view(np.float16).reshape(3, n_blocks)
    scale, offset = (fields[i].astype(np.float32)[:, None] for i in (0, 1))
    got = (w + offset) * scale
    blocks = quantized.reshape(-1, 20)
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    m = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    with np.errstate(all="ignore"):
        ratio = np.where(d == 0, 1.0, np.abs(8 + m / d))
    # documented bound: |d| 2^-11 |8 + m/d| (offset rounding) + f32 rounding of both sides
    bound = np.abs(d) * 2.0**-11 * ratio + 2.0**-21 * (np.abs(want) + 16 * np.abs(d) + np.abs(m))
    assert np.all(np.abs(got - want) <= bound)
    constant = d[:, 0] == 0
    assert constant.any()
    np.testing.assert_array_equal(got[constant], want[constant])     # exactly m


# ---- errors, memset, copies -----------------------------------------------------------------

@pytest.mark.parametrize("type_name", TYPES)
def test_misaligned_ranges_are_errors(clm, device, type_name):
    bb = BLOCK_BYTES[type_name]
    raw = random_blocks(type_name, 12, np.random.default_rng(7))
    with clm.Context(8) as ctx:
        tensor = ctx.new_tensor(clm.TensorType[type_name], (128, 3), name="blk.0.ffn_up.weight")
        with ctx.alloc_tensors(device.buffer_type):
            tensor.set(raw.reshape(tensor.shape))
            for offset, size in [(1, bb), (0, bb + 2), (bb // 2, bb), (bb, 3)]:
                with pytest.raises(clm.CannError, match="blk.0.ffn_up.weight.*whole") as info:
                    set_bytes(tensor, np.zeros(size, np.uint8), offset)
                assert info.value.status == clm.Status.ERR_INVALID_ARG
                with pytest.raises(clm.CannError, match="not whole"):
                    get_bytes(tensor, offset, size)
            ffi, lib, _ = _lib()
            assert lib.clm_tensor_memset(tensor.c, 0, 1, bb) == lib.CLM_ERR_INVALID_ARG
            lib.clm_clear_error()
            # Nothing was written and the process goes on.
            assert tensor.get().tobytes() == raw.tobytes()
            # A view at a misaligned byte offset cannot be read or written either.
            view = ctx.view_4d(tensor, (32, 1), (bb, bb, bb), 2)
            with pytest.raises(clm.CannError, match="not whole"):
                view.get()


@pytest.mark.parametrize("type_name", TYPES)
@pytest.mark.parametrize("value", [0x00, 0x11, 0xFF])
def test_memset_applies_to_the_ggml_bytes(clm, device, type_name, value):
    bb = BLOCK_BYTES[type_name]
    raw = random_blocks(type_name, 12, np.random.default_rng(value)).ravel()
    with clm.Context(8) as ctx:
        tensor = ctx.new_tensor(clm.TensorType[type_name], (128, 3), name="w")
        with ctx.alloc_tensors(device.buffer_type):
            tensor.set(raw.reshape(tensor.shape))
            ffi, lib, check = _lib()
            check(lib.clm_tensor_memset(tensor.c, value, 2 * bb, 5 * bb), "memset")
            raw[2 * bb:7 * bb] = value
            assert tensor.get().tobytes() == raw.tobytes()
            tensor.memset(value)
            assert tensor.get().tobytes() == bytes([value]) * raw.size
            dev = raw_device_bytes(clm, ctx, tensor, 12 * DEVICE_BLOCK_BYTES[type_name])
            _same_bits_nan_aware(dev, device_layout(type_name, np.full(raw.size, value, np.uint8)),
                                 type_name, 12)


@pytest.mark.parametrize("type_name", TYPES)
def test_tensor_copy_keeps_the_layout(clm, device, type_name):
    raw = random_blocks(type_name, 24, np.random.default_rng(3))
    with clm.Context(8) as ctx:
        a = ctx.new_tensor(clm.TensorType[type_name], (64, 12), name="a")
        b = ctx.new_tensor(clm.TensorType[type_name], (64, 12), name="b")
        c = ctx.new_tensor(clm.TensorType[type_name], (64, 4), name="c")
        with ctx.alloc_tensors(device.buffer_type):
            a.set(raw.reshape(a.shape))
            a.copy_to(b)                                   # device to device, whole tensors
            assert b.get().tobytes() == raw.tobytes()
            row = 2 * BLOCK_BYTES[type_name]
            rows = ctx.view_4d(a, (64, 4), (row, 4 * row, 4 * row), 5 * row)
            rows.copy_to(c)                                # a view: staged through the host
            assert c.get().tobytes() == raw.reshape(12, row)[5:9].tobytes()
