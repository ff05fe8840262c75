"""Owning Python wrappers over libcann_llm: registry, devices, buffers, contexts, graphs, backends.

The only module that touches the cffi extension (ffi/lib); everything above it (loader, graph
builder, splitter, CLI, server) uses these classes. C statuses become CannError with the C
message. Shapes: `ne` is in ggml order (ne[0] fastest); numpy arrays use numpy order (reversed ne).
"""

import enum

import numpy as np

from . import _cdef, dtypes

try:
    from ._cann_llm import ffi, lib
except ImportError as exc:  # the message names the missing library or symbol
    raise ImportError(f"cann_llm: cannot load the compiled backend ({exc}); "
                      "reinstall the package with `pip install .`") from exc

if lib.clm_abi_version() != _cdef.CLM_ABI_VERSION:
    raise ImportError(f"cann_llm: libcann_llm has ABI version {lib.clm_abi_version()}, the Python "
                      f"bindings expect {_cdef.CLM_ABI_VERSION}; rebuild with `pip install .`")


def _c_enum(c_name: str, prefix: str, py_name: str) -> type[enum.IntEnum]:
    """An IntEnum from a C enum in the cdef (never hand-copied, so it cannot drift)."""
    members = {name[len(prefix):]: value
               for name, value in ffi.typeof(c_name).relements.items()
               if not name.endswith("_COUNT")}
    return enum.IntEnum(py_name, dict(sorted(members.items(), key=lambda kv: kv[1])))


Status = _c_enum("clm_status", "CLM_", "Status")
TensorType = _c_enum("clm_type", "CLM_TYPE_", "TensorType")
_F32_TYPE = int(TensorType.F32)
Op = _c_enum("clm_op", "CLM_OP_", "Op")
DeviceType = _c_enum("enum clm_device_type", "CLM_DEVICE_TYPE_", "DeviceType")
BufferUsage = _c_enum("enum clm_buffer_usage", "CLM_BUFFER_USAGE_", "BufferUsage")
TensorFlag = _c_enum("clm_tensor_flag", "CLM_TENSOR_FLAG_", "TensorFlag")
UnaryOp = _c_enum("clm_unary_op", "CLM_UNARY_OP_", "UnaryOp")   # op_params[0] of an UNARY node
GluOp = _c_enum("clm_glu_op", "CLM_GLU_OP_", "GluOp")           # op_params[0] of a GLU node
SortOrder = _c_enum("clm_sort_order", "CLM_SORT_ORDER_", "SortOrder")  # op_params[0] of ARGSORT
# Graph.scan: words per node and where each field is (clm_scan_word), and the flag bits
SCAN_WORDS, SCAN_NODE, SCAN_OP, SCAN_FLAGS = (lib.CLM_SCAN_WORDS, lib.CLM_SCAN_NODE,
                                              lib.CLM_SCAN_OP, lib.CLM_SCAN_FLAGS)
SCAN_ROOT, SCAN_ROOT_BUFT, SCAN_N_SRC = lib.CLM_SCAN_ROOT, lib.CLM_SCAN_ROOT_BUFT, lib.CLM_SCAN_N_SRC
SCAN_VIEW, SCAN_HAS_DATA, SCAN_ROOT_HAS_DATA = (lib.CLM_SCAN_VIEW, lib.CLM_SCAN_HAS_DATA,
                                                lib.CLM_SCAN_ROOT_HAS_DATA)
ROPE_TYPE_NEOX = lib.CLM_ROPE_TYPE_NEOX                          # the ROPE mode bit (else normal)


def _text(c_string) -> str:
    return "" if c_string == ffi.NULL else ffi.string(c_string).decode("utf-8", "replace")


class CannError(Exception):
    """A failed C call: `status` is a Status, `message` the C side's clm_last_error() text."""

    def __init__(self, status: int, message: str):
        try:
            status = Status(status)
        except ValueError:
            pass
        self.status = status
        self.message = message
        name = status.name if isinstance(status, Status) else f"status {status}"
        super().__init__(f"{name}: {message}" if message else name)


def check(status: int, what: str = "") -> None:
    """Raise CannError for a non-OK status, with the message the C side left for this thread."""
    if status != lib.CLM_OK:
        message = _text(lib.clm_last_error()) or what
        lib.clm_clear_error()
        raise CannError(status, message)


def runtime_name() -> str:
    """'acl_host' (host build) or 'toolkit' (linked to the real CANN libraries)."""
    return _text(lib.clm_runtime_name())


def library_version() -> str:
    return _text(lib.clm_version())


def type_name(tensor_type: int) -> str | None:
    """The C core's name of a type ("f32", "q4_0"), None for an unknown type."""
    name = lib.clm_type_name(tensor_type)
    return None if name == ffi.NULL else _text(name)


def type_traits(tensor_type: int) -> tuple[int, int]:
    """(elements per block, bytes per block) of a type, as the C core knows them."""
    return int(lib.clm_type_block_size(tensor_type)), int(lib.clm_type_size(tensor_type))


# ---- host type conversion (src/core/convert.c) -------------------------------------------------

def _row_bytes(tensor_type: int, n_elements: int) -> int:
    block, size = type_traits(tensor_type)
    return n_elements // block * size if block else 0


def convert_supported(src_type: int, dst_type: int) -> bool:
    return bool(lib.clm_convert_supported(int(src_type), int(dst_type)))


def gguf_string_spans(buf, offset: int, count: int, spans: bool = True):
    """A GGUF string array of `count` strings at buf[offset:] (a bytes-like object, e.g. an
    mmap): (end offset, uint64 array [count, 2] of each string's (start, length), or None with
    spans=False). ValueError when it runs past the end of buf."""
    view = np.frombuffer(buf, dtype=np.uint8)
    out = np.empty((count, 2), dtype=np.uint64) if spans else None
    end = ffi.new("size_t *")
    status = lib.clm_gguf_string_spans(ffi.from_buffer(view), view.nbytes, int(offset), int(count),
                                       ffi.from_buffer("uint64_t[]", out) if spans and count
                                       else ffi.NULL, end)
    if status != lib.CLM_OK:
        message = _text(lib.clm_last_error())
        lib.clm_clear_error()
        raise ValueError(message)
    return int(end[0]), out


def gguf_string_blob(buf, offset: int, count: int):
    """A GGUF string array of `count` strings at buf[offset:] as one blob: (end offset, text (a
    bytearray: the strings back to back), uint32 offsets [count + 1]). ValueError when it runs
    past the end of buf."""
    view = np.frombuffer(buf, dtype=np.uint8)
    end, _ = gguf_string_spans(buf, offset, count, spans=False)
    text = bytearray(end - offset - 8 * count)
    offsets = np.empty(count + 1, dtype=np.uint32)
    out = ffi.new("size_t *")
    status = lib.clm_gguf_string_blob(ffi.from_buffer(view), view.nbytes, int(offset), int(count),
                                      ffi.from_buffer(text), len(text),
                                      ffi.from_buffer("uint32_t[]", offsets), out)
    if status != lib.CLM_OK:
        message = _text(lib.clm_last_error())
        lib.clm_clear_error()
        raise ValueError(message)
    return int(out[0]), text, offsets


def convert(src_type: int, src, dst_type: int, dst=None, n_elements: int | None = None) -> np.ndarray:
    """Convert n_elements of raw ggml data `src` (buffer of src_type bytes) to dst_type bytes, in
    C; `dst` (a writable uint8 buffer) is filled or a new uint8 array returned."""
    src = np.frombuffer(src, dtype=np.uint8) if not isinstance(src, np.ndarray) else src
    if n_elements is None:
        block, size = type_traits(src_type)
        n_elements = src.nbytes // size * block if size else 0
    if dst is None:
        dst = np.empty(_row_bytes(dst_type, n_elements), dtype=np.uint8)
    if src.nbytes < _row_bytes(src_type, n_elements) or memoryview(dst).nbytes < _row_bytes(
            dst_type, n_elements):
        raise ValueError(f"convert: buffers too small for {n_elements} elements")
    check(lib.clm_convert(int(src_type), ffi.from_buffer(src), int(dst_type),
                          ffi.from_buffer(dst, require_writable=True), n_elements), "clm_convert")
    return dst


