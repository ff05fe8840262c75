"""cann_llm.weights: placement, chunked upload from the map, conversions at load."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT, quants

from tiny_models import write_tiny_model


@pytest.fixture(scope="module")
def mods():
    from cann_llm import backend, loader, weights
    return backend, loader, weights


def _read_back(tensor) -> np.ndarray:
    return tensor.read_bytes()


def test_default_model_round_trip(mods, device, default_model_path):
    backend, loader, weights = mods
    g = loader.open_gguf(default_model_path)
    logs = []
    buft = device.buffer_type
    with weights.load_weights(g, lambda name: buft, log=logs.append, chunk_bytes=1 << 20) as ws:
        assert logs == []      # nothing to convert
        assert len(ws.tensors) == 272
        assert all(b.usage == backend.BufferUsage.WEIGHTS for b in ws.buffers)
        # the Q4_1 matrices are re-laid in one device buffer; on acl_host the F32 norms stay in
        # the file's map (test_weights_left_in_the_map)
        assert sum(not b.from_host_ptr for b in ws.buffers) == 1
        for name in ("token_embd.weight", "blk.0.attn_q.weight", "blk.29.ffn_down.weight",
                     "output_norm.weight"):
            t, info = ws[name], g.tensors[name]
            assert int(t.type) == info.type and t.ne[:len(info.ne)] == info.ne
            assert np.array_equal(_read_back(t), info.data), name   # bit for bit
        assert ws.stats["bytes_read"] == sum(i.nbytes for i in g.tensors.values())


def test_pages_released_chunk_by_chunk(mods, device, default_model_path):
    """Each chunk's range of the map is released as soon as it is up (not the whole tensor at
    its end: the 29 MiB embedding would be resident twice for a moment) and the ranges tile the
    tensor in order."""
    backend, loader, weights = mods
    g = loader.open_gguf(default_model_path)
    info = g.tensors["token_embd.weight"]
    with backend.Context(max_tensors=2) as ctx:
        t = ctx.new_tensor(info.type, info.ne, info.name)
        buf = ctx.alloc_tensors(device.buffer_type)
        ranges = []

        def release(start, end):
            ranges.append((start, end))
            g.release_range(start, end)
        weights._upload(t, info, 1 << 20, True, release)
        assert len(ranges) > 20 and all(e - s <= 1 << 20 for s, e in ranges)
        assert ranges[0][0] == info.offset and ranges[-1][1] == info.offset + info.nbytes
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        assert np.array_equal(t.read_bytes(), info.data)
        buf.close()


def test_weights_left_in_the_map(mods, device, tmp_path, monkeypatch):
    """Where the device reads host memory (acl_host), F32/F16/BF16 weights stay in the file's
    map at their file offsets: checked, never copied, read back bit for bit, refused as a write
    destination; Q8_0 and converted tensors are copied; use_mmap=False copies everything. Tensors
    under _MAP_MIN_BYTES (all of this tiny model's) are copied unless the bound is lowered."""
    backend, loader, weights = mods
    if not device.caps_buffer_from_host_ptr:
        pytest.skip("the device's memory is not the host's")
    types = {"blk.0.attn_q.weight": QT.Q8_0, "blk.1.ffn_up.weight": QT.Q5_0}
    path = write_tiny_model(tmp_path / "m.gguf", n_embd=64, weight_type=QT.F16, types=types)
    g = loader.open_gguf(path)
    buft = device.buffer_type
    with weights.load_weights(g, lambda n: buft, log=None) as ws:
        assert ws.stats["bytes_mapped"] == 0 and not any(b.from_host_ptr for b in ws.buffers)
    # the matrices mapped; the norms (256 bytes) copied out of the same registered map
    monkeypatch.setattr(weights, "_MAP_MIN_BYTES", 4096)
    with weights.load_weights(g, lambda n: buft, log=None) as ws:
        (mapped,) = [b for b in ws.buffers if b.from_host_ptr]
        assert mapped.buffer_type.name == f"{device.name}_Mapped"
        assert mapped.usage == backend.BufferUsage.WEIGHTS
        base = np.frombuffer(g.map_memory, dtype=np.uint8).ctypes.data
        in_map = set()
        for name, info in g.tensors.items():
            t = ws[name]
            if t.data == base + info.offset:
                in_map.add(name)
            assert np.array_equal(_read_back(t), info.data) or name in types, name
        expect = {n for n, i in g.tensors.items() if i.type in (QT.F32, QT.F16) and i.nbytes >= 4096}
        assert any(i.nbytes < 4096 for i in g.tensors.values())    # some copied from the map
        assert in_map == expect and types.keys().isdisjoint(in_map)
        assert ws.stats["bytes_mapped"] == sum(g.tensors[n].nbytes for n in expect)
        assert ws.nbytes < mapped.size + ws.stats["bytes_mapped"]   # the map is not device memory
        name = "blk.0.attn_k.weight"
        with pytest.raises(backend.CannError, match="mapped for the device"):
            ws[name].write_bytes(g.tensors[name].data)
        with pytest.raises(backend.CannError, match="mapped"):
            mapped.clear(0)
    with weights.load_weights(g, lambda n: buft, log=None, use_mmap=False) as ws:
        assert not any(b.from_host_ptr for b in ws.buffers) and ws.stats["bytes_mapped"] == 0
        for name, info in g.tensors.items():
            if name not in types:
                assert np.array_equal(_read_back(ws[name]), info.data), name


def test_mapped_weights_refuse_relaid_types(mods, device):
    """A type the device keeps in its own layout cannot lie in host memory mapped for it."""
    backend, loader, weights = mods
    if not device.caps_buffer_from_host_ptr:
        pytest.skip("the device's memory is not the host's")
    import mmap
    memory = mmap.mmap(-1, 1 << 16)
    assert not device.maps_host_type(QT.Q8_0) and device.maps_host_type(QT.F16)
    buf = device.buffer_from_host_ptr(memory)
    with backend.Context(max_tensors=2) as ctx:
        q = ctx.new_tensor(QT.Q8_0, [64, 4], "q")
        with pytest.raises(backend.CannError, match="own layout"):
            q.alloc(buf, 0)
        f = ctx.new_tensor(QT.F16, [64, 4], "f")
        with pytest.raises(backend.CannError, match="not a multiple"):
            f.alloc(buf, 16)
        f.alloc(buf, 64)
        memory[64:66] = np.float16(1.5).tobytes()
        assert f.read_bytes()[:2].tobytes() == np.float16(1.5).tobytes()
    buft = buf.buffer_type
    buf.close()
    memory.close()      # the buffer no longer exports the memory
    with pytest.raises(backend.CannError, match="not allocated"):
        buft.alloc_buffer(4096)     # its buffers wrap host memory


def test_layer_split(mods, device, tmp_path):
    """buffer_type_for picks the buffer type per tensor: one buffer per buffer type."""
    backend, loader, weights = mods
    g = loader.open_gguf(write_tiny_model(tmp_path / "m.gguf", n_layer=4, weight_type=QT.Q4_0))
    host = device.host_buffer_type
    if host is None:
        pytest.skip("no host buffer type")
    dev = device.buffer_type

    def pick(name):
        layer = loader.layer_index(name)
        return host if layer is not None and layer >= 2 else dev

    with weights.load_weights(g, pick) as ws:
        assert len(ws.buffers) == 2
        by_host = {b.is_host for b in ws.buffers}
        assert by_host == {True, False}
        for name, info in g.tensors.items():
            assert np.array_equal(_read_back(ws[name]), info.data), name


@pytest.mark.parametrize("wtype", [QT.F32, QT.F16, QT.BF16, QT.Q8_0, QT.Q4_0, QT.Q4_1])
def test_kept_types_round_trip(mods, device, tmp_path, wtype):
    backend, loader, weights = mods
    g = loader.open_gguf(write_tiny_model(tmp_path / "m.gguf", weight_type=wtype, seed=3))
    buft = device.buffer_type
    # tiny chunks: many block-aligned partial writes per tensor
    with weights.load_weights(g, lambda n: buft, chunk_bytes=100) as ws:
        for name, info in g.tensors.items():
            assert int(ws[name].type) == info.type
            assert np.array_equal(_read_back(ws[name]), info.data), name


def test_conversions_at_load(mods, device, tmp_path):
    """Q4_K -> Q4_1, Q6_K / Q5_0 / Q5_K -> Q8_0 in C, chunk by chunk, with one log line."""
    backend, loader, weights = mods
    types = {"blk.0.attn_q.weight": QT.Q6_K, "blk.0.ffn_up.weight": QT.Q5_0,
             "blk.1.ffn_gate.weight": QT.Q5_K, "blk.1.attn_k.weight": QT.Q8_0}
    path = write_tiny_model(tmp_path / "k.gguf", n_embd=256, n_head=4, n_ff=512,
                            weight_type=QT.Q4_K, embd_type=QT.Q8_0, types=types)
    g = loader.open_gguf(path)
    logs = []
    buft = device.buffer_type
    with weights.load_weights(g, lambda n: buft, log=logs.append, chunk_bytes=3000) as ws:
        assert len(logs) == 1 and "converted 13 tensors" in logs[0], logs
        assert "10 Q4_K -> Q4_1" in logs[0] and "Q6_K -> Q8_0" in logs[0]
        assert ws["blk.0.attn_k.weight"].type.name == "Q4_1"
        assert ws["blk.0.attn_q.weight"].type.name == "Q8_0"
        assert ws["blk.1.attn_k.weight"].type.name == "Q8_0"
        for name, info in g.tensors.items():
            got = _read_back(ws[name])
            want = backend.convert(info.type, info.data, int(ws[name].type),
                                   n_elements=info.n_elements)
            assert np.array_equal(got, want), name
        # Q4_K -> Q4_1 stays close to the Q4_K values
        info = g.tensors["blk.1.ffn_down.weight"]
        ref = quants.dequantize(info.data, QT.Q4_K).reshape(-1)
        got = quants.dequantize(_read_back(ws["blk.1.ffn_down.weight"]), QT.Q4_1).reshape(-1)
        assert np.abs(got - ref).max() <= np.abs(ref).max() * 2.0 ** -10


@pytest.mark.parametrize("target", ["F16", "q8_0", "Q4_0", "BF16", "F32"])
def test_convert_override(mods, device, tmp_path, target):
    backend, loader, weights = mods
    g = loader.open_gguf(write_tiny_model(tmp_path / "m.gguf", weight_type=QT.Q4_1))
    buft = device.buffer_type
    with weights.load_weights(g, lambda n: buft, convert=target, log=None) as ws:
        for name, info in g.tensors.items():
            want = target.upper() if info.n_dims >= 2 else "F32"   # norms stay F32
            assert ws[name].type.name == want, name
        x = quants.dequantize(g.tensors["blk.0.attn_q.weight"].data, QT.Q4_1)
        t = ws["blk.0.attn_q.weight"]
        y = backend.dequantize_f32(int(t.type), _read_back(t)).reshape(x.shape)
        tol = {"F16": 1e-3, "F32": 0, "BF16": 1e-2, "Q8_0": 1e-2, "Q4_0": 0.2}[target.upper()]
        assert np.abs(y - x).max() <= tol * max(np.abs(x).max(), 1e-6)


def test_bad_convert_target(mods, device, tmp_path):
    backend, loader, weights = mods
    g = loader.open_gguf(write_tiny_model(tmp_path / "m.gguf"))
    with pytest.raises(ValueError, match="Q6_K"):
        weights.load_weights(g, lambda n: device.buffer_type, convert="Q6_K")
    with pytest.raises(ValueError, match="unknown type 'q9'"):
        weights.load_weights(g, lambda n: device.buffer_type, convert="q9")


def test_mapped_model_matches_copied(mods, device, tmp_path, monkeypatch):
    """A model whose F16 weights are read from the file's map computes the same logits, bit for
    bit, as one whose weights were copied (the same kernels on the same bytes)."""
    import cann_llm
    monkeypatch.setattr(mods[2], "_MAP_MIN_BYTES", 0)     # the tiny model's tensors are small
    path = write_tiny_model(tmp_path / "m.gguf", n_embd=64, weight_type=QT.F16, seed=5)
    ids = list(range(1, 40))
    out = {}
    for use_mmap in (True, False):
        with cann_llm.load(str(path), n_ctx=64, use_mmap=use_mmap) as m:
            out[use_mmap] = m.logits(ids)
            mapped = m.weights.stats["bytes_mapped"]
            assert (mapped > 0) == (use_mmap and device.caps_buffer_from_host_ptr)
    assert np.array_equal(out[True], out[False])
