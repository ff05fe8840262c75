"""Open and validate a GGUF model: metadata, hyperparameters (HParams) and tensor records.

The file is memory-mapped once; every TensorInfo.data is a uint8 view into that map (no copy),
so weights.py streams tensor bytes from the page cache to the device. The header (key/values and
tensor infos) is parsed here directly rather than with gguf.GGUFReader, which builds numpy views
for every element of every metadata array and needs seconds for a 50k-token vocabulary; large
string arrays (tokens, merges) are only skipped over here, tokenizer.py reads them itself.

Every failure is a GGUFError whose message starts with the file name and names the key or tensor.
"""

from __future__ import annotations

import hashlib
import math
import mmap
import os
import re
import struct
from dataclasses import dataclass, field

import numpy as np

from . import arch as arch_registry
from .ggml_types import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

__all__ = ["SUPPORTED_ARCHS", "GGUFError", "HParams", "TensorInfo", "GGUFFile", "open_gguf",
           "KEPT_TYPES", "CONVERTIBLE_TYPES", "type_name", "layer_index", "POOLING_TYPES"]

SUPPORTED_ARCHS = arch_registry.supported()      # the registry's names (runner/arch/)

T = GGMLQuantizationType
# Loaded as they are.
KEPT_TYPES = frozenset({T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q8_0})
# Converted at load by the C core (backend_cann/src/core/convert.c).
CONVERTIBLE_TYPES = frozenset({T.Q5_0, T.Q5_1, T.Q8_1, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K,
                               T.Q8_K})

_SCALAR = {
    GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
    GGUFValueType.UINT64: "<Q", GGUFValueType.INT64: "<q", GGUFValueType.FLOAT32: "<f",
    GGUFValueType.FLOAT64: "<d", GGUFValueType.BOOL: "<?",
}
_SMALL_ARRAY = 1024          # string arrays longer than this are skipped, not decoded
_MAX_DIMS = 4


class GGUFError(ValueError):
    """A GGUF file that cannot be loaded; the message names the file and the key or tensor."""


@dataclass(frozen=True)
class SkippedArray:
    """Metadata placeholder for a long string array (tokens, merges) that was not decoded:
    GGUFFile.strings(key) decodes it from the map (its first string's length is at `offset`)."""
    count: int
    offset: int = -1

    def __len__(self):
        return self.count


# llama.cpp's enum llama_pooling_type, by value (the GGUF key {arch}.pooling_type)
POOLING_TYPES = ("none", "mean", "cls", "last", "rank")


@dataclass(frozen=True)
class HParams:
    arch: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_ctx_train: int
    rms_eps: float
    rope_type: int            # ggml's ROPE mode, from the architecture: 0 normal, 2 neox
    rope_n_dims: int
    rope_freq_base: float
    rope_freq_scale: float
    rope_yarn: tuple | None   # (ext_factor, attn_factor, beta_fast, beta_slow, n_ctx_orig)
    qkv_bias: bool            # blk.N.attn_{q,k,v}.bias (the architecture says if required)
    tied_embeddings: bool
    extra: dict = field(default_factory=dict)   # the architecture's Key declarations, by name
    pooling_type: int | None = None   # {arch}.pooling_type (POOLING_TYPES), None when absent
    fused_qkv: bool = False   # one blk.N.attn_qkv projection instead of attn_{q,k,v} (Phi-3)


@dataclass(frozen=True)
class TensorInfo:
    name: str
    type: int                 # clm_type / GGMLQuantizationType value
    ne: tuple                 # ggml order (ne[0] fastest)
    nbytes: int
    data: np.ndarray          # uint8 view into the memory map (no copy)
    offset: int = 0           # absolute offset of the data in the file

    @property
    def n_elements(self) -> int:
        return math.prod(self.ne)

    @property
    def n_dims(self) -> int:
        return len(self.ne)


def type_name(tensor_type: int) -> str:
    try:
        return GGMLQuantizationType(tensor_type).name
    except ValueError:
        return f"type {tensor_type}"


_LAYER_RE = re.compile(r"^blk\.(\d+)\.")


def layer_index(name: str) -> int | None:
    """The layer a tensor belongs to ("blk.7.attn_q.weight" -> 7), None for the others."""
    m = _LAYER_RE.match(name)
    return int(m.group(1)) if m else None