def _raw_source(src_type: int, src, n_elements: int | None, what: str):
    """(uint8 array, element count) of raw ggml bytes `src`: all of it when n_elements is None;
    ValueError when it holds fewer than n_elements."""
    src = np.frombuffer(src, dtype=np.uint8) if not isinstance(src, np.ndarray) else src
    if n_elements is None:
        block, size = type_traits(src_type)
        n_elements = src.nbytes // size * block if size else 0
    if src.nbytes < _row_bytes(src_type, n_elements):
        raise ValueError(f"{what}: buffer too small for {n_elements} elements")
    return src, n_elements


def find_nonfinite(src_type: int, src, n_elements: int | None = None) -> int:
    """Index of the first non-finite value in ggml bytes of src_type: the element for float types,
    the block (whose scale / min is NaN or inf) for quantized ones; -1 when all are finite."""
    src, n_elements = _raw_source(src_type, src, n_elements, "find_nonfinite")
    first = ffi.new("int64_t *")
    check(lib.clm_find_nonfinite(int(src_type), ffi.from_buffer(src), n_elements, first),
          "clm_find_nonfinite")
    return int(first[0])


def first_nonfinite_f32(values: np.ndarray) -> int:
    """find_nonfinite for a float32 array (a forward's logits): the flat index of its first NaN
    or inf, -1 when all are finite; fewer conversions on the way to C than find_nonfinite."""
    if values.dtype != np.float32 or not values.flags.c_contiguous:
        return find_nonfinite(int(TensorType.F32), np.ascontiguousarray(values, dtype=np.float32))
    first = ffi.new("int64_t *")
    check(lib.clm_find_nonfinite(_F32_TYPE, ffi.from_buffer(values), values.size, first),
          "clm_find_nonfinite")
    return first[0]


def array_pointer(array: np.ndarray, c_type: str = "char[]"):
    """A pointer to a C-contiguous numpy array's data, for a caller that hands the same array to
    the calls here again and again (get_tensor_async(data=), logits_scan_at, the KV cell
    scans): each would otherwise export the buffer anew. It keeps the array alive."""
    if not array.flags.c_contiguous:
        raise ValueError("array_pointer needs a C-contiguous array")
    return ffi.from_buffer(c_type, array, require_writable=array.flags.writeable)


def logits_scan(row: np.ndarray, banned: np.ndarray | None = None) -> tuple[int, int]:
    """(index of the first NaN or inf, greedy pick) of a float32 logits row in one pass
    (clm_logits_scan): -1 when every value is finite; the pick is the lowest id of the largest
    value among the ids not in `banned` (None, or ascending int64 ids), -1 when every id is
    banned or a value is not finite."""
    if row.dtype != np.float32 or not row.flags.c_contiguous:
        row = np.ascontiguousarray(row, dtype=np.float32)
    return logits_scan_at(ffi.from_buffer("float[]", row), 0, row.size, banned)


def logits_scan_at(data, at: int, n: int, banned: np.ndarray | None = None) -> tuple[int, int]:
    """logits_scan of the n values from element `at` of a float32 array whose array_pointer()
    the caller keeps (no view of the row, no buffer export)."""
    out = ffi.new("int64_t[2]")
    if banned is None or not banned.size:
        bans, n_bans = ffi.NULL, 0
    else:
        bans, n_bans = ffi.from_buffer("int64_t[]", banned), banned.size
    check(lib.clm_logits_scan(ffi.cast("float *", data) + at, n, bans, n_bans, out, out + 1),
          "clm_logits_scan")
    return out[0], out[1]


def kv_mask(cell_pos, cell_seq, n_kv: int, token_pos, token_seq, n_swa: int = 0) -> np.ndarray:
    """The F16 attention mask [n_tokens, n_kv] of a micro-batch over the first n_kv cells
    (clm_kv_mask): cell_pos int64 (-1: empty) and cell_seq uint64 bit sets of the cache (numpy
    arrays, or pointers to them: KVCache keeps its own), the tokens' positions and sequence ids
    (0..63) as int64 arrays or lists of Python ints (a decode step's)."""
    n_tokens = len(token_pos)
    out = np.empty((n_tokens, n_kv), dtype=np.float16)
    check(lib.clm_kv_mask(_int64s(cell_pos), _uint64s(cell_seq),
                          n_kv, _int64s(token_pos), _int64s(token_seq), n_tokens, n_swa,
                          ffi.from_buffer("uint16_t[]", out)), "clm_kv_mask")
    return out


def _int64s(values):
    """An int64_t * of an int64 numpy array, a list of Python ints or a pointer (as it is)."""
    if type(values) is list:
        return ffi.new("int64_t[]", values)
    if isinstance(values, ffi.CData):
        return values
    return ffi.from_buffer("int64_t[]", values)


def _uint64s(values):
    """A uint64_t * of a uint64 numpy array, or a pointer (as it is)."""
    return values if isinstance(values, ffi.CData) else ffi.from_buffer("uint64_t[]", values)


def kv_cells_used(cell_pos, n_cells: int | None = None) -> tuple[int, int, int]:
    """(cells holding a position, index of the last such cell, index of the first empty cell),
    -1 for an index there is none of, for int64 cell_pos (-1: empty): a numpy array, or a
    pointer to n_cells of them."""
    out = ffi.new("int64_t[3]")
    check(lib.clm_kv_cells_used(_int64s(cell_pos), len(cell_pos) if n_cells is None else n_cells,
                                out, out + 1, out + 2), "clm_kv_cells_used")
    return out[0], out[1], out[2]


def kv_decode_step(cell_pos, cell_seq, n_cells: int, token_pos, token_seq, n_pad: int, cells,
                   mask) -> tuple[int, int]:
    """A decode step's cells, commit, n_kv and mask in one pass (clm_kv_decode_step): cell_pos /
    cell_seq as kv_mask takes them (written), the tokens' positions and sequence ids, and
    array_pointer()s of the int64 cells and the F16 mask to fill. Returns (cells in use before
    the step, n_kv), n_kv -1 when fewer than len(token_pos) cells are empty (nothing written)."""
    out = ffi.new("int64_t[2]")
    check(lib.clm_kv_decode_step(_int64s(cell_pos), _uint64s(cell_seq), n_cells, _int64s(token_pos),
                                 _int64s(token_seq), len(token_pos), n_pad, cells, out, out + 1,
                                 mask), "clm_kv_decode_step")
    return out[0], out[1]


# ---- the tokenizer's tables (src/core/vocab.c) ---------------------------------------------

BPE_BYTE_LEVEL = lib.CLM_BPE_BYTE_LEVEL          # flags of VocabTable.bpe
BPE_IGNORE_MERGES = lib.CLM_BPE_IGNORE_MERGES
BPE_NEWLINE_TOKENS = lib.CLM_BPE_NEWLINE_TOKENS


