"""Read the tokenizer metadata (tokenizer.* and general.* keys) of a GGUF file, quickly.

gguf.GGUFReader builds numpy views for every element of every array, which takes seconds for a
vocabulary of 150k tokens and 280k merges. The tokenizer only needs the key/value section at the
start of the file, so this module walks that section itself over a read-only memory map and stops
before the tensor infos. The layout is GGUF's (little-endian, versions 2 and 3): magic "GGUF",
uint32 version, uint64 tensor count, uint64 key/value count, then the key/value pairs.

Strings are decoded as UTF-8 with errors="surrogateescape", so a token whose bytes are not valid
UTF-8 still round-trips to its exact bytes (str.encode("utf-8", "surrogateescape")).
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Sequence

import numpy as np

from .ggml_types import GGUFValueType

__all__ = ["GGUFMetadataError", "StringArray", "decode_strings", "read_metadata", "read_string_array"]

_SCALAR = {
    GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b",
    GGUFValueType.UINT16: "<H", GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
    GGUFValueType.UINT64: "<Q", GGUFValueType.INT64: "<q",
    GGUFValueType.FLOAT32: "<f", GGUFValueType.FLOAT64: "<d",
    GGUFValueType.BOOL: "<?",
}
_NUMPY = {
    GGUFValueType.UINT8: "<u1", GGUFValueType.INT8: "<i1",
    GGUFValueType.UINT16: "<u2", GGUFValueType.INT16: "<i2",
    GGUFValueType.UINT32: "<u4", GGUFValueType.INT32: "<i4",
    GGUFValueType.UINT64: "<u8", GGUFValueType.INT64: "<i8",
    GGUFValueType.FLOAT32: "<f4", GGUFValueType.FLOAT64: "<f8",
    GGUFValueType.BOOL: "?",
}


class GGUFMetadataError(ValueError):
    """The file is not a GGUF file or its key/value section is damaged."""


def decode_strings(buf, offset: int, count: int) -> tuple[list, int]:
    """The `count` strings of a GGUF string array at buf[offset:] (a bytes-like object, e.g. an
    mmap) as str (UTF-8, errors="surrogateescape"), and the offset after the array; ValueError
    when it runs past the end of buf.

    One C scan finds every string (backend.gguf_string_spans); numpy then drops the 8-byte length
    prefixes and puts a NUL between the strings, so the whole array is one strict UTF-8 decode and
    one split (a 150k-token vocabulary in a few ms instead of ~100 ms of per-string decoding). A
    NUL cannot be part of a multi-byte sequence, so a strict decode that succeeds decodes each
    string on its own; an array with a NUL or an invalid sequence in a string is decoded string by
    string instead, with the same result."""
    from .backend import gguf_string_spans
    if count > (memoryview(buf).nbytes - offset) // 8:     # 8 bytes of length per string at least
        raise ValueError(f"a string array of {count} strings runs past the end of the file")
    end, spans = gguf_string_spans(buf, offset, count)
    if count == 0:
        return [], end
    region = np.frombuffer(buf, dtype=np.uint8, count=end - offset, offset=offset)
    prefix = spans[:, 0].astype(np.int64) - (offset + 8)     # each length's first byte
    keep = np.ones(region.size, dtype=bool)
    keep[(prefix[:, None] + np.arange(1, 8)).ravel()] = False
    keep[prefix[0]] = False                                   # no separator before the first
    joined = region.copy()
    joined[prefix] = 0                                        # the separator
    joined = joined[keep].tobytes()
    if joined.count(0) == count - 1:
        try:
            return joined.decode("utf-8").split("\0"), end
        except UnicodeDecodeError:
            pass
    mv = memoryview(buf)
    return [bytes(mv[s:s + n]).decode("utf-8", "surrogateescape")
            for s, n in spans.tolist()], end


class StringArray(Sequence):
    """A string array held as one blob, without a Python object per string: `text` (bytes or a
    bytearray never resized: the strings back to back) and `offsets` (uint32 numpy array of len + 1; string i is
    text[offsets[i]:offsets[i + 1]]). Indexing decodes one string (UTF-8, surrogateescape)."""

    __slots__ = ("text", "offsets", "_off")

    def __init__(self, text: bytes, offsets: np.ndarray):
        self.text = text
        self.offsets = offsets
        self._off = memoryview(offsets)       # indexes to Python ints, faster than numpy's

    @classmethod
    def from_strings(cls, strings) -> "StringArray":
        encoded = [s.encode("utf-8", "surrogateescape") for s in strings]
        offsets = np.zeros(len(encoded) + 1, dtype=np.uint32)
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        if lengths.sum() >= 1 << 32:
            raise ValueError("strings of 4 GiB or more")
        np.cumsum(lengths, out=offsets[1:], dtype=np.uint32)
        return cls(b"".join(encoded), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self.offsets) - 1
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"string index {i} out of range ({n} strings)")
        off = self._off
        return self.text[off[i]:off[i + 1]].decode("utf-8", "surrogateescape")

    def __repr__(self):
        return f"<StringArray of {len(self)} strings, {len(self.text)} bytes>"


def read_string_array(buf, offset: int, count: int) -> tuple[StringArray, int]:
    """The `count` strings of a GGUF string array at buf[offset:] as a StringArray (a copy, made
    in C without temporaries), and the offset after the array; ValueError when it runs past the
    end of buf."""
    from .backend import gguf_string_blob
    if count > (memoryview(buf).nbytes - offset) // 8:     # 8 bytes of length per string at least
        raise ValueError(f"a string array of {count} strings runs past the end of the file")
    end, text, offsets = gguf_string_blob(buf, offset, count)
    return StringArray(text, offsets), end


def _wanted_default(key: str) -> bool:
    return key.startswith(("tokenizer.", "general."))


def read_metadata(path, wanted=_wanted_default, *, string_arrays: bool = False) -> dict:
    """Key/value metadata of the GGUF file at `path` for the keys where `wanted(key)` is true.

    Scalars come back as Python values, strings as str, string arrays as lists of str (or
    StringArray with string_arrays=True: no object per string) and numeric arrays as numpy arrays
    (copies: the file is closed on return).
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 24:
            raise GGUFMetadataError(f"{path}: too small to be a GGUF file ({size} bytes)")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            try:
                return _parse(mm, wanted, string_arrays)
            except (struct.error, IndexError, ValueError) as e:
                if isinstance(e, GGUFMetadataError):
                    raise GGUFMetadataError(f"{path}: {e}") from None
                raise GGUFMetadataError(f"{path}: truncated or damaged GGUF metadata ({e})") from None


