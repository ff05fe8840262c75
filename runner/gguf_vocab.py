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

import numpy as np
from gguf import GGUFValueType

__all__ = ["GGUFMetadataError", "read_metadata"]

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


def _wanted_default(key: str) -> bool:
    return key.startswith(("tokenizer.", "general."))


def read_metadata(path, wanted=_wanted_default) -> dict:
    """Key/value metadata of the GGUF file at `path` for the keys where `wanted(key)` is true.

    Scalars come back as Python values, strings as str, string arrays as lists of str and numeric
    arrays as numpy arrays (copies: the file is closed on return).
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 24:
            raise GGUFMetadataError(f"{path}: too small to be a GGUF file ({size} bytes)")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            try:
                return _parse(mm, wanted)
            except (struct.error, IndexError, ValueError) as e:
                if isinstance(e, GGUFMetadataError):
                    raise GGUFMetadataError(f"{path}: {e}") from None
                raise GGUFMetadataError(f"{path}: truncated or damaged GGUF metadata ({e})") from None


def _parse(mm, wanted) -> dict:
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
                items = [] if keep else None
                for _ in range(n):
                    ln, = unpack_q(mm, off)
                    off += 8
                    if keep:
                        items.append(mm[off:off + ln].decode("utf-8", "surrogateescape"))
                    off += ln
                if off > end:
                    raise GGUFMetadataError("string array runs past the end of the file")
                return items, off
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