class _Header:
    """Sequential reader over the map; raises IndexError / struct.error when it runs out."""

    def __init__(self, mm, path):
        self.mm, self.off, self.end, self.path = mm, 0, len(mm), path

    def unpack(self, fmt):
        values = struct.unpack_from(fmt, self.mm, self.off)
        self.off += struct.calcsize(fmt)
        return values

    def string(self, what):
        n, = self.unpack("<Q")
        if self.off + n > self.end:
            raise GGUFError(f"{self.path}: {what} runs past the end of the file (truncated?)")
        s = self.mm[self.off:self.off + n]
        self.off += n
        return s.decode("utf-8", "surrogateescape")

    def value(self, vtype, key):
        if vtype == GGUFValueType.STRING:
            return self.string(f"key {key!r}")
        if vtype in _SCALAR:
            return self.unpack(_SCALAR[vtype])[0]
        if vtype != GGUFValueType.ARRAY:
            raise GGUFError(f"{self.path}: key {key!r} has unknown value type {int(vtype)}")
        etype, n = self.unpack("<IQ")
        try:
            etype = GGUFValueType(etype)
        except ValueError:
            raise GGUFError(f"{self.path}: key {key!r} is an array of unknown type {etype}") \
                from None
        if etype in _SCALAR:
            dt = np.dtype(_SCALAR[etype].replace("?", "u1"))
            if self.off + dt.itemsize * n > self.end:
                raise GGUFError(f"{self.path}: key {key!r} runs past the end of the file "
                                "(truncated?)")
            arr = np.frombuffer(self.mm, dtype=dt, count=n, offset=self.off).copy()
            self.off += dt.itemsize * n
            return arr.astype(bool) if etype == GGUFValueType.BOOL else arr
        if etype == GGUFValueType.STRING and n > _SMALL_ARRAY:
            from .backend import gguf_string_spans
            start = self.off
            try:
                self.off, _ = gguf_string_spans(self.mm, self.off, n, spans=False)
            except ValueError:
                raise GGUFError(f"{self.path}: key {key!r} runs past the end of the file "
                                "(truncated?)") from None
            return SkippedArray(n, start)
        return [self.value(etype, key) for _ in range(n)]