class VocabTable:
    """Token text -> id and merge pair -> rank in C, over string blobs this object keeps alive:
    `text` (bytes, or a bytearray never resized) and `offsets` (uint32 array of n + 1: string i is text[offsets[i]:offsets[i+1]]).
    The texts are the raw token bytes (surrogateescape). ValueError for bad input; a duplicate text
    raises ValueError with .duplicate = (first id, second id)."""

    def __init__(self, text: bytes, offsets: np.ndarray):
        self._keep = [text, offsets]
        dup = ffi.new("int64_t[2]")
        out = ffi.new("clm_vocab **")
        n = len(offsets) - 1
        status = lib.clm_vocab_new(ffi.from_buffer(text), ffi.from_buffer("uint32_t[]", offsets), n,
                                   out, dup)
        if status != lib.CLM_OK:
            message = _text(lib.clm_last_error())
            lib.clm_clear_error()
            err = ValueError(message)
            err.duplicate = (int(dup[0]), int(dup[1])) if dup[0] >= 0 else None
            raise err
        self._v = ffi.gc(out[0], lib.clm_vocab_free)

    def _check(self, status):
        if status != lib.CLM_OK:
            message = _text(lib.clm_last_error())
            lib.clm_clear_error()
            raise ValueError(message)

    def set_merges(self, text: bytes, offsets: np.ndarray) -> None:
        self._keep += [text, offsets]
        self._check(lib.clm_vocab_set_merges(self._v, ffi.from_buffer(text),
                                             ffi.from_buffer("uint32_t[]", offsets), len(offsets) - 1))

    def set_scores(self, scores: np.ndarray) -> None:
        """Per-token float64 scores for spm() (kept alive here)."""
        self._keep.append(scores)
        self._check(lib.clm_vocab_set_scores(self._v, ffi.from_buffer("double[]", scores)))

    def find(self, text: bytes) -> int:
        """The id of the token with these bytes, -1 if there is none."""
        out = ffi.new("int32_t *")
        lib.clm_vocab_find(self._v, text, len(text), out)
        return out[0]

    def merge_rank(self, left: bytes, right: bytes) -> int:
        """The rank of the merge (left, right), -1 if there is none."""
        out = ffi.new("int32_t *")
        self._check(lib.clm_vocab_merge_rank(self._v, left, len(left), right, len(right), out))
        return out[0]

    def bpe(self, word: bytes, flags: int) -> list:
        """The ids of one pre-tokenized word (clm_vocab_bpe; flags: BPE_*)."""
        ids = ffi.new("int32_t[]", 2 * len(word) + 1)
        n = ffi.new("int64_t *")
        self._check(lib.clm_vocab_bpe(self._v, word, len(word), flags, ids, len(ids), n))
        return ffi.unpack(ids, n[0])

    def spm(self, text: bytes, unk_id: int) -> list:
        """The ids of a text merged SentencePiece-style (clm_vocab_spm; unk_id -1: none)."""
        ids = ffi.new("int32_t[]", 2 * len(text) + 1)
        n = ffi.new("int64_t *")
        self._check(lib.clm_vocab_spm(self._v, text, len(text), unk_id, ids, len(ids), n))
        return ffi.unpack(ids, n[0])


def quantize_f32(dst_type: int, values) -> np.ndarray:
    """float32 values -> ggml bytes of dst_type (F32/F16/BF16/Q8_0/Q4_0/Q4_1), ggml's rounding."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    dst = np.empty(_row_bytes(dst_type, values.size), dtype=np.uint8)
    check(lib.clm_quantize_f32(int(dst_type), ffi.from_buffer("float[]", values),
                               ffi.from_buffer(dst, require_writable=True), values.size),
          "clm_quantize_f32")
    return dst


def dequantize_f32(src_type: int, src, n_elements: int | None = None) -> np.ndarray:
    """ggml bytes of src_type -> float32 values (every type with a C dequantizer)."""
    src, n_elements = _raw_source(src_type, src, n_elements, "dequantize")
    out = np.empty(n_elements, dtype=np.float32)
    check(lib.clm_dequantize_f32(int(src_type), ffi.from_buffer(src), ffi.from_buffer("float[]", out),
                                 n_elements), "clm_dequantize_f32")
    return out


def _closed(what: str) -> CannError:
    return CannError(Status.ERR_STATE, f"{what} was already freed")


class _Owned:
    """A handle freed by close(); `with` closes it, __del__ is only a backstop."""

    _ptr = ffi.NULL
    _free = None

    def close(self) -> None:
        ptr, self._ptr = self._ptr, ffi.NULL
        if ptr != ffi.NULL and self._free is not None:
            type(self)._free(ptr)

    free = close

    @property
    def closed(self) -> bool:
        return self._ptr == ffi.NULL

    def _handle(self):
        if self._ptr == ffi.NULL:
            raise _closed(type(self).__name__)
        return self._ptr

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may already be gone
            pass


# ---- registry, devices, buffer types ---------------------------------------------------------

class Registry:
    """The CANN registry (aclInit once; one Device per NPU). Owned by the library, never freed."""

    def __init__(self):
        out = ffi.new("clm_reg **")
        check(lib.clm_cann_reg(out), "clm_cann_reg")
        self._ptr = out[0]

    @property
    def name(self) -> str:
        return _text(lib.clm_reg_name(self._ptr))

    @property
    def devices(self) -> list["Device"]:
        result = []
        for index in range(lib.clm_reg_device_count(self._ptr)):
            out = ffi.new("clm_device **")
            check(lib.clm_reg_device(self._ptr, index, out), "clm_reg_device")
            result.append(Device(out[0]))
        return result


class Device:
    """One NPU (CANN0, CANN1, ...). Devices live as long as the library."""

    def __init__(self, ptr):
        self._ptr = ptr

    name = property(lambda self: _text(lib.clm_device_name(self._ptr)))
    description = property(lambda self: _text(lib.clm_device_description(self._ptr)))
    id = property(lambda self: int(lib.clm_device_id(self._ptr)))
    type = property(lambda self: DeviceType(lib.clm_device_get_type(self._ptr)))
    caps_async = property(lambda self: bool(lib.clm_device_caps_async(self._ptr)))
    caps_events = property(lambda self: bool(lib.clm_device_caps_events(self._ptr)))

    def memory(self) -> tuple[int, int]:
        """(free, total) device memory in bytes."""
        free, total = ffi.new("size_t *"), ffi.new("size_t *")
        check(lib.clm_device_memory(self._ptr, free, total), "clm_device_memory")
        return int(free[0]), int(total[0])

    def init_backend(self) -> "Backend":
        out = ffi.new("clm_backend **")
        check(lib.clm_device_init_backend(self._ptr, out), "clm_device_init_backend")
        return Backend(out[0], self)

    @property
    def buffer_type(self) -> "BufferType":
        return BufferType(lib.clm_device_buffer_type(self._ptr))

    @property
    def host_buffer_type(self) -> "BufferType | None":
        ptr = lib.clm_device_host_buffer_type(self._ptr)
        return None if ptr == ffi.NULL else BufferType(ptr)

    caps_buffer_from_host_ptr = property(
        lambda self: bool(lib.clm_device_caps_buffer_from_host_ptr(self._ptr)))

    def maps_host_type(self, ttype: int) -> bool:
        """Whether tensors of ttype can lie in a buffer_from_host_ptr buffer (kept as ggml keeps
        them on this device)."""
        return bool(lib.clm_device_maps_host_type(self._ptr, int(ttype)))

    def buffer_from_host_ptr(self, memory, size: int | None = None) -> "Buffer":
        """A buffer over `memory` (any object with the buffer protocol, e.g. an mmap, 4 KiB
        aligned) that kernels read where it lies: where the device's memory is the host's
        (caps_buffer_from_host_ptr). The buffer keeps `memory` exported until it is closed."""
        return self._host_memory_buffer(lib.clm_device_buffer_from_host_ptr, memory, size,
                                        "clm_device_buffer_from_host_ptr")

    def buffer_from_image(self, memory, size: int | None = None) -> "Buffer":
        """A buffer over a device image in `memory` (bytes Buffer.read_raw gave, e.g. a mapped
        weight cache file, 4 KiB aligned): tensors are placed as in this device's buffer type and
        read where they lie, never written. Same conditions as buffer_from_host_ptr."""
        return self._host_memory_buffer(lib.clm_device_buffer_from_image, memory, size,
                                        "clm_device_buffer_from_image")

    def _host_memory_buffer(self, make, memory, size, what) -> "Buffer":
        view = ffi.from_buffer(memory)
        n = len(view) if size is None else int(size)
        if not 0 < n <= len(view):
            raise CannError(Status.ERR_INVALID_ARG, f"{what}: size {n} of a {len(view)}-byte object")
        out = ffi.new("clm_buffer **")
        check(make(self._ptr, view, n, out), what)
        buffer = Buffer(out[0])
        buffer._memory = view
        return buffer

    def supports_op(self, tensor: "Tensor") -> bool:
        return bool(lib.clm_device_supports_op(self._ptr, tensor.c))

    def supports_graph(self, graph: "Graph") -> bytes:
        """supports_op of each of graph's nodes, in node order (1 or 0), in one call."""
        handle = graph._handle()
        n = lib.clm_graph_n_nodes(handle)
        out = ffi.new("uint8_t[]", max(n, 1))
        check(lib.clm_device_supports_graph(self._ptr, handle, out, n), "clm_device_supports_graph")
        return ffi.buffer(out, n)[:]

    def supports_buft(self, buffer_type: "BufferType") -> bool:
        return bool(lib.clm_device_supports_buft(self._ptr, buffer_type._ptr))

    def offload_op(self, tensor: "Tensor") -> bool:
        return bool(lib.clm_device_offload_op(self._ptr, tensor.c))

    def new_event(self) -> "Event":
        out = ffi.new("clm_event **")
        check(lib.clm_device_event_new(self._ptr, out), "clm_device_event_new")
        return Event(out[0])

    def __repr__(self):
        return f"Device({self.name!r}, {self.description!r})"


