"""A cache of converted weights on disk: the device image of a model's weights buffer, one file per
model, mapped by the next load instead of converting and repacking again (see docs/loader.md).

The file is a header (magic, JSON: the source file's identity, the package, ABI and layout
versions, the buffer type and every tensor's place) and the buffer's raw bytes (Buffer.read_raw) from
the next 2 MiB boundary (a hole before it): written in large aligned pieces, ext4's page cache
holds them in 2 MiB folios that the map then maps as huge pages. Entries are written whole to a temporary name and renamed; anything that
does not match exactly is a miss, and the cache never makes a load fail.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import pathlib
import struct
import tempfile
import time

import numpy as np

from . import __version__, backend
from ._cdef import CLM_ABI_VERSION
from .loader import advise_huge_pages

__all__ = ["WeightCache", "cache_from_env", "parse_size"]

MAGIC = b"CLMWIMG\x00"
FORMAT = 2          # 2: the image at a 2 MiB boundary
# Bump when a device layout (docs/quant_layouts.md) or a load-time conversion changes its bytes
# without the ABI or package version changing.
LAYOUT_VERSION = 1
# The image's place in the file: 4 KiB is what aclrtHostRegister needs; at 2 MiB (and written in
# 8 MiB pieces from there) the page cache keeps it in 2 MiB folios and the map uses huge pages, so
# kernels reading the weights miss the TLB as seldom as with the anonymous huge pages of a copy
# (docs/loader.md, step 6).
IMAGE_ALIGN = 2 << 20
DEFAULT_MAX_BYTES = 16 << 30
MIN_IMAGE_BYTES = 4 << 20     # smaller images are rebuilt faster than a file is opened and checked
_HEADER = struct.Struct("<8sII")   # magic, format, JSON length
_COPY_BYTES = 8 << 20


def parse_size(text: str) -> int:
    """'16G', '512M', '1T', '4096': bytes (powers of 1024). ValueError otherwise."""
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(text[-1:], 1)
    number = text[:-1] if scale > 1 else text
    value = float(number)
    if not value >= 0:
        raise ValueError(text)
    return int(value * scale)


def cache_from_env(setting=None) -> "WeightCache | None":
    """The cache `setting` asks for (a directory, or False / 'off' / '0' for none), else
    $CANN_LLM_WEIGHT_CACHE likewise, else $XDG_CACHE_HOME/cann-llm/weights; its size limit is
    $CANN_LLM_WEIGHT_CACHE_MAX (default 16G)."""
    if setting is None:
        setting = os.environ.get("CANN_LLM_WEIGHT_CACHE")
    if setting is False or (isinstance(setting, str) and setting.strip().lower() in ("", "0", "off",
                                                                                      "no", "false")):
        return None
    if setting is None or setting is True:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        setting = os.path.join(base, "cann-llm", "weights")
    limit = os.environ.get("CANN_LLM_WEIGHT_CACHE_MAX")
    try:
        max_bytes = parse_size(limit) if limit else DEFAULT_MAX_BYTES
    except ValueError:
        raise ValueError(f"CANN_LLM_WEIGHT_CACHE_MAX={limit!r}: expected a size such as 16G, "
                         f"512M or a number of bytes") from None
    return WeightCache(setting, max_bytes)


def _source_identity(stat: os.stat_result) -> dict:
    # ctime changes with any write to the file and cannot be set back by a tool, unlike mtime
    return {"dev": stat.st_dev, "ino": stat.st_ino, "size": stat.st_size,
            "mtime_ns": stat.st_mtime_ns, "ctime_ns": stat.st_ctime_ns}


def _image_offset(header_bytes: int) -> int:
    """The image starts at the first IMAGE_ALIGN boundary after the header."""
    return -(-(_HEADER.size + header_bytes) // IMAGE_ALIGN) * IMAGE_ALIGN


def describe_layout(buffer_type: backend.BufferType, entries) -> dict:
    """What an image must match: the buffer type and each tensor's (name, type, ne, offset, size)
    as backend.layout_tensors placed them."""
    return {"buffer_type": buffer_type.name, "alignment": buffer_type.alignment,
            "tensors": [[t.name, int(t.type), list(t.ne), offset, size] for t, offset, size in entries]}


class WeightCache:
    """Cache files in `directory`, at most max_bytes in all (least recently used go first)."""

    def __init__(self, directory, max_bytes: int = DEFAULT_MAX_BYTES):
        self.directory = pathlib.Path(directory)
        self.max_bytes = int(max_bytes)

    def path_for(self, source_path: str) -> pathlib.Path:
        real = os.path.realpath(source_path)
        digest = hashlib.blake2s(real.encode(), digest_size=8).hexdigest()
        return self.directory / f"{pathlib.Path(real).stem[:48]}-{digest}.clmw"

    def _expected(self, source_path: str, stat: os.stat_result, layout: dict, size: int) -> dict:
        return {"format": FORMAT, "layout_version": LAYOUT_VERSION, "package": __version__,
                "abi": CLM_ABI_VERSION, "source": os.path.realpath(source_path),
                "identity": _source_identity(stat), "image_bytes": size, **layout}

    def lookup(self, source_path: str, stat: os.stat_result, layout: dict,
               size: int) -> memoryview | None:
        """The cached image (the buffer's bytes, 2 MiB aligned, in a read-only map that is
        unmapped once nothing refers to it) when the entry matches exactly, else None."""
        path = self.path_for(source_path)
        try:
            with open(path, "rb") as f:
                mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):       # no entry, unreadable, or empty
            return None
        advise_huge_pages(mapping)
        try:
            magic, fmt, n = _HEADER.unpack_from(mapping, 0)
            offset = _image_offset(n)
            if magic != MAGIC or fmt != FORMAT or offset + size > len(mapping) or \
                    json.loads(bytes(mapping[_HEADER.size:_HEADER.size + n])) != \
                    self._expected(source_path, stat, layout, size):
                mapping.close()
                return None
        except (ValueError, struct.error, UnicodeDecodeError):
            mapping.close()
            return None
        try:
            os.utime(path)      # most recently used
        except OSError:
            pass
        return memoryview(mapping)[offset:offset + size]

    def store(self, source_path: str, stat: os.stat_result, layout: dict, buffer: backend.Buffer,
              size: int) -> pathlib.Path:
        """Write buffer's first `size` raw bytes as the entry for source_path (a temporary file
        renamed into place), then trim the directory to max_bytes. OSError on failure."""
        if size > self.max_bytes:
            raise OSError(f"the image ({size / 2**20:.0f} MiB) is larger than the cache's limit "
                          f"({self.max_bytes / 2**20:.0f} MiB, CANN_LLM_WEIGHT_CACHE_MAX)")
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.path_for(source_path)
        header = json.dumps(self._expected(source_path, stat, layout, size)).encode()
        first = _HEADER.pack(MAGIC, FORMAT, len(header)) + header
        offset = _image_offset(len(header))
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=f".{path.name}.", suffix=".tmp")
        tmp = pathlib.Path(tmp)
        try:
            with open(fd, "wb") as f:
                f.write(first)
                f.seek(offset)      # a hole up to the image
                chunk = np.empty(min(_COPY_BYTES, size), dtype=np.uint8)
                for start in range(0, size, len(chunk)):
                    part = chunk[:min(len(chunk), size - start)]
                    buffer.read_raw(start, part)
                    f.write(part)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self.trim(keep=path)
        return path

    def trim(self, keep: pathlib.Path | None = None) -> None:
        """Delete the least recently used entries (and temporary files older than a day) until the
        directory holds at most max_bytes."""
        entries, now = [], time.time()
        for p in self.directory.glob("*.clmw"):
            try:
                st = p.stat()
            except OSError:
                continue
            entries.append((st.st_mtime, st.st_size, p))
        for p in self.directory.glob(".*.clmw.*.tmp"):
            try:
                if now - p.stat().st_mtime > 86400:
                    p.unlink()
            except OSError:
                pass
        total = sum(size for _, size, _ in entries)
        for _, size, p in sorted(entries, key=lambda e: e[0]):
            if total <= self.max_bytes:
                break
            if p == keep:
                continue
            try:
                p.unlink()
                total -= size
            except OSError:
                pass