class GGUFFile:
    """A memory-mapped, validated GGUF model. Keep it open while its tensors' data is used."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self._sha256 = None
        _check_path(self.path)
        with open(self.path, "rb") as f:
            self.stat = os.fstat(f.fileno())    # the mapped file's identity (the weight cache's key)
            self.file_size = self.stat.st_size
            if self.file_size < 24:
                raise GGUFError(f"{self.path}: not a GGUF file (only {self.file_size} bytes)")
            self._mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        advise_huge_pages(self._mmap)
        self._map = np.frombuffer(self._mmap, dtype=np.uint8)
        try:
            self._parse()
        except (struct.error, IndexError, OverflowError):
            raise GGUFError(f"{self.path}: the GGUF header is truncated or corrupt") from None
        self.hparams = _hparams(self)

    # -- parsing -----------------------------------------------------------------------------
    def _parse(self):
        path, mm = self.path, self._mmap
        if mm[:4] != b"GGUF":
            raise GGUFError(f"{path}: not a GGUF file (bad magic {bytes(mm[:4])!r})")
        h = _Header(mm, path)
        h.off = 4
        self.version, = h.unpack("<I")
        if self.version not in (2, 3):
            raise GGUFError(f"{path}: unsupported GGUF version {self.version} (2 and 3 are)")
        n_tensors, n_kv = h.unpack("<QQ")
        if n_tensors > self.file_size // 24 or n_kv > self.file_size // 12:
            raise GGUFError(f"{path}: corrupt header ({n_tensors} tensors, {n_kv} keys)")
        self.metadata = {}
        for _ in range(n_kv):
            key = h.string("a key name")
            vtype, = h.unpack("<I")
            try:
                vtype = GGUFValueType(vtype)
            except ValueError:
                raise GGUFError(f"{path}: key {key!r} has unknown value type {vtype}") from None
            self.metadata[key] = h.value(vtype, key)
        infos = []
        for _ in range(n_tensors):
            name = h.string("a tensor name")
            n_dims, = h.unpack("<I")
            if not 1 <= n_dims <= _MAX_DIMS:
                raise GGUFError(f"{path}: tensor {name!r} has {n_dims} dimensions")
            ne = h.unpack(f"<{n_dims}Q")
            ttype, offset = h.unpack("<IQ")
            infos.append((name, ne, ttype, offset))
        alignment = self.metadata.get("general.alignment", 32)
        if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
            raise GGUFError(f"{path}: key 'general.alignment' = {alignment!r} is not a power of 2")
        self.data_offset = (h.off + alignment - 1) // alignment * alignment
        self.tensors = {}
        for name, ne, ttype, offset in infos:
            self.tensors[name] = self._tensor_info(name, ne, ttype, offset)

    def _tensor_info(self, name, ne, ttype, offset) -> TensorInfo:
        path = self.path
        try:
            qtype = GGMLQuantizationType(ttype)
            block, size = GGML_QUANT_SIZES[qtype]
        except (ValueError, KeyError):
            raise GGUFError(f"{path}: tensor {name!r} has unknown type {ttype}") from None
        if qtype not in KEPT_TYPES and qtype not in CONVERTIBLE_TYPES:
            supported = ", ".join(t.name for t in sorted(KEPT_TYPES | CONVERTIBLE_TYPES))
            raise GGUFError(f"{path}: tensor {name!r} has type {qtype.name}, which cannot be "
                            f"loaded (supported: {supported})")
        if any(n <= 0 for n in ne) or ne[0] % block:
            raise GGUFError(f"{path}: tensor {name!r} has a bad shape {list(ne)} for type "
                            f"{qtype.name} (ne[0] must be a multiple of {block})")
        n_elements = math.prod(ne)
        nbytes = n_elements // block * size
        start = self.data_offset + offset
        if start + nbytes > self.file_size:
            raise GGUFError(f"{path}: tensor {name!r} data ({nbytes} bytes at offset {start}) runs "
                            f"past the end of the file ({self.file_size} bytes): truncated file")
        return TensorInfo(name=name, type=int(qtype), ne=tuple(int(n) for n in ne),
                          nbytes=nbytes, data=self._map[start:start + nbytes], offset=start)

    # -- accessors -----------------------------------------------------------------------------
    @property
    def arch(self) -> str:
        return self.hparams.arch

    def get(self, key, default=None):
        return self.metadata.get(key, default)

    def sha256(self) -> str:
        """sha256 of the whole file (computed once, from the map)."""
        if self._sha256 is None:
            h = hashlib.sha256()
            step = 16 << 20
            for off in range(0, self.file_size, step):
                h.update(self._map[off:off + step])
            self._sha256 = h.hexdigest()
        return self._sha256

    def strings(self, key: str) -> list:
        """The metadata value of `key`, with a long string array the parse skipped
        (SkippedArray: tokens, merges) decoded from the map in one pass
        (gguf_vocab.decode_strings)."""
        value = self.metadata[key]
        if isinstance(value, SkippedArray):
            from .gguf_vocab import decode_strings
            value, _ = decode_strings(self._mmap, value.offset, value.count)
        return value

    def string_array(self, key: str):
        """strings(key) as one blob (gguf_vocab.StringArray, no object per string) for a long
        string array the parse skipped; other values as strings() gives them."""
        value = self.metadata[key]
        if isinstance(value, SkippedArray):
            from .gguf_vocab import read_string_array
            value, _ = read_string_array(self._mmap, value.offset, value.count)
        return value

    @property
    def map_memory(self) -> mmap.mmap:
        """The whole file's read-only map (page aligned), for a device buffer over it."""
        return self._mmap

    def release_pages(self, info: TensorInfo) -> None:
        """Drop this process's mapping of a tensor's pages (the file's cache keeps them; reading
        them again maps them again): once a tensor is on its device, its bytes in the map would
        otherwise count in the process's resident memory beside the device copy."""
        self.release_range(info.offset, info.offset + info.nbytes)

    def release_range(self, start: int, end: int) -> None:
        """release_pages for the bytes [start, end) of the file (the pages they touch)."""
        if self._mmap is None or self._mmap.closed:
            return
        page = mmap.PAGESIZE
        start = start // page * page
        end = min(self.file_size, -(-end // page) * page)
        if end > start:
            try:
                self._mmap.madvise(mmap.MADV_DONTNEED, start, end - start)
            except (AttributeError, OSError, ValueError):   # no madvise here: keep the pages
                pass

    def close(self) -> None:
        """Drop the map; TensorInfo.data views taken earlier keep it alive until released."""
        self._map = None
        self.tensors = {}
        try:
            self._mmap.close()
        except BufferError:   # views still exported: the map goes when they do
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __repr__(self):
        return f"GGUFFile({self.path!r}, {self.hparams.arch}, {len(self.tensors)} tensors)"


def advise_huge_pages(mapping: mmap.mmap) -> None:
    """Ask for huge pages over a file's read-only map (advice: ignored where unsupported). Pages
    the map reads from disk then come in 2 MiB folios and are mapped 2 MiB at a time, so a pass
    over weights left in the map walks 512 times fewer page-table entries; pages already cached
    in small folios stay as they are (docs/performance.md, "Huge pages for mapped files")."""
    try:
        mapping.madvise(mmap.MADV_HUGEPAGE)
    except (AttributeError, OSError, ValueError):
        pass


def _check_path(path: str) -> None:
    if not os.path.exists(path):
        raise GGUFError(f"{path}: no such file")
    if os.path.isdir(path):
        raise GGUFError(f"{path}: is a directory, not a GGUF file")
    if not os.path.isfile(path):
        raise GGUFError(f"{path}: not a regular file")
    if not os.access(path, os.R_OK):
        raise GGUFError(f"{path}: permission denied")


# ---- hyperparameters ---------------------------------------------------------------------------

def _key(g: GGUFFile, key: str, kind, default=...):
    """A metadata value of the expected kind (int / float / str / bool, or tuple: a scalar or an
    array as a tuple); `default` when absent."""
    value = g.metadata.get(key, ...)
    if value is ...:
        if default is ...:
            raise GGUFError(f"{g.path}: missing key {key!r}")
        return default
    if kind is tuple:
        return tuple(v.item() if isinstance(v, np.generic) else v
                     for v in np.atleast_1d(np.asarray(value)).tolist())
    if isinstance(value, np.ndarray) and kind is not str:
        if value.size == 0 or np.any(value != value.flat[0]):
            raise GGUFError(f"{g.path}: key {key!r} varies per layer ({value.tolist()}), which is "
                            "not supported")
        value = value.flat[0].item()
    if kind is int and isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    if kind is float and isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
        return float(value)
    if kind is str and isinstance(value, str):
        return value
    if kind is bool and isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise GGUFError(f"{g.path}: key {key!r} = {value!r} is not a valid {kind.__name__}")


def _hparams(g: GGUFFile) -> HParams:
    arch = _key(g, "general.architecture", str)
    if arch not in arch_registry.ARCHS:
        raise GGUFError(f"{g.path}: unknown architecture {arch!r} (key 'general.architecture'); "
                        f"supported: {', '.join(arch_registry.supported())}")
    decl = arch_registry.get(arch)
    a = arch + "."
    if not decl.moe and _key(g, a + "expert_count", int, 0) > 0:
        raise GGUFError(f"{g.path}: key {a + 'expert_count'!r}: mixture-of-experts models are "
                        f"not supported for {arch!r} (MoE architectures: "
                        f"{', '.join(n for n, d in arch_registry.ARCHS.items() if d.moe)})")
    n_embd = _key(g, a + "embedding_length", int)
    n_layer = _key(g, a + "block_count", int)
    n_head = _key(g, a + "attention.head_count", int)
    n_head_kv = _key(g, a + "attention.head_count_kv", int, n_head)
    for key, v in ((a + "embedding_length", n_embd), (a + "block_count", n_layer),
                   (a + "attention.head_count", n_head),
                   (a + "attention.head_count_kv", n_head_kv)):
        if v <= 0:
            raise GGUFError(f"{g.path}: key {key!r} = {v} must be positive")
    if n_head % n_head_kv:
        raise GGUFError(f"{g.path}: key {a + 'attention.head_count_kv'!r} = {n_head_kv} does not "
                        f"divide the head count {n_head}")
    if "attention.key_length" not in g.metadata and n_embd % n_head:
        raise GGUFError(f"{g.path}: key {a + 'attention.head_count'!r} = {n_head} does not divide "
                        f"the embedding length {n_embd}")
    head_dim = _key(g, a + "attention.key_length", int, n_embd // n_head)
    v_dim = _key(g, a + "attention.value_length", int, head_dim)
    if v_dim != head_dim:
        raise GGUFError(f"{g.path}: key {a + 'attention.value_length'!r} = {v_dim} differs from "
                        f"the key length {head_dim}, which is not supported")
    rope_n_dims = _key(g, a + "rope.dimension_count", int, head_dim)
    if rope_n_dims > head_dim or rope_n_dims % 2:
        raise GGUFError(f"{g.path}: key {a + 'rope.dimension_count'!r} = {rope_n_dims} is not an "
                        f"even number <= the head size {head_dim}")
    n_ctx_train = _key(g, a + "context_length", int)

    # rope scaling: rope.scaling.{type,factor,...}, or the older rope.scale_linear
    # rope scaling as llama.cpp reads it: the factor applies whatever the type says
    scaling = _key(g, a + "rope.scaling.type", str, "linear")
    if scaling not in ("none", "linear", "yarn"):
        raise GGUFError(f"{g.path}: key {a + 'rope.scaling.type'!r} = {scaling!r} is not "
                        "supported (none, linear, yarn)")
    factor = _key(g, a + "rope.scaling.factor", float, 0.0)
    if factor == 0.0:
        factor = _key(g, a + "rope.scale_linear", float, 0.0)
    if factor < 0:
        raise GGUFError(f"{g.path}: key {a + 'rope.scaling.factor'!r} = {factor} is negative")
    freq_scale = 1.0 if factor == 0.0 else 1.0 / factor
    rope_yarn = None
    if scaling == "yarn":
        rope_yarn = (1.0, _key(g, a + "rope.scaling.attn_factor", float, 1.0),
                     _key(g, a + "rope.scaling.yarn_beta_fast", float, 32.0),
                     _key(g, a + "rope.scaling.yarn_beta_slow", float, 1.0),
                     _key(g, a + "rope.scaling.original_context_length", int, n_ctx_train))

    tokens = g.metadata.get("tokenizer.ggml.tokens")
    n_vocab = _key(g, a + "vocab_size", int, len(tokens) if tokens is not None else 0)
    if n_vocab <= 0 and decl.tensor("token_embd") in g.tensors:
        n_vocab = g.tensors[decl.tensor("token_embd")].ne[-1]

    extra = {k.name: _key(g, a + k.key, k.kind, k.default) for k in decl.extra_keys}
    pooling_type = _key(g, a + "pooling_type", int, None)
    if pooling_type is not None and not 0 <= pooling_type < len(POOLING_TYPES):
        raise GGUFError(f"{g.path}: key {a + 'pooling_type'!r} = {pooling_type} is not a pooling "
                        f"type (0..{len(POOLING_TYPES) - 1}: {', '.join(POOLING_TYPES)})")
    hp = HParams(
        arch=arch, n_vocab=n_vocab, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
        n_head_kv=n_head_kv, head_dim=head_dim, n_ff=_key(g, a + "feed_forward_length", int),
        n_ctx_train=n_ctx_train, rms_eps=_key(g, a + "attention.layer_norm_rms_epsilon", float),
        rope_type=decl.rope_type, rope_n_dims=rope_n_dims,
        rope_freq_base=_key(g, a + "rope.freq_base", float, 10000.0), rope_freq_scale=freq_scale,
        rope_yarn=rope_yarn,
        qkv_bias=decl.has_qkv_bias(g.tensors), fused_qkv=decl.has_fused_qkv(g.tensors),
        tied_embeddings=decl.tensor("output") not in g.tensors, extra=extra,
        pooling_type=pooling_type)
    problem = decl.check_hparams(hp)
    if problem:
        raise GGUFError(f"{g.path}: {arch}: {problem}")
    _check_tensors(g, hp, decl)
    return hp


def expected_tensors(hp: HParams) -> dict[str, tuple]:
    """name -> expected ne (ggml order) of every tensor the forward pass needs (the
    architecture's declaration)."""
    return arch_registry.get(hp.arch).expected_tensors(hp)


def _check_tensors(g: GGUFFile, hp: HParams, decl) -> None:
    expected = decl.expected_tensors(hp)
    expected.update({name: ne for name, ne in decl.optional_tensors(hp).items()
                     if name in g.tensors})
    for name, ne in expected.items():
        info = g.tensors.get(name)
        if info is None:
            raise GGUFError(f"{g.path}: missing tensor {name!r} ({hp.arch}, {hp.n_layer} layers)")
        if info.ne != ne:
            raise GGUFError(f"{g.path}: tensor {name!r} has shape {list(info.ne)}, expected "
                            f"{list(ne)} from the hyperparameters")
        if len(ne) == 1 and info.type not in (T.F32, T.F16, T.BF16):
            raise GGUFError(f"{g.path}: tensor {name!r} has type {type_name(info.type)}; 1-D "
                            "tensors must be F32, F16 or BF16")


def open_gguf(path) -> GGUFFile:
    """Open, parse and validate a GGUF model file; GGUFError names what is wrong."""
    return GGUFFile(path)