class BufferType:
    """Where buffers come from (device memory, or pinned host memory). Owned by its device."""

    def __init__(self, ptr):
        if ptr == ffi.NULL:
            raise CannError(Status.ERR_INVALID_ARG, "NULL buffer type")
        self._ptr = ptr

    name = property(lambda self: _text(lib.clm_buft_name(self._ptr)))
    alignment = property(lambda self: int(lib.clm_buft_alignment(self._ptr)))
    max_size = property(lambda self: int(lib.clm_buft_max_size(self._ptr)))
    is_host = property(lambda self: bool(lib.clm_buft_is_host(self._ptr)))

    @property
    def device(self) -> "Device | None":
        ptr = lib.clm_buft_device(self._ptr)
        return None if ptr == ffi.NULL else Device(ptr)

    def alloc_buffer(self, size: int) -> "Buffer":
        out = ffi.new("clm_buffer **")
        check(lib.clm_buft_alloc_buffer(self._ptr, size, out), f"alloc_buffer({size})")
        return Buffer(out[0])

    def alloc_size(self, tensor: "Tensor") -> int:
        return int(lib.clm_buft_alloc_size(self._ptr, tensor.c))

    def alloc_sizes(self, tensors) -> list[int]:
        """alloc_size of each tensor (a planner asks for hundreds at once)."""
        size, ptr = lib.clm_buft_alloc_size, self._ptr
        return [size(ptr, t.c) for t in tensors]

    def __eq__(self, other):
        return isinstance(other, BufferType) and self._ptr == other._ptr

    @property
    def id(self) -> int:
        """An integer identity (the C pointer), as Tensor.buffer_type_id gives."""
        return int(ffi.cast("uintptr_t", self._ptr))

    @classmethod
    def from_id(cls, ident: int) -> "BufferType":
        """The buffer type of an identity that `id` or Tensor.buffer_type_id gave."""
        return cls(ffi.cast("clm_buffer_type *", ident))

    def __hash__(self):
        return self.id


class Buffer(_Owned):
    """A block of device (or host) memory that tensors are placed in."""

    _free = lib.clm_buffer_free
    _memory = None      # buffer_from_host_ptr: the caller's memory, exported while the buffer lives
    from_host_ptr = property(lambda self: self._memory is not None)

    def close(self) -> None:
        super().close()
        self._memory = None

    def __init__(self, ptr):
        self._ptr = ptr

    base = property(lambda self: int(ffi.cast("uintptr_t", lib.clm_buffer_base(self._handle()))))
    size = property(lambda self: int(lib.clm_buffer_size(self._handle())))
    is_host = property(lambda self: bool(lib.clm_buffer_is_host(self._handle())))
    buffer_type = property(lambda self: BufferType(lib.clm_buffer_buft(self._handle())))

    def read_raw(self, offset: int, out) -> None:
        """Copy the buffer's raw bytes from `offset` (as the device holds them: device layouts,
        padding) into `out`, a writable buffer-protocol object, synchronously."""
        view = ffi.from_buffer(out, require_writable=True)
        check(lib.clm_buffer_get_raw(self._handle(), offset, view, len(view)), "clm_buffer_get_raw")

    @property
    def usage(self) -> int:
        return BufferUsage(lib.clm_buffer_get_usage(self._handle()))

    @usage.setter
    def usage(self, value: int) -> None:
        lib.clm_buffer_set_usage(self._handle(), int(value))

    def clear(self, value: int = 0) -> None:
        check(lib.clm_buffer_clear(self._handle(), value), "clm_buffer_clear")


class Event(_Owned):
    """A point on a stream that another stream (or the host) can wait for."""

    _free = lib.clm_event_free

    def __init__(self, ptr):
        self._ptr = ptr

    def synchronize(self) -> None:
        check(lib.clm_event_synchronize(self._handle()), "clm_event_synchronize")


# ---- contexts, tensors, graphs ------------------------------------------------------------------