def _parse(mm, wanted, string_arrays=False) -> dict:
    if mm[:4] != b"GGUF":
        raise GGUFMetadataError("not a GGUF file (bad magic)")
    version, = struct.unpack_from("<I", mm, 4)
    if version not in (2, 3):
        raise GGUFMetadataError(f"unsupported GGUF version {version}")
    _n_tensors, n_kv = struct.unpack_from("<QQ", mm, 8)
    off = 24
    end = len(mm)
    out = {}
    unpack_q = struct.Struct("<Q").unpack_from
    unpack_i = struct.Struct("<I").unpack_from

    def read_str(off):
        n, = unpack_q(mm, off)
        off += 8
        if off + n > end:
            raise GGUFMetadataError("string runs past the end of the file")
        return mm[off:off + n].decode("utf-8", "surrogateescape"), off + n

    def read_value(vtype, off, keep):
        if vtype == GGUFValueType.STRING:
            s, off = read_str(off)
            return s, off
        if vtype in _SCALAR:
            fmt = _SCALAR[vtype]
            v, = struct.unpack_from(fmt, mm, off)
            return v, off + struct.calcsize(fmt)
        if vtype == GGUFValueType.ARRAY:
            etype, = unpack_i(mm, off)
            n, = unpack_q(mm, off + 4)
            off += 12
            if etype == GGUFValueType.STRING:
                try:
                    if keep:
                        return (read_string_array if string_arrays else decode_strings)(mm, off, n)
                    from .backend import gguf_string_spans
                    return None, gguf_string_spans(mm, off, n, spans=False)[0]
                except ValueError:
                    raise GGUFMetadataError("string array runs past the end of the file") \
                        from None
            if etype in _NUMPY:
                dt = np.dtype(_NUMPY[etype])
                nbytes = dt.itemsize * n
                if off + nbytes > end:
                    raise GGUFMetadataError("array runs past the end of the file")
                arr = np.frombuffer(mm, dtype=dt, count=n, offset=off).copy() if keep else None
                return arr, off + nbytes
            items = []
            for _ in range(n):
                v, off = read_value(GGUFValueType(etype), off, keep)
                items.append(v)
            return (items if keep else None), off
        raise GGUFMetadataError(f"unknown GGUF value type {vtype}")

    for _ in range(n_kv):
        key, off = read_str(off)
        vtype, = unpack_i(mm, off)
        off += 4
        keep = wanted(key)
        try:
            vtype = GGUFValueType(vtype)
        except ValueError:
            raise GGUFMetadataError(f"key {key!r} has unknown value type {vtype}") from None
        value, off = read_value(vtype, off, keep)
        if keep:
            out[key] = value
    return out
