"""cann_llm.weight_cache: a load reads the converted weights back from a cache file (a device image
mapped where it lies) instead of converting and re-laying them again, and never trusts a stale or
damaged file."""

import json
import os
import struct

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from tiny_models import write_tiny_model


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh cache directory, and images of any size (the tiny models' are a few KiB)."""
    from cann_llm import weight_cache
    path = tmp_path / "cache"
    monkeypatch.setenv("CANN_LLM_WEIGHT_CACHE", str(path))
    monkeypatch.delenv("CANN_LLM_WEIGHT_CACHE_MAX", raising=False)
    monkeypatch.setattr(weight_cache, "MIN_IMAGE_BYTES", 0)
    return path


def _run(path, **kwargs):
    """(logits, cache state, {name: ggml bytes read back}, describe()) of one load of `path`."""
    import cann_llm
    with cann_llm.load(str(path), n_ctx=64, **kwargs) as m:
        tensors = {name: t.read_bytes() for name, t in m.weights.tensors.items()}
        logits = m.logits(list(range(1, 30)))    # while a miss's entry is being written
        return logits, m.weights.wait_cache(), tensors, m.describe()


def _entries(cache_dir):
    return sorted(p.name for p in cache_dir.glob("*.clmw"))


@pytest.mark.parametrize("wtype", [QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q4_K, QT.F16])
def test_cached_load_matches_uncached(device, tmp_path, cache_dir, monkeypatch, wtype):
    """The second load reads every re-laid or converted weight from the cache: the same bytes and
    the same logits, bit for bit, as a load without the cache; cached weights are never written."""
    from cann_llm import backend
    path = write_tiny_model(tmp_path / "m.gguf", n_embd=256, weight_type=wtype, seed=3)
    monkeypatch.setenv("CANN_LLM_WEIGHT_CACHE", "off")
    ref_logits, state, ref_tensors, _ = _run(path)
    assert state == "off"
    monkeypatch.setenv("CANN_LLM_WEIGHT_CACHE", str(cache_dir))
    if not device.caps_buffer_from_host_ptr:        # a real NPU: no image buffers
        assert _run(path)[1] == "off"
        return
    first = _run(path)
    assert first[1] == "written" and len(_entries(cache_dir)) == 1
    logits, state, tensors, text = _run(path)
    assert state == "hit" and "MiB read from the weight cache" in text
    assert np.array_equal(logits, ref_logits) and np.array_equal(first[0], ref_logits)
    assert tensors.keys() == ref_tensors.keys()
    for name in tensors:
        assert np.array_equal(tensors[name], ref_tensors[name]), name
    import cann_llm
    with cann_llm.load(str(path), n_ctx=64) as m:
        t = m.weights["blk.0.attn_output.weight"]
        assert backend.BufferType.from_id(t.buffer_type_id).name.endswith("_Image")
        with pytest.raises(backend.CannError, match="never written"):
            t.write_bytes(t.read_bytes())


def test_changed_file_is_a_miss(device, tmp_path, cache_dir):
    """Another model written over the same path, with its modification time put back, is not
    served from the old model's entry (the key includes the change time, which no tool sets)."""
    if not device.caps_buffer_from_host_ptr:
        pytest.skip("image buffers need a device whose memory is the host's (acl_host)")
    path = tmp_path / "m.gguf"
    write_tiny_model(path, n_embd=128, weight_type=QT.Q8_0, seed=1)
    st = os.stat(path)
    assert _run(path)[1] == "written"
    other = write_tiny_model(tmp_path / "other.gguf", n_embd=128, weight_type=QT.Q8_0, seed=2)
    path.write_bytes(other.read_bytes())
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    logits, state, _, _ = _run(path)
    assert state == "written"
    assert np.array_equal(logits, _run(other)[0])
    assert _run(path)[1] == "hit"


def _image_of(cache_dir):
    """(path, header, image offset) of the one entry in cache_dir."""
    (name,) = _entries(cache_dir)
    path = cache_dir / name
    raw = path.read_bytes()
    magic, fmt, n = struct.unpack_from("<8sII", raw)
    header = json.loads(raw[16:16 + n])
    return path, header, -(-(16 + n) // (2 << 20)) * (2 << 20)


@pytest.mark.parametrize("wtype, scale_at, kept_at", [(QT.Q8_0, 32, None), (QT.Q4_0, 16, None),
                                                      (QT.Q4_1, 16, 20)])
def test_damaged_entry_is_rebuilt(device, tmp_path, cache_dir, wtype, scale_at, kept_at):
    """A cached scale (or Q4_1's kept min) that is NaN, a truncated file and a file of garbage are
    each a miss: the load rebuilds the entry from the GGUF and computes the right logits. The
    scale's place is found from the GGUF's own first block, so a wrong idea of the layout fails."""
    if not device.caps_buffer_from_host_ptr:
        pytest.skip("image buffers need a device whose memory is the host's (acl_host)")
    from cann_llm import loader
    path = write_tiny_model(tmp_path / "m.gguf", n_embd=128, weight_type=wtype, seed=4)
    ref = _run(path)
    assert ref[1] == "written"
    info = loader.open_gguf(path).tensors["blk.1.attn_output.weight"]
    spots = [(scale_at, info.data[0:2])]                 # the first block's d ...
    if kept_at is not None:
        spots.append((kept_at, info.data[2:4]))          # ... and Q4_1's m
    for at, expected in spots:
        entry, header, offset = _image_of(cache_dir)
        (where,) = [t[3] for t in header["tensors"] if t[0] == info.name]
        pos = offset + where + info.n_elements // 32 * at
        raw = bytearray(entry.read_bytes())
        assert bytes(raw[pos:pos + 2]) == bytes(expected)
        raw[pos:pos + 2] = np.float16(np.nan).tobytes()
        entry.write_bytes(bytes(raw))
        logits, state, _, _ = _run(path)
        assert state == "written" and np.array_equal(logits, ref[0])
    entry, _, _ = _image_of(cache_dir)
    entry.write_bytes(entry.read_bytes()[:entry.stat().st_size // 2])
    assert _run(path)[1] == "written"
    entry.write_bytes(b"\0" * 8192)
    assert _run(path)[1] == "written"
    assert _run(path)[1] == "hit"


def test_off_and_limits(device, tmp_path, cache_dir, monkeypatch):
    """CANN_LLM_WEIGHT_CACHE=off, use_mmap=False (--no-mmap) and check_weights=False write
    nothing; an image over CANN_LLM_WEIGHT_CACHE_MAX is not written (the load goes on; -v says
    why); a malformed limit is a clear error."""
    path = write_tiny_model(tmp_path / "m.gguf", n_embd=128, weight_type=QT.Q8_0, seed=1)
    if not device.caps_buffer_from_host_ptr:
        pytest.skip("image buffers need a device whose memory is the host's (acl_host)")
    assert _run(path, use_mmap=False)[1] == "off"
    assert _run(path, check_weights=False)[1] == "not written"
    monkeypatch.setenv("CANN_LLM_WEIGHT_CACHE", "off")
    assert _run(path)[1] == "off"
    monkeypatch.setenv("CANN_LLM_WEIGHT_CACHE", str(cache_dir))
    monkeypatch.setenv("CANN_LLM_WEIGHT_CACHE_MAX", "1K")
    import cann_llm
    with cann_llm.load(str(path), n_ctx=64) as m:
        assert m.weights.wait_cache() == "not written"
        assert "CANN_LLM_WEIGHT_CACHE_MAX" in m.weights.stats["cache_error"]
        assert "weight cache not written" in m.describe()
    assert _entries(cache_dir) == []
    monkeypatch.setenv("CANN_LLM_WEIGHT_CACHE_MAX", "lots")
    with pytest.raises(ValueError, match="CANN_LLM_WEIGHT_CACHE_MAX='lots'"):
        _run(path)


def test_trim_keeps_the_most_recent(tmp_path):
    from cann_llm.weight_cache import WeightCache, parse_size
    assert [parse_size(s) for s in ("16G", "512M", "1k", "4096", "1.5KiB")] == \
        [16 << 30, 512 << 20, 1024, 4096, 1536]
    cache = WeightCache(tmp_path, max_bytes=2500)
    for i, name in enumerate(("a", "b", "c", "d")):
        p = tmp_path / f"{name}.clmw"
        p.write_bytes(b"x" * 1000)
        os.utime(p, (1000 + i, 1000 + i))
    os.utime(tmp_path / "a.clmw", (2000, 2000))          # a was used last
    cache.trim(keep=tmp_path / "b.clmw")
    assert _entries(tmp_path) == ["a.clmw", "b.clmw"]


def test_image_buffer_refusals(clm, device):
    """buffer_from_image needs 4 KiB aligned memory (aclrtHostRegister); raw reads stay inside the
    buffer."""
    if not device.caps_buffer_from_host_ptr:
        with pytest.raises(clm.CannError):
            device.buffer_from_image(bytearray(8192))
        return
    memory = np.zeros(3 * 4096, dtype=np.uint8)
    start = (-memory.ctypes.data) % 4096
    with pytest.raises(clm.CannError, match="aclrtHostRegister"):
        device.buffer_from_image(memory[start + 64:start + 4096 + 64])
    with device.buffer_from_image(memory[start:start + 8192]) as buffer:
        out = np.empty(16, dtype=np.uint8)
        buffer.read_raw(8192 - 16, out)
        with pytest.raises(clm.CannError, match="outside"):
            buffer.read_raw(8192 - 8, out)