class Context(_Owned):
    """A C arena of tensor metadata and graphs. Tensors and graphs keep their context alive."""

    _free = lib.clm_context_free

    def __init__(self, max_tensors: int = 1024):
        out = ffi.new("clm_context **")
        check(lib.clm_context_new(max_tensors, out), "clm_context_new")
        self._ptr = out[0]

    def _tensor(self, out) -> "Tensor":
        return Tensor(self, out[0])

    def new_tensor(self, tensor_type: int, ne, name: str | None = None) -> "Tensor":
        """A tensor of shape `ne` in ggml order (ne[0] fastest), not yet placed in a buffer."""
        ne_c = ffi.new("int64_t[]", list(ne))
        out = ffi.new("clm_tensor **")
        check(lib.clm_new_tensor(self._handle(), int(tensor_type), len(ne), ne_c, out),
              "clm_new_tensor")
        tensor = self._tensor(out)
        if name:
            tensor.name = name
        return tensor

    def tensor_at(self, address: int) -> "Tensor":
        """A Tensor for the clm_tensor at `address` (Graph.scan gives tensors as addresses), kept
        alive by this context: a tensor of this context's graphs, or one that outlives it
        (weights, the KV cache)."""
        return Tensor(self, ffi.cast("clm_tensor *", address))

    @property
    def tensors(self) -> list["Tensor"]:
        handle = self._handle()
        return [Tensor(self, lib.clm_context_tensor(handle, i))
                for i in range(lib.clm_context_n_tensors(handle))]

    # views (ggml order throughout)
    def view_4d(self, a, ne, nb123, offset: int = 0) -> "Tensor":
        ne = list(ne) + [1] * (4 - len(ne))
        nb123 = list(nb123) + [0] * (3 - len(nb123))
        out = ffi.new("clm_tensor **")
        check(lib.clm_view_4d(self._handle(), a.c, *ne, *nb123, offset, out), "clm_view_4d")
        return self._tensor(out)

    def reshape(self, a, ne) -> "Tensor":
        ne = list(ne) + [1] * (4 - len(ne))
        out = ffi.new("clm_tensor **")
        check(lib.clm_reshape_4d(self._handle(), a.c, *ne, out), "clm_reshape_4d")
        return self._tensor(out)

    def permute(self, a, axis0: int, axis1: int, axis2: int, axis3: int) -> "Tensor":
        out = ffi.new("clm_tensor **")
        check(lib.clm_permute(self._handle(), a.c, axis0, axis1, axis2, axis3, out), "clm_permute")
        return self._tensor(out)

    def transpose(self, a) -> "Tensor":
        out = ffi.new("clm_tensor **")
        check(lib.clm_transpose(self._handle(), a.c, out), "clm_transpose")
        return self._tensor(out)

    # compute nodes
    def _binary(self, fn, a, b, what) -> "Tensor":
        out = ffi.new("clm_tensor **")
        check(fn(self._handle(), a.c, b.c, out), what)
        return self._tensor(out)

    def add(self, a, b) -> "Tensor":
        return self._binary(lib.clm_add, a, b, "clm_add")

    def mul(self, a, b) -> "Tensor":
        return self._binary(lib.clm_mul, a, b, "clm_mul")

    def div(self, a, b) -> "Tensor":
        """a / b, b broadcast to a (ggml_div); a's type and shape."""
        return self._binary(lib.clm_div, a, b, "clm_div")

    def cpy(self, a, b) -> "Tensor":
        """a's elements into b (types may differ); the result is a view of b."""
        return self._binary(lib.clm_cpy, a, b, "clm_cpy")

    def cont(self, a) -> "Tensor":
        out = ffi.new("clm_tensor **")
        check(lib.clm_cont(self._handle(), a.c, out), "clm_cont")
        return self._tensor(out)

    # LLM ops: ggml's shapes and op_params (cann_llm.h); tensors in ggml order
    def _unary_node(self, fn, a, *args, what: str) -> "Tensor":
        out = ffi.new("clm_tensor **")
        check(fn(self._handle(), a.c, *args, out), what)
        return self._tensor(out)

    def mul_mat(self, a, b) -> "Tensor":
        """a [K, N, ne2, ne3] (weights) x b [K, M, ne12, ne13] -> F32 [N, M, ne12, ne13]."""
        return self._binary(lib.clm_mul_mat, a, b, "clm_mul_mat")

    def get_rows(self, a, rows) -> "Tensor":
        return self._binary(lib.clm_get_rows, a, rows, "clm_get_rows")

    def set_rows(self, dst, src, rows) -> "Tensor":
        """src's rows into dst at `rows` (I32/I64); the result is a view of dst."""
        out = ffi.new("clm_tensor **")
        check(lib.clm_set_rows(self._handle(), dst.c, src.c, rows.c, out), "clm_set_rows")
        return self._tensor(out)

    def rms_norm(self, a, eps: float) -> "Tensor":
        return self._unary_node(lib.clm_rms_norm, a, eps, what="clm_rms_norm")

    def scale(self, a, s: float, b: float = 0.0) -> "Tensor":
        return self._unary_node(lib.clm_scale, a, s, b, what="clm_scale")

    def rope_ext(self, a, pos, freq_factors, n_dims: int, mode: int = 0, n_ctx_orig: int = 0,
                 freq_base: float = 10000.0, freq_scale: float = 1.0, ext_factor: float = 0.0,
                 attn_factor: float = 1.0, beta_fast: float = 32.0,
                 beta_slow: float = 1.0) -> "Tensor":
        out = ffi.new("clm_tensor **")
        factors = ffi.NULL if freq_factors is None else freq_factors.c
        check(lib.clm_rope_ext(self._handle(), a.c, pos.c, factors, n_dims, mode, n_ctx_orig,
                               freq_base, freq_scale, ext_factor, attn_factor, beta_fast,
                               beta_slow, out), "clm_rope_ext")
        return self._tensor(out)

    def soft_max_ext(self, a, mask=None, scale: float = 1.0, max_bias: float = 0.0) -> "Tensor":
        out = ffi.new("clm_tensor **")
        check(lib.clm_soft_max_ext(self._handle(), a.c, ffi.NULL if mask is None else mask.c,
                                   scale, max_bias, out), "clm_soft_max_ext")
        return self._tensor(out)

    def flash_attn_ext(self, q, k, v, mask=None, scale: float = 1.0, max_bias: float = 0.0,
                       logit_softcap: float = 0.0, mask_binary: bool = False) -> "Tensor":
        """-> F32 [Dv, n_head, n_q, n_seq] (permuted, as ggml). mask_binary promises a mask of
        0 and -inf only (the backend may then skip adding it as a bias)."""
        out = ffi.new("clm_tensor **")
        check(lib.clm_flash_attn_ext(self._handle(), q.c, k.c, v.c,
                                     ffi.NULL if mask is None else mask.c, scale, max_bias,
                                     logit_softcap, out), "clm_flash_attn_ext")
        if mask_binary:
            out[0].op_params[lib.CLM_FA_MASK_BINARY] = 1
        return self._tensor(out)

    def argmax(self, a) -> "Tensor":
        return self._unary_node(lib.clm_argmax, a, what="clm_argmax")

    def silu(self, a) -> "Tensor":
        return self._unary_node(lib.clm_silu, a, what="clm_silu")

    def swiglu(self, a, swapped: bool = False) -> "Tensor":
        return self._unary_node(lib.clm_swiglu, a, bool(swapped), what="clm_swiglu")

    def swiglu_split(self, a, b) -> "Tensor":
        return self._binary(lib.clm_swiglu_split, a, b, "clm_swiglu_split")

    def gelu(self, a) -> "Tensor":
        """ggml_gelu: the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
        return self._unary_node(lib.clm_gelu, a, what="clm_gelu")

    def gelu_erf(self, a) -> "Tensor":
        """ggml_gelu_erf: 0.5 x (1 + erf(x / sqrt(2)))."""
        return self._unary_node(lib.clm_gelu_erf, a, what="clm_gelu_erf")

    def tanh(self, a) -> "Tensor":
        return self._unary_node(lib.clm_tanh, a, what="clm_tanh")

    def geglu(self, a, swapped: bool = False) -> "Tensor":
        """a [2n, ...] -> gelu(a[:n]) * a[n:] (swapped: gelu(a[n:]) * a[:n])."""
        return self._unary_node(lib.clm_geglu, a, bool(swapped), what="clm_geglu")

    def geglu_split(self, a, b) -> "Tensor":
        """gelu(a) * b (gelu the tanh approximation)."""
        return self._binary(lib.clm_geglu_split, a, b, "clm_geglu_split")

    def geglu_erf(self, a, swapped: bool = False) -> "Tensor":
        return self._unary_node(lib.clm_geglu_erf, a, bool(swapped), what="clm_geglu_erf")

    def geglu_erf_split(self, a, b) -> "Tensor":
        """gelu_erf(a) * b."""
        return self._binary(lib.clm_geglu_erf_split, a, b, "clm_geglu_erf_split")

    def argsort(self, a, order: int = SortOrder.ASC) -> "Tensor":
        """ggml_argsort: I32 of a's shape, each row the indices of a's row (along ne0) in
        ascending or descending order of its values (ties as ggml's CPU kernel orders them)."""
        return self._unary_node(lib.clm_argsort, a, int(order), what="clm_argsort")

    def argsort_top_k(self, a, k: int) -> "Tensor":
        """ggml_argsort_top_k: the indices of the k largest values of each row of a, largest
        first; an I32 [k, ne1, ne2, ne3] view (not contiguous: the row stride of the full argsort)
        of the first k columns of argsort(a, DESC), whose node is the view's source."""
        ne = a.ne
        if not 0 < k <= ne[0]:
            raise ValueError(f"argsort_top_k: k = {k} is not in 1..{ne[0]} (ne0 of the rows)")
        order = self.argsort(a, SortOrder.DESC)
        return self.view_4d(order, (k, ne[1], ne[2], ne[3]), order.nb[1:], 0)

    def sum_rows(self, a) -> "Tensor":
        """ggml_sum_rows: [ne0, ne1, ne2, ne3] -> [1, ne1, ne2, ne3], a's type."""
        return self._unary_node(lib.clm_sum_rows, a, what="clm_sum_rows")

    def clamp(self, a, min: float, max: float) -> "Tensor":
        """ggml_clamp: MAX(MIN(x, max), min) element by element; a's type and shape."""
        return self._unary_node(lib.clm_clamp, a, float(min), float(max), what="clm_clamp")

    def all_reduce(self, a) -> "Tensor":
        """Tensor parallelism: the sum of every rank's a (contiguous F32/F16/BF16), a's shape and
        type; run by a backend with a communicator (Backend.comm_init)."""
        return self._unary_node(lib.clm_all_reduce, a, what="clm_all_reduce")

    def all_gather(self, a, n_ranks: int) -> "Tensor":
        """Tensor parallelism: a [ne0, ne1, ne2] (contiguous float) of every rank ->
        [ne0, ne1, ne2, n_ranks], rank r's at index r of ne3."""
        return self._unary_node(lib.clm_all_gather, a, int(n_ranks), what="clm_all_gather")

    def mul_mat_id(self, as_, b, ids) -> "Tensor":
        """ggml_mul_mat_id: as_ [K, N, n_as] (expert weights), b [K, n_b1, n_tokens] (n_b1 1 or
        dividing n_ids), ids I32 [n_ids, n_tokens] -> F32 [N, n_ids, n_tokens], with
        out[:, e, t] = as_[:, :, ids[e, t]] x b[:, e % n_b1, t]."""
        out = ffi.new("clm_tensor **")
        check(lib.clm_mul_mat_id(self._handle(), as_.c, b.c, ids.c, out), "clm_mul_mat_id")
        return self._tensor(out)

    def new_op(self, op: int, tensor_type: int, ne, srcs, params: bytes = b"") -> "Tensor":
        """A generic node: result type and shape (ggml order) computed by the caller."""
        ne_c = ffi.new("int64_t[]", list(ne))
        srcs_c = ffi.new("clm_tensor *[]", [s.c for s in srcs] or [ffi.NULL])
        out = ffi.new("clm_tensor **")
        check(lib.clm_new_op(self._handle(), int(op), int(tensor_type), len(ne), ne_c, srcs_c,
                             len(srcs), params, len(params), out), "clm_new_op")
        return self._tensor(out)

    def new_graph(self, max_nodes: int = 2048) -> "Graph":
        out = ffi.new("clm_graph **")
        check(lib.clm_graph_new(self._handle(), max_nodes, out), "clm_graph_new")
        return Graph(self, out[0])

    def alloc_tensors(self, buffer_type: BufferType) -> Buffer:
        """Place every unplaced tensor of this context in one new buffer (views share their
        source's memory); the tensors keep the buffer alive."""
        return alloc_tensors(self.tensors, buffer_type)[0]


def layout_tensors(tensors, buffer_type: BufferType, *, guard: int = 0,
                   max_size: int | None = None) -> list[tuple[list[tuple["Tensor", int, int]], int]]:
    """Where alloc_tensors puts the unplaced base tensors (no view source, no data) of `tensors`,
    in order, as ggml-alloc's ggml_backend_alloc_ctx_tensors_from_buft: aligned offsets, with
    `guard` bytes (rounded up to the alignment) before and after each tensor; a new buffer starts
    where the next tensor would pass `max_size`. -> [(entries (tensor, offset, size), total)]."""
    alignment = max(buffer_type.alignment, 1)
    guard = (guard + alignment - 1) // alignment * alignment
    limit = max_size or (1 << 62)
    batches, batch, total = [], [], guard
    for tensor in tensors:
        if tensor.is_view or tensor.has_data:
            continue
        size = buffer_type.alloc_size(tensor)
        step = (size + alignment - 1) // alignment * alignment + guard
        if batch and total + step > limit:
            batches.append((batch, total))
            batch, total = [], guard
        batch.append((tensor, total, size))
        total += step
    batches.append((batch, total))
    return batches


def place_tensors(tensors, entries, buffer: Buffer) -> None:
    """Place layout entries (tensor, offset, size) in `buffer`, then give the unplaced views
    among `tensors` whose source now has memory their addresses (ggml_backend_view_init)."""
    for tensor, offset, _ in entries:
        tensor.alloc(buffer, offset)
    for tensor in tensors:
        if tensor.is_view and not tensor.has_data and tensor.view_src.has_data:
            tensor.view_init(buffer)


def alloc_tensors(tensors, buffer_type: BufferType, *, max_size: int | None = None,
                  usage: int | None = None) -> list[Buffer]:
    """The one placement helper (ggml_backend_alloc_ctx_tensors): the unplaced tensors of
    `tensors` in new aligned buffers of `buffer_type`, one unless `max_size` splits them; views
    share their source's memory. The tensors keep their buffers alive."""
    tensors = list(tensors)
    alignment = max(buffer_type.alignment, 1)
    buffers = []
    for entries, total in layout_tensors(tensors, buffer_type, max_size=max_size):
        buffer = buffer_type.alloc_buffer(max(total, alignment))
        if usage is not None:
            buffer.usage = usage
        buffers.append(buffer)
        place_tensors([], entries, buffer)
    for tensor in tensors:
        if tensor.is_view and not tensor.has_data:
            base = tensor.view_src
            tensor.view_init(next((b for b in buffers if base.in_buffer(b)), buffers[-1]))
    return buffers


class Tensor:
    """A clm_tensor in a Context. `ne`/`nb` are ggml order; set()/get() take numpy order."""

    def __init__(self, ctx: Context, ptr):
        self._ctx = ctx          # keeps the arena (and so *ptr) alive
        self._ptr = ptr
        self._buffer = None      # keeps the memory the data pointer lies in alive

    @property
    def c(self):
        """The clm_tensor * (struct fields are writable: used by tests of the sanitizer)."""
        if self._ctx.closed:
            raise _closed("the tensor's context")
        return self._ptr

    address = property(lambda self: int(ffi.cast("uintptr_t", self._ptr)))
    type = property(lambda self: TensorType(self.c.type))
    op = property(lambda self: Op(self.c.op))
    op_desc = property(lambda self: _text(lib.clm_op_desc(self.c)))
    ne = property(lambda self: tuple(int(n) for n in self.c.ne))
    nb = property(lambda self: tuple(int(n) for n in self.c.nb))
    nbytes = property(lambda self: int(lib.clm_nbytes(self.c)))
    nelements = property(lambda self: int(lib.clm_nelements(self.c)))
    is_contiguous = property(lambda self: bool(lib.clm_is_contiguous(self.c)))
    src = property(lambda self: [Tensor(self._ctx, s) for s in self.c.src if s != ffi.NULL])

    @property
    def n_dims(self) -> int:
        ne = self.ne
        return next((i + 1 for i in range(3, 0, -1) if ne[i] > 1), 1)

    @property
    def shape(self) -> tuple[int, ...]:
        """numpy order; for quantized types the last axis counts bytes of a row."""
        dims = list(self.ne[:self.n_dims])
        if not dtypes.is_plain(self.type.name):
            dims[0] = int(lib.clm_row_size(self.c.type, dims[0]))
        return tuple(reversed(dims))

    @property
    def name(self) -> str:
        return _text(self.c.name)

    @name.setter
    def name(self, value: str) -> None:
        check(lib.clm_tensor_set_name(self.c, value.encode()), "clm_tensor_set_name")

    @property
    def data(self) -> int:
        """The device (or host) address of element 0, 0 until placed."""
        return int(ffi.cast("uintptr_t", self.c.data))

    @data.setter
    def data(self, address: int) -> None:
        self.c.data = ffi.cast("void *", address)

    @property
    def dtype(self) -> np.dtype:
        return dtypes.numpy_dtype(self.type.name)

    def alloc(self, buffer: Buffer, offset: int = 0) -> None:
        check(lib.clm_tensor_alloc(buffer._handle(), self.c, offset), "clm_tensor_alloc")
        self._buffer = buffer

    def view_init(self, buffer: Buffer | None = None) -> None:
        check(lib.clm_tensor_view_init(self.c), "clm_tensor_view_init")
        self._buffer = buffer

    def _host_array(self, array) -> np.ndarray:
        """array as a C-contiguous numpy array of this tensor's dtype and element count."""
        dtype = self.dtype
        array = np.asarray(array)
        if self.type.name == "BF16" and array.dtype != np.uint16:
            raise TypeError("BF16 data travels as uint16 bit patterns: use dtypes.bf16_bits()")
        array = np.ascontiguousarray(array, dtype=dtype)
        if array.nbytes != self.nbytes:
            raise ValueError(f"tensor {self.name or '?'} of shape {self.shape} (numpy order) "
                             f"holds {self.nbytes} bytes, the array has {array.nbytes}")
        return array

    def _require_contiguous(self):
        if not self.is_contiguous:
            raise CannError(Status.ERR_INVALID_ARG, "set()/get() need a contiguous tensor")

    def set(self, array) -> None:
        """Copy a host array (numpy order) into the tensor, synchronously."""
        self._require_contiguous()
        host = self._host_array(array)
        check(lib.clm_tensor_set(self.c, ffi.from_buffer(host), 0, host.nbytes), "clm_tensor_set")

    def get(self) -> np.ndarray:
        """The tensor's data as a new numpy array (numpy order), synchronously."""
        self._require_contiguous()
        host = np.empty(self.shape, dtype=self.dtype)
        check(lib.clm_tensor_get(self.c, ffi.from_buffer(host), 0, host.nbytes), "clm_tensor_get")
        return host

    def write_bytes(self, data, offset: int = 0) -> None:
        """Copy raw ggml bytes (any buffer-protocol object, e.g. a uint8 view of a memory map)
        into the tensor at byte `offset`, synchronously; quantized tensors take whole blocks."""
        size = memoryview(data).nbytes
        check(lib.clm_tensor_set(self.c, ffi.from_buffer(data), offset, size), "clm_tensor_set")

    def read_bytes(self, offset: int = 0, size: int | None = None) -> np.ndarray:
        """Raw ggml bytes [offset, offset + size) of the tensor as a new uint8 array."""
        size = self.nbytes - offset if size is None else size
        host = np.empty(size, dtype=np.uint8)
        check(lib.clm_tensor_get(self.c, ffi.from_buffer(host), offset, size), "clm_tensor_get")
        return host

    def memset(self, value: int = 0) -> None:
        check(lib.clm_tensor_memset(self.c, value, 0, self.nbytes), "clm_tensor_memset")

    def copy_to(self, dst: "Tensor") -> None:
        check(lib.clm_tensor_copy(self.c, dst.c), "clm_tensor_copy")

    # graph structure: sources, op_params, flags (what the scheduler and the reference need)
    @property
    def sources(self) -> list["Tensor | None"]:
        """src with None for absent entries up to the last present one."""
        ctx = self._ctx
        srcs = [None if s == ffi.NULL else Tensor(ctx, s) for s in self.c.src]
        while srcs and srcs[-1] is None:
            srcs.pop()
        return srcs

    @property
    def n_src_slots(self) -> int:
        return len(self.c.src)

    def set_src(self, index: int, tensor: "Tensor") -> None:
        """Rewire source `index` (the scheduler's copies and aliases)."""
        self.c.src[index] = tensor.c

    @property
    def op_params(self) -> np.ndarray:
        """The op's parameters as int32 words (view as float32 for float parameters)."""
        return np.frombuffer(ffi.buffer(self.c.op_params), dtype=np.int32).copy()

    def op_param(self, index: int) -> int:
        return int(self.c.op_params[index])

    @property
    def op_params_bytes(self) -> bytes:
        return bytes(ffi.buffer(self.c.op_params))

    @property
    def flags(self) -> int:
        return int(self.c.flags)

    def mark_input(self) -> "Tensor":
        """ggml_set_input: the graph's caller writes this tensor."""
        self.c.flags |= int(TensorFlag.INPUT)
        return self

    def mark_output(self) -> "Tensor":
        """ggml_set_output: the graph's caller reads this tensor."""
        self.c.flags |= int(TensorFlag.OUTPUT)
        return self

    # storage: views, data, buffer
    is_view = property(lambda self: self.c.view_src != ffi.NULL)
    has_data = property(lambda self: self.c.data != ffi.NULL)
    view_offs = property(lambda self: int(self.c.view_offs))

    @property
    def view_src(self) -> "Tensor | None":
        base = self.c.view_src
        return None if base == ffi.NULL else Tensor(self._ctx, base)

    @property
    def storage(self) -> "Tensor":
        """The tensor whose memory this one lies in (its view source, or itself)."""
        base = self.c.view_src
        return self if base == ffi.NULL else Tensor(self._ctx, base)

    @property
    def buffer_type_id(self) -> int | None:
        """The identity (BufferType.id) of the buffer type this placed tensor lies in, or None."""
        c = self.c
        if c.buffer == ffi.NULL or c.data == ffi.NULL:
            return None
        return int(ffi.cast("uintptr_t", lib.clm_buffer_buft(c.buffer)))

    @property
    def buffer_usage(self) -> int | None:
        """The BufferUsage of the buffer this tensor lies in, None when it has none."""
        buf = self.c.buffer
        return None if buf == ffi.NULL else BufferUsage(lib.clm_buffer_get_usage(buf))

    def in_buffer(self, buffer: Buffer) -> bool:
        return self.c.buffer == buffer._handle()

    def set_strides(self, nb) -> None:
        """Set nb (bytes, ggml order): an alias standing for a strided view."""
        c = self.c
        for d, n in enumerate(nb):
            c.nb[d] = n

    def alias_storage(self, address: int, like: "Tensor") -> None:
        """Point this (unplaced) tensor at `address`, inside the buffer `like` lies in."""
        c = self.c
        c.data = ffi.cast("void *", address)
        c.buffer = like.c.buffer

    def __eq__(self, other):
        return isinstance(other, Tensor) and self._ptr == other._ptr

    def __hash__(self):
        return self.address

    def __repr__(self):
        return f"Tensor({self.name!r}, {self.type.name}, ne={self.ne}, op={self.op.name})"


class Graph:
    """A compute graph in a Context: nodes in topological order (ggml_build_forward_expand)."""

    def __init__(self, ctx: Context, ptr):
        self._ctx = ctx
        self._ptr = ptr
        self._outputs = []   # the tensors built from, so their buffers outlive the graph

    def _handle(self):
        if self._ctx.closed:
            raise _closed("the graph's context")
        return self._ptr

    def build_forward(self, tensor: Tensor) -> "Graph":
        check(lib.clm_graph_build_forward(self._handle(), tensor.c), "clm_graph_build_forward")
        self._outputs.append(tensor)
        return self

    @property
    def nodes(self) -> list[Tensor]:
        handle = self._handle()
        return [Tensor(self._ctx, lib.clm_graph_node(handle, i))
                for i in range(lib.clm_graph_n_nodes(handle))]

    @property
    def leafs(self) -> list[Tensor]:
        handle = self._handle()
        return [Tensor(self._ctx, lib.clm_graph_leaf(handle, i))
                for i in range(lib.clm_graph_n_leafs(handle))]

    def scan(self) -> tuple[list[int], list[tuple]]:
        """What a scheduler reads of every node, in one call (clm_graph_scan): (a flat list of
        SCAN_WORDS ints per node, in node order, indexed by the SCAN_* constants; every node's
        sources, one after another, each a tuple (source, its root, the root's buffer type,
        its buffer usage + 1)). Tensors are addresses: Context.tensor_at wraps one."""
        handle = self._handle()
        n_nodes = lib.clm_graph_n_nodes(handle)
        words = ffi.new("uintptr_t[]", max(n_nodes * SCAN_WORDS, 1))
        n_src = max(n_nodes * 4 * lib.CLM_MAX_SRC, 1)
        src_words, used = ffi.new("uintptr_t[]", n_src), ffi.new("size_t *")
        check(lib.clm_graph_scan(handle, words, n_nodes * SCAN_WORDS, src_words, n_src, used),
              "clm_graph_scan")
        it = iter(ffi.unpack(src_words, used[0]))
        return ffi.unpack(words, n_nodes * SCAN_WORDS), list(zip(it, it, it, it))

    def reset(self) -> None:
        lib.clm_graph_reset(self._handle())
        self._outputs.clear()


# ---- backends (streams) -------------------------------------------------------------------------

class Backend(_Owned):
    """A stream on a device. Work is asynchronous: synchronize() before reading results. Host
    arrays and graphs handed to asynchronous calls are kept alive until the next synchronize()."""

    _free = lib.clm_backend_free

    def __init__(self, ptr, device: Device):
        self._ptr = ptr
        self.device = device
        self._in_flight = []
        self.profiling = False

    def close(self) -> None:
        super().close()
        self._in_flight.clear()

    name = property(lambda self: _text(lib.clm_backend_name(self._handle())))

    def synchronize(self) -> None:
        try:
            check(lib.clm_backend_synchronize(self._handle()), "clm_backend_synchronize")
        finally:
            self._in_flight.clear()

    def graph_compute(self, graph: Graph) -> None:
        self._in_flight.append(graph)
        check(lib.clm_backend_graph_compute(self._handle(), graph._handle()),
              "clm_backend_graph_compute")

    def set_tensor_async(self, tensor: Tensor, array, offset: int = 0) -> None:
        """Queue a host -> tensor copy of `array` at byte `offset`; the array is kept alive."""
        host = np.ascontiguousarray(array)
        self._in_flight.append(host)
        check(lib.clm_backend_set_tensor_async(self._handle(), tensor.c, ffi.from_buffer(host),
                                               offset, host.nbytes), "set_tensor_async")

    def set_tensors_async(self, pairs) -> None:
        """set_tensor_async of each (tensor, array) in order, at offset 0: a graph's inputs in one
        call (a decode token uploads five; each call crossing into Python costs on cold caches)."""
        handle, keep, queue = self._handle(), self._in_flight, lib.clm_backend_set_tensor_async
        for tensor, array in pairs:
            host = np.ascontiguousarray(array)
            keep.append(host)
            status = queue(handle, tensor.c, ffi.from_buffer(host), 0, host.nbytes)
            if status != lib.CLM_OK:
                check(status, "set_tensor_async")

    def get_tensor_async(self, tensor: Tensor, out: np.ndarray | None = None, offset: int = 0,
                         *, data=None) -> np.ndarray:
        """Queue a tensor -> host copy; the returned array is valid after synchronize(). data:
        array_pointer(out), when the caller keeps one."""
        if out is None:
            out = np.empty(tensor.shape, dtype=tensor.dtype)
        if data is None:
            if not out.flags.c_contiguous or not out.flags.writeable:
                raise ValueError("get_tensor_async needs a writable C-contiguous array")
            data = ffi.from_buffer(out)
        self._in_flight.append(out)
        check(lib.clm_backend_get_tensor_async(self._handle(), tensor.c, data, offset,
                                               out.nbytes), "get_tensor_async")
        return out

    def cpy_tensor_async(self, dst_backend: "Backend", src: Tensor, dst: Tensor) -> None:
        """Copy src (on this backend) into dst (on dst_backend), ordered on both streams."""
        check(lib.clm_backend_cpy_tensor_async(self._handle(), dst_backend._handle(), src.c,
                                               dst.c), "cpy_tensor_async")

    def event_record(self, event: Event) -> None:
        check(lib.clm_backend_event_record(self._handle(), event._handle()), "event_record")

    def event_wait(self, event: Event) -> None:
        check(lib.clm_backend_event_wait(self._handle(), event._handle()), "event_wait")

    # CANN backends only: the tensor-parallel communicator (HCCL) of this backend's device
    def comm_root_info(self) -> bytes:
        """Rank 0 of a tensor-parallel group: the RootInfo bytes every rank passes to
        comm_init (HcclGetRootInfo on this backend's device)."""
        out = ffi.new("char[]", lib.CLM_COMM_ROOT_INFO_BYTES)
        check(lib.clm_cann_comm_root_info(self._handle(), out, lib.CLM_COMM_ROOT_INFO_BYTES),
              "clm_cann_comm_root_info")
        return bytes(ffi.buffer(out))

    def comm_init(self, n_ranks: int, rank: int, root_info: bytes) -> None:
        """Join the communicator of root_info as `rank` of n_ranks (returns once every rank has
        joined); this backend's ALL_REDUCE / ALL_GATHER nodes run over it."""
        root_info = bytes(root_info)
        check(lib.clm_cann_comm_init(self._handle(), int(n_ranks), int(rank), root_info,
                                     len(root_info)), "clm_cann_comm_init")

    # CANN backends only: scratch-pool and graph-capture counters, raw pool blocks for tests
    def stats(self) -> dict:
        """clm_cann_backend_stats as a dict: pool_kind ('legacy' | 'vmm'), pool_in_use,
        pool_peak, pool_reserved, pool_mapped (bytes), pool_slots_used, pool_slots_total,
        graph_captures, graph_replays, graph_cached, fused_add_rms_norm (CANN_LLM_FUSION),
        mul_mat_id_routed, mul_mat_id_gathered (CANN_LLM_MUL_MAT_ID), casts_shared,
        rope_fused (CANN_LLM_ROPE)."""
        out = ffi.new("clm_cann_stats *")
        check(lib.clm_cann_backend_stats(self._handle(), out), "clm_cann_backend_stats")
        stats = {name: int(getattr(out, name)) for name, _ in ffi.typeof("clm_cann_stats").fields}
        stats["pool_kind"] = {lib.CLM_POOL_LEGACY: "legacy", lib.CLM_POOL_VMM: "vmm"}.get(
            stats["pool_kind"], str(stats["pool_kind"]))
        return stats

    def set_profiling(self, on: bool) -> None:
        """clm_cann_profile: while on, graphs run eagerly with a timing event after each node."""
        check(lib.clm_cann_profile(self._handle(), bool(on)), "clm_cann_profile")
        self.profiling = bool(on)

    def take_node_times(self) -> list[dict]:
        """The nodes computed since the last call (synchronizes the stream), in order: dicts of
        name, op (Op), type (TensorType), ne, graph (index since the last call), start_ms (from
        that graph's start) and ms (device time)."""
        n = ffi.new("size_t *")
        check(lib.clm_cann_profile_take(self._handle(), ffi.NULL, 0, n), "clm_cann_profile_take")
        count = int(n[0])
        out = ffi.new("clm_cann_node_time[]", max(count, 1))
        check(lib.clm_cann_profile_take(self._handle(), out, count, n), "clm_cann_profile_take")
        return [{"name": _text(r.name), "op": Op(r.op), "type": TensorType(r.type),
                 "ne": tuple(int(x) for x in r.ne), "graph": int(r.graph),
                 "start_ms": float(r.start_ms), "ms": float(r.ms)} for r in out[0:int(n[0])]]

    def pool_alloc(self, size: int) -> tuple[int, int]:
        """A block of the backend's scratch pool: (device address, actual size). Stream-ordered
        temporary memory; the VMM pool needs LIFO frees."""
        ptr = ffi.new("void **")
        actual = ffi.new("size_t *")
        check(lib.clm_cann_pool_alloc(self._handle(), size, ptr, actual), "clm_cann_pool_alloc")
        return int(ffi.cast("uintptr_t", ptr[0])), int(actual[0])

    def pool_free(self, address: int, size: int) -> None:
        check(lib.clm_cann_pool_free(self._handle(), ffi.cast("void *", address), size),
              "clm_cann_pool_free")
