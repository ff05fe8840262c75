"""The CPU reference backend: every op of cann_llm.h in numpy, with ggml's semantics.

Ground truth for the op checker (cann_llm.tools.opcheck) and the tensor diff tool, and the
fallback device of the graph splitter. Exact rather than fast: float64 arithmetic, quantized
tables dequantized with gguf.quants, results rounded once to the node's type. Arrays are in
numpy order (the reverse of ggml's ne), always 4-d: shape (ne3, ne2, ne1, ne0).

Two layers:
- compute_node(node, srcs) -> values: one op on decoded source arrays (floats or ints);
- evaluate(graph, leaf_values) -> {tensor: values}: a whole graph over a byte-level model of
  memory, so views, permutes, CPY into views and SET_ROWS in place behave as in ggml.
"""

import math

import numpy as np

from . import dtypes
from .backend import ROPE_TYPE_NEOX, GluOp, Op, SortOrder, Tensor, TensorType, UnaryOp
from .ggml_types import GGMLQuantizationType

_QUANT_TYPES = {TensorType.Q4_0, TensorType.Q4_1, TensorType.Q5_0, TensorType.Q5_1,
                TensorType.Q8_0, TensorType.Q2_K, TensorType.Q3_K, TensorType.Q4_K,
                TensorType.Q5_K, TensorType.Q6_K}
_INT_TYPES = {TensorType.I8, TensorType.I16, TensorType.I32, TensorType.I64}


class ReferenceError(Exception):
    """The reference cannot compute a node (an op or type it does not know)."""


# ---- types: storage (what Tensor.get returns) <-> values -----------------------------------------

def is_quantized(tensor_type: int) -> bool:
    return TensorType(tensor_type) in _QUANT_TYPES


def decode(tensor_type: int, stored: np.ndarray) -> np.ndarray:
    """Storage array -> values: float32 for float and quantized types, the integer itself for
    integer types. Quantized rows are bytes along the last axis."""
    tensor_type = TensorType(tensor_type)
    if tensor_type in _QUANT_TYPES:
        from gguf import quants     # here: the scheduler imports this module on every load
        return quants.dequantize(np.ascontiguousarray(stored, dtype=np.uint8),
                                 GGMLQuantizationType(int(tensor_type))).astype(np.float32)
    if tensor_type == TensorType.BF16:
        return dtypes.bf16_to_f32(stored)
    if tensor_type in _INT_TYPES:
        return np.asarray(stored)
    return np.asarray(stored).astype(np.float32)


def encode(tensor_type: int, values: np.ndarray) -> np.ndarray:
    """Values -> storage array of `tensor_type`: round to nearest even for F16/BF16, ggml's
    reference quantization (gguf.quants) for quantized types."""
    tensor_type = TensorType(tensor_type)
    values = np.asarray(values)
    if tensor_type in _QUANT_TYPES:
        from gguf import quants
        return quants.quantize(np.ascontiguousarray(values, dtype=np.float32),
                               GGMLQuantizationType(int(tensor_type)))
    if tensor_type == TensorType.BF16:
        return dtypes.bf16_bits(values.astype(np.float32))
    if tensor_type in _INT_TYPES and np.issubdtype(values.dtype, np.floating):
        values = np.rint(values)
    return values.astype(dtypes.numpy_dtype(tensor_type.name))


def round_to(tensor_type: int, values: np.ndarray) -> np.ndarray:
    """values as `tensor_type` holds them (the rounding a store into that type does)."""
    return decode(tensor_type, encode(tensor_type, values))


# ---- tensor metadata through the backend wrappers --------------------------------------------------

def np_shape(tensor: Tensor) -> tuple:
    """(ne3, ne2, ne1, ne0)."""
    return tuple(reversed(tensor.ne))


def params_i32(tensor: Tensor) -> np.ndarray:
    return tensor.op_params


def params_f32(tensor: Tensor) -> np.ndarray:
    return params_i32(tensor).view(np.float32)


def storage_of(tensor: Tensor) -> Tensor:
    """The tensor whose memory `tensor` lies in (its view_src, or itself)."""
    return tensor.storage


def view_offset(tensor: Tensor) -> int:
    return tensor.view_offs


def storage_bytes(tensor: Tensor) -> int:
    """Bytes of a base tensor in ggml layout (rows of blocks for quantized types)."""
    return tensor.nbytes


# ---- a byte model of memory ---------------------------------------------------------------------------

def strided(raw: np.ndarray, tensor: Tensor, offset: int | None = None) -> np.ndarray:
    """The storage array of `tensor` inside its base's bytes `raw` (uint8, writable), as a numpy
    view with the tensor's strides; quantized rows are their block bytes along the last axis."""
    if offset is None:
        offset = view_offset(tensor)
    ne, nb = tensor.ne, tensor.nb
    if is_quantized(tensor.type):
        row_bytes = ne[0] // tensor_block_size(tensor.type) * nb[0]
        shape = (ne[3], ne[2], ne[1], row_bytes)
        strides = (nb[3], nb[2], nb[1], 1)
        dtype = np.uint8
    else:
        shape = tuple(reversed(ne))
        strides = tuple(reversed(nb))
        dtype = dtypes.numpy_dtype(tensor.type.name)
    if 0 in shape:
        return np.zeros(shape, dtype=dtype)
    last = offset + sum((n - 1) * s for n, s in zip(shape, strides)) + np.dtype(dtype).itemsize
    if offset < 0 or last > raw.nbytes:
        raise ReferenceError(f"tensor {tensor.name or '?'} ({tensor.type.name}, ne={ne}, "
                             f"nb={nb}) lies outside its {raw.nbytes} bytes of storage")
    return np.ndarray(shape, dtype=dtype, buffer=raw, offset=offset, strides=strides)


def tensor_block_size(tensor_type: int) -> int:
    from .backend import type_traits
    return type_traits(int(tensor_type))[0]


def read(raw: np.ndarray, tensor: Tensor) -> np.ndarray:
    """Decoded values (numpy order, 4-d) of `tensor` inside its base's bytes `raw`."""
    return decode(tensor.type, strided(raw, tensor))


def write(raw: np.ndarray, tensor: Tensor, values: np.ndarray) -> None:
    """Store `values` (numpy order, the tensor's shape) into `tensor` inside `raw`."""
    strided(raw, tensor)[...] = encode(tensor.type, np.broadcast_to(values, np_shape(tensor)))


class Memory:
    """The bytes of every base tensor of a graph, in ggml layout, keyed by base address."""

    def __init__(self):
        self.raw: dict[int, np.ndarray] = {}

    def bytes_of(self, tensor: Tensor) -> np.ndarray:
        base = storage_of(tensor)
        if base.address not in self.raw:
            self.raw[base.address] = np.zeros(storage_bytes(base), dtype=np.uint8)
        return self.raw[base.address]

    def set_stored(self, tensor: Tensor, stored: np.ndarray) -> None:
        """Initialise a base tensor from its storage array (as Tensor.get() returns it)."""
        stored = np.ascontiguousarray(stored)
        raw = self.bytes_of(tensor)
        if stored.nbytes != raw.nbytes:
            raise ValueError(f"tensor {tensor.name or '?'} holds {raw.nbytes} bytes, "
                             f"the array has {stored.nbytes}")
        raw[...] = stored.reshape(-1).view(np.uint8)

    def read(self, tensor: Tensor) -> np.ndarray:
        return read(self.bytes_of(tensor), tensor)

    def write(self, tensor: Tensor, values: np.ndarray) -> None:
        write(self.bytes_of(tensor), tensor, values)


# ---- the ops ---------------------------------------------------------------------------------------

def _f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _repeat_to(b: np.ndarray, shape: tuple) -> np.ndarray:
    """ggml_repeat: tile b (numpy order) until it has `shape` (each extent divides)."""
    return np.tile(b, [s // n for s, n in zip(shape, b.shape)])


def _silu(x: np.ndarray) -> np.ndarray:
    x = _f64(x)
    with np.errstate(over="ignore"):
        return x / (1.0 + np.exp(-x))


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_COEF_A = 0.044715
_erfc = np.frompyfunc(math.erfc, 1, 1)   # numpy has no erf; libm's, element by element (slow)


def _gelu(x: np.ndarray) -> np.ndarray:
    """ggml_gelu, the tanh approximation 0.5 x (1 + tanh(u)), u = sqrt(2/pi) x (1 + 0.044715 x^2),
    computed as x / (1 + exp(-2u)) (the same value without the cancellation of 1 + tanh(u) for
    negative x); its limit 0 at -inf."""
    x = _f64(x)
    u = _SQRT_2_OVER_PI * x * (1.0 + _GELU_COEF_A * x * x)
    with np.errstate(over="ignore", invalid="ignore"):
        y = x / (1.0 + np.exp(-2.0 * u))
    return np.where(np.isneginf(x), 0.0, y)


def _gelu_erf(x: np.ndarray) -> np.ndarray:
    """ggml_gelu_erf, 0.5 x (1 + erf(x / sqrt(2))), computed as 0.5 x erfc(-x / sqrt(2)) (no
    cancellation for negative x); its limit 0 at -inf."""
    x = _f64(x)
    with np.errstate(invalid="ignore"):
        y = 0.5 * x * _erfc(-x * math.sqrt(0.5)).astype(np.float64)
    return np.where(np.isneginf(x), 0.0, y)


def _tanh(x: np.ndarray) -> np.ndarray:
    return np.tanh(_f64(x))


def op_add(a, b):
    return _f64(a) + _repeat_to(_f64(b), a.shape)


def op_mul(a, b):
    return _f64(a) * _repeat_to(_f64(b), a.shape)


def op_scale(a, s: float, bias: float):
    return _f64(a) * s + bias


def op_rms_norm(a, eps: float):
    x = _f64(a)
    mean = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(mean + eps)


def op_mul_mat(a, b):
    """a (ne03, ne02, N, K), b (ne13, ne12, M, K) -> (ne13, ne12, M, N); a's batches broadcast
    over b's as ggml does (b batch i12 uses a batch i12 // (ne12 // ne02))."""
    a, b = _f64(a), _f64(b)
    a = np.repeat(np.repeat(a, b.shape[0] // a.shape[0], axis=0), b.shape[1] // a.shape[1], axis=1)
    return b @ np.swapaxes(a, -1, -2)


def op_get_rows(a, rows):
    """a (ne3, ne2, n_rows, ne0), rows (1, ne3, ne2, n) -> (ne3, ne2, n, ne0)."""
    rows = np.asarray(rows)[0].astype(np.int64)            # (ne3, ne2, n)
    i3 = np.arange(rows.shape[0])[:, None, None]
    i2 = np.arange(rows.shape[1])[None, :, None]
    return np.asarray(a)[i3, i2, rows]


def op_set_rows(dst, src, rows):
    """dst (ne3, ne2, n_rows, ne0) with src (ne3, ne2, n, ne0) written at rows
    (1, ne12, ne11, n): src row (i, i2, i3) goes to dst row rows[i3 % ne12, i2 % ne11, i]."""
    out = np.array(dst, dtype=np.float64, copy=True)
    rows = np.asarray(rows)[0].astype(np.int64)            # (ne12, ne11, n)
    ne3, ne2, n = src.shape[0], src.shape[1], src.shape[2]
    i3 = np.arange(ne3)[:, None, None]
    i2 = np.arange(ne2)[None, :, None]
    idx = rows[i3 % rows.shape[0], i2 % rows.shape[1], np.arange(n)[None, None, :]]
    if idx.size and (idx.min() < 0 or idx.max() >= out.shape[2]):
        raise ReferenceError(f"SET_ROWS: row index out of range 0..{out.shape[2] - 1}")
    out[np.broadcast_to(i3, idx.shape), np.broadcast_to(i2, idx.shape), idx] = _f64(src)
    return out


def rope_yarn_corr_dims(n_dims: int, n_ctx_orig: int, freq_base: float, beta_fast: float,
                        beta_slow: float) -> tuple[float, float]:
    """ggml_rope_yarn_corr_dims: the first and last rotation dims the YaRN ramp blends over."""
    def corr_dim(n_rot):
        return n_dims * math.log(n_ctx_orig / (n_rot * 2 * math.pi)) / (2 * math.log(freq_base))
    start = math.floor(corr_dim(beta_fast))
    end = math.ceil(corr_dim(beta_slow))
    return max(0.0, start), min(n_dims - 1.0, end)


def rope_cos_sin(pos, n_dims: int, n_ctx_orig: int, freq_base: float, freq_scale: float,
                 ext_factor: float, attn_factor: float, beta_fast: float, beta_slow: float,
                 freq_factors=None) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin (n_tokens, n_dims/2) of ggml's rope with YaRN (rope_yarn), attn_factor and
    the YaRN magnitude correction folded in."""
    ic = np.arange(n_dims // 2, dtype=np.float64)
    theta_extrap = _f64(pos)[:, None] * freq_base ** (-2.0 * ic / n_dims)[None, :]
    if freq_factors is not None:
        theta_extrap = theta_extrap / _f64(freq_factors)[: n_dims // 2][None, :]
    theta_interp = freq_scale * theta_extrap
    mscale = attn_factor
    if ext_factor != 0.0:
        low, high = rope_yarn_corr_dims(n_dims, n_ctx_orig, freq_base, beta_fast, beta_slow)
        # ggml evaluates the ramp at i0 / 2 (integer division) = ic
        y = (ic - low) / max(0.001, high - low)
        ramp_mix = (1.0 - np.clip(y, 0.0, 1.0)) * ext_factor
        theta = theta_interp * (1 - ramp_mix) + theta_extrap * ramp_mix
        mscale *= 1.0 + 0.1 * math.log(1.0 / freq_scale)
    else:
        theta = theta_interp
    return np.cos(theta) * mscale, np.sin(theta) * mscale


def op_rope(a, pos, freq_factors, n_dims: int, mode: int, n_ctx_orig: int, freq_base: float,
            freq_scale: float, ext_factor: float, attn_factor: float, beta_fast: float,
            beta_slow: float):
    """a (ne3, n_tokens, n_head, head_dim), pos (1, 1, 1, n_tokens): rotate the first n_dims of
    each head; normal mode pairs (2i, 2i+1), neox pairs (i, i + n_dims/2); the rest passes."""
    x = _f64(a)
    pos = np.asarray(pos).reshape(-1)
    ff = None if freq_factors is None else np.asarray(freq_factors).reshape(-1)
    cos, sin = rope_cos_sin(pos, n_dims, n_ctx_orig, freq_base, freq_scale, ext_factor,
                            attn_factor, beta_fast, beta_slow, ff)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]   # over (ne3, token, head, pair)
    out = x.copy()
    half = n_dims // 2
    if mode & ROPE_TYPE_NEOX:
        x0, x1 = x[..., :half], x[..., half:n_dims]
        out[..., :half] = x0 * cos - x1 * sin
        out[..., half:n_dims] = x0 * sin + x1 * cos
    else:
        x0, x1 = x[..., 0:n_dims:2], x[..., 1:n_dims:2]
        out[..., 0:n_dims:2] = x0 * cos - x1 * sin
        out[..., 1:n_dims:2] = x0 * sin + x1 * cos
    return out


def alibi_slopes(n_head: int, max_bias: float) -> np.ndarray:
    """ggml's ALiBi slope per head (1 for every head when max_bias is 0)."""
    if max_bias <= 0.0:
        return np.ones(n_head)
    n_head_log2 = 1 << int(math.floor(math.log2(n_head)))
    m0 = 2.0 ** (-max_bias / n_head_log2)
    m1 = 2.0 ** (-(max_bias / 2.0) / n_head_log2)
    h = np.arange(n_head)
    return np.where(h < n_head_log2, m0 ** (h + 1), m1 ** (2 * (h - n_head_log2) + 1))


def _mask_for(mask, shape: tuple) -> np.ndarray:
    """mask (m3, m2, >= rows, cols) cut to `shape`'s rows and broadcast (tiled) over dims 2, 3."""
    mask = _f64(mask)[:, :, : shape[2], :]
    return _repeat_to(mask, (shape[0], shape[1], shape[2], shape[3]))


def _softmax(x: np.ndarray) -> np.ndarray:
    top = np.max(x, axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        e = np.exp(x - top)
        return e / np.sum(e, axis=-1, keepdims=True)


def op_soft_max(a, mask, scale: float, max_bias: float):
    """softmax over ne0 of a * scale + slope(head) * mask; head = ne2 index."""
    x = _f64(a) * scale
    if mask is not None:
        slope = alibi_slopes(x.shape[1], max_bias)[None, :, None, None]
        x = x + slope * _mask_for(mask, x.shape)
    return _softmax(x)


def op_flash_attn_ext(q, k, v, mask, scale: float, max_bias: float, logit_softcap: float):
    """q (n_seq, n_head, n_q, D), k (n_seq, n_head_kv, n_kv, D), v (n_seq, n_head_kv, n_kv, Dv),
    mask (m3, m2, >= n_q, n_kv) -> (n_seq, n_q, n_head, Dv): the permuted result of ggml."""
    q, k, v = _f64(q), _f64(k), _f64(v)
    group = q.shape[1] // k.shape[1]
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    s = (q @ np.swapaxes(k, -1, -2)) * scale                  # (n_seq, n_head, n_q, n_kv)
    if logit_softcap != 0.0:
        s = logit_softcap * np.tanh(s / logit_softcap)
    if mask is not None:
        slope = alibi_slopes(q.shape[1], max_bias)[None, :, None, None]
        s = s + slope * _mask_for(mask, s.shape)
    out = _softmax(s) @ v                                      # (n_seq, n_head, n_q, Dv)
    return np.swapaxes(out, 1, 2)


def op_argmax(a):
    """a (1, 1, ne1, ne0) -> (1, 1, 1, ne1): the first index of each row's maximum."""
    return np.argmax(np.asarray(a)[0, 0], axis=-1).astype(np.int32).reshape(1, 1, 1, -1)


def op_glu(a, b, swapped: bool, glu_op: int = GluOp.SWIGLU):
    """act(gate) * up, act silu (SWIGLU), gelu (GEGLU) or gelu_erf (GEGLU_ERF); fused (b None):
    a's first half is the gate (second if swapped)."""
    if b is None:
        n = a.shape[-1] // 2
        first, second = a[..., :n], a[..., n:]
        gate, up = (second, first) if swapped else (first, second)
    else:
        gate, up = a, b
    return _GLU_ACT[GluOp(glu_op)](gate) * _f64(up)


def op_div(a, b):
    """a / b, b repeated to a's shape (ggml_div); x/0 gives inf or NaN as in IEEE arithmetic."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return _f64(a) / _repeat_to(_f64(b), a.shape)


def op_sum_rows(a):
    """a (ne3, ne2, ne1, ne0) -> (ne3, ne2, ne1, 1): each row's sum (ggml sums in double too)."""
    return np.sum(_f64(a), axis=-1, keepdims=True)


def op_clamp(a, lo: float, hi: float):
    """ggml's CPU clamp, MAX(MIN(x, hi), lo) with C's `(a) < (b) ? (a) : (b)` macros: a NaN x
    gives hi (or lo when lo > hi, which wins over hi everywhere)."""
    x = _f64(a)
    y = np.where(x < hi, x, hi)
    return np.where(y > lo, y, lo)


# ---- argsort: ggml's CPU kernel is std::sort(idx, idx + ne0, cmp) with cmp(i, j) = x[i] < x[j]
# (ascending) or x[i] > x[j] (descending). std::sort is not stable, so the order of tied values is
# whatever libstdc++'s introsort leaves (llama.cpp's expert choice among tied router probabilities
# depends on it). Rows without ties (or NaN) sort in numpy; a row with ties runs the port below of
# libstdc++'s std::__sort (bits/stl_algo.h and stl_heap.h, unchanged in substance since GCC 4.x:
# median-of-three introsort down to runs of 16, heapsort past 2 floor(log2 n) levels, then one
# insertion sort). libc++ (clang's default on macOS) orders ties differently.

_STD_SORT_THRESHOLD = 16


class _StdSort:
    """std::sort over a list of indices `a` under `less(i, j)` (indices, not positions), in
    libstdc++'s steps. Its unguarded loops rely on the comparison being a strict weak order; NaN
    breaks that, and where C++ would read outside the row this raises ReferenceError."""

    def __init__(self, a: list, less):
        self.a, self.less = a, less

    def _guard(self, pos: int) -> None:
        if not 0 <= pos < len(self.a):
            raise ReferenceError("ARGSORT: values that are not ordered (NaN) take std::sort's "
                                 "unguarded loops outside the row (undefined in ggml)")

    def sort(self) -> list:
        n = len(self.a)
        if n > 0:
            self._introsort_loop(0, n, 2 * (n.bit_length() - 1))
            self._final_insertion_sort(0, n)
        return self.a

    def _introsort_loop(self, first: int, last: int, depth: int) -> None:
        while last - first > _STD_SORT_THRESHOLD:
            if depth == 0:
                self._heap_select(first, last, last)       # std::__partial_sort(first, last, last)
                self._sort_heap(first, last)
                return
            depth -= 1
            cut = self._unguarded_partition_pivot(first, last)
            self._introsort_loop(cut, last, depth)
            last = cut

    def _move_median_to_first(self, result: int, x: int, y: int, z: int) -> None:
        a, less = self.a, self.less
        if less(a[x], a[y]):
            if less(a[y], a[z]):
                pick = y
            elif less(a[x], a[z]):
                pick = z
            else:
                pick = x
        elif less(a[x], a[z]):
            pick = x
        elif less(a[y], a[z]):
            pick = z
        else:
            pick = y
        a[result], a[pick] = a[pick], a[result]

    def _unguarded_partition_pivot(self, first: int, last: int) -> int:
        mid = first + (last - first) // 2
        self._move_median_to_first(first, first + 1, mid, last - 1)
        return self._unguarded_partition(first + 1, last, first)

    def _unguarded_partition(self, first: int, last: int, pivot: int) -> int:
        a, less = self.a, self.less
        while True:
            while less(a[first], a[pivot]):
                first += 1
                self._guard(first)
            last -= 1
            while less(a[pivot], a[last]):
                last -= 1
                self._guard(last)
            if not first < last:
                return first
            a[first], a[last] = a[last], a[first]
            first += 1

    def _unguarded_linear_insert(self, last: int) -> None:
        a, less = self.a, self.less
        val = a[last]
        nxt = last - 1
        while less(val, a[nxt]):
            a[last] = a[nxt]
            last = nxt
            nxt -= 1
            self._guard(nxt)
        a[last] = val

    def _insertion_sort(self, first: int, last: int) -> None:
        a, less = self.a, self.less
        for i in range(first + 1, last):
            if less(a[i], a[first]):
                val = a[i]
                a[first + 1:i + 1] = a[first:i]
                a[first] = val
            else:
                self._unguarded_linear_insert(i)

    def _final_insertion_sort(self, first: int, last: int) -> None:
        if last - first > _STD_SORT_THRESHOLD:
            self._insertion_sort(first, first + _STD_SORT_THRESHOLD)
            for i in range(first + _STD_SORT_THRESHOLD, last):   # __unguarded_insertion_sort
                self._unguarded_linear_insert(i)
        else:
            self._insertion_sort(first, last)

    # the heap (bits/stl_heap.h), for ranges past the depth limit
    def _push_heap(self, first: int, hole: int, top: int, value) -> None:
        a, less = self.a, self.less
        parent = (hole - 1) // 2
        while hole > top and less(a[first + parent], value):
            a[first + hole] = a[first + parent]
            hole = parent
            parent = (hole - 1) // 2
        a[first + hole] = value

    def _adjust_heap(self, first: int, hole: int, length: int, value) -> None:
        a, less = self.a, self.less
        top = second = hole
        while second < (length - 1) // 2:
            second = 2 * (second + 1)
            if less(a[first + second], a[first + second - 1]):
                second -= 1
            a[first + hole] = a[first + second]
            hole = second
        if length % 2 == 0 and second == (length - 2) // 2:
            second = 2 * (second + 1)
            a[first + hole] = a[first + second - 1]
            hole = second - 1
        self._push_heap(first, hole, top, value)

    def _make_heap(self, first: int, last: int) -> None:
        length = last - first
        if length < 2:
            return
        parent = (length - 2) // 2
        while True:
            self._adjust_heap(first, parent, length, self.a[first + parent])
            if parent == 0:
                return
            parent -= 1

    def _pop_heap(self, first: int, last: int, result: int) -> None:
        a = self.a
        value = a[result]
        a[result] = a[first]
        self._adjust_heap(first, 0, last - first, value)

    def _heap_select(self, first: int, middle: int, last: int) -> None:
        self._make_heap(first, middle)
        for i in range(middle, last):
            if self.less(self.a[i], self.a[first]):
                self._pop_heap(first, middle, i)

    def _sort_heap(self, first: int, last: int) -> None:
        while last - first > 1:
            last -= 1
            self._pop_heap(first, last, last)


def std_sort_indices(values, descending: bool) -> list:
    """The indices 0..n-1 of `values` (one row) in the order ggml's CPU argsort leaves them:
    libstdc++'s std::sort with cmp x[i] < x[j] (x[i] > x[j] when descending)."""
    v = [float(x) for x in values]
    if descending:
        def less(i, j):
            return v[i] > v[j]
    else:
        def less(i, j):
            return v[i] < v[j]
    return _StdSort(list(range(len(v))), less).sort()


def op_argsort(a, order: int):
    """a (ne3, ne2, ne1, ne0) -> int32 of the same shape: each row's indices in ascending
    (SortOrder.ASC) or descending (DESC) order of its values, ties as ggml's CPU kernel orders
    them (std_sort_indices)."""
    if int(order) not in (SortOrder.ASC, SortOrder.DESC):
        raise ReferenceError(f"ARGSORT: order {order} is not known to the reference")
    descending = int(order) == SortOrder.DESC
    x = np.asarray(a, dtype=np.float64)
    rows = x.reshape(int(np.prod(x.shape[:-1])), x.shape[-1])
    out = np.argsort(-rows if descending else rows, axis=-1, kind="stable").astype(np.int32)
    ordered = np.sort(rows, axis=-1)
    special = np.isnan(rows).any(axis=-1) | (ordered[:, 1:] == ordered[:, :-1]).any(axis=-1)
    for r in np.nonzero(special)[0]:        # ties or NaN: the order is std::sort's own
        out[r] = std_sort_indices(rows[r], descending)
    return out.reshape(x.shape)


def op_mul_mat_id(as_, b, ids):
    """as_ (1, n_as, N, K), b (1, n_tokens, n_b1, K), ids (1, 1, n_tokens, n_ids) ->
    (1, n_tokens, n_ids, N): out[t, e] = as_[ids[t, e]] @ b[t, e % n_b1], grouped by expert as
    ggml's CPU kernel (one expert's weights in float64 at a time)."""
    as_ = np.asarray(as_)
    ids = np.asarray(ids)[0, 0].astype(np.int64)             # (n_tokens, n_ids)
    n_as, n_out = as_.shape[1], as_.shape[2]
    if ids.size and (ids.min() < 0 or ids.max() >= n_as):
        raise ReferenceError(f"MUL_MAT_ID: expert id out of range 0..{n_as - 1}")
    b = _f64(b)[0]                                           # (n_tokens, n_b1, K)
    rows = b[:, np.arange(ids.shape[1]) % b.shape[1], :]     # (n_tokens, n_ids, K)
    out = np.zeros(ids.shape + (n_out,))
    for expert in np.unique(ids):
        t, e = np.nonzero(ids == expert)
        out[t, e] = rows[t, e] @ _f64(as_[0, expert]).T
    return out[None]


def op_copy(src, shape: tuple):
    """CPY/DUP/CONT: src's elements in ggml order (ne0 fastest) laid into `shape`."""
    return np.asarray(src).reshape(shape)


# ---- dispatch: one entry per supported op --------------------------------------------------------
# Each entry: (node, src, fp, ip) -> result, with src(i) the decoded source i (None if absent), fp /
# ip the op_params as float32 / int32. Its keys are the ops the reference supports (SUPPORTED_OPS,
# the CPU slot of the graph splitter reads them); an op parameter it does not know is checked by
# supports().

_UNARY = {UnaryOp.SILU: _silu, UnaryOp.GELU: _gelu, UnaryOp.GELU_ERF: _gelu_erf,
          UnaryOp.TANH: _tanh}
_GLU_ACT = {GluOp.SWIGLU: _silu, GluOp.GEGLU: _gelu, GluOp.GEGLU_ERF: _gelu_erf}


def _unary(node, src, fp, ip):
    if int(ip[0]) not in _KNOWN_SUBOPS[Op.UNARY]:
        raise ReferenceError(f"unary op {ip[0]} is not known to the reference")
    return _UNARY[UnaryOp(int(ip[0]))](src(0))


def _glu(node, src, fp, ip):
    if int(ip[0]) not in _KNOWN_SUBOPS[Op.GLU]:
        raise ReferenceError(f"glu op {ip[0]} is not known to the reference")
    return op_glu(src(0), src(1), bool(ip[1]), int(ip[0]))


_COMPUTE = {
    Op.ADD: lambda node, src, fp, ip: op_add(src(0), src(1)),
    Op.MUL: lambda node, src, fp, ip: op_mul(src(0), src(1)),
    Op.SCALE: lambda node, src, fp, ip: op_scale(src(0), float(fp[0]), float(fp[1])),
    Op.RMS_NORM: lambda node, src, fp, ip: op_rms_norm(src(0), float(fp[0])),
    Op.MUL_MAT: lambda node, src, fp, ip: op_mul_mat(src(0), src(1)),
    Op.GET_ROWS: lambda node, src, fp, ip: op_get_rows(src(0), src(1)),
    Op.SET_ROWS: lambda node, src, fp, ip: op_set_rows(src(2), src(0), src(1)),
    Op.ROPE: lambda node, src, fp, ip: op_rope(src(0), src(1), src(2), int(ip[1]), int(ip[2]),
                                               int(ip[4]), *(float(x) for x in fp[5:11])),
    Op.SOFT_MAX: lambda node, src, fp, ip: op_soft_max(src(0), src(1), float(fp[0]), float(fp[1])),
    Op.FLASH_ATTN_EXT: lambda node, src, fp, ip: op_flash_attn_ext(
        src(0), src(1), src(2), src(3), float(fp[0]), float(fp[1]), float(fp[2])),
    Op.ARGMAX: lambda node, src, fp, ip: op_argmax(src(0)),
    Op.UNARY: _unary,
    Op.GLU: _glu,
    Op.ARGSORT: lambda node, src, fp, ip: op_argsort(src(0), int(ip[0])),
    Op.SUM_ROWS: lambda node, src, fp, ip: op_sum_rows(src(0)),
    Op.CLAMP: lambda node, src, fp, ip: op_clamp(src(0), float(fp[0]), float(fp[1])),
    Op.DIV: lambda node, src, fp, ip: op_div(src(0), src(1)),
    Op.MUL_MAT_ID: lambda node, src, fp, ip: op_mul_mat_id(src(0), src(1), src(2)),
    Op.CPY: lambda node, src, fp, ip: op_copy(src(0), np_shape(node)),
    Op.DUP: lambda node, src, fp, ip: op_copy(src(0), np_shape(node)),
    Op.CONT: lambda node, src, fp, ip: op_copy(src(0), np_shape(node)),
}

SUPPORTED_OPS = frozenset(_COMPUTE)
VIEW_OPS = frozenset({Op.VIEW, Op.RESHAPE, Op.PERMUTE, Op.TRANSPOSE})
# Tensor parallelism's collectives: their result depends on the other ranks' processes, which
# only a device with an HCCL communicator reaches (runner/tensor_parallel.py); the CPU has none.
COLLECTIVE_OPS = frozenset({Op.ALL_REDUCE, Op.ALL_GATHER})
_KNOWN_SUBOPS = {Op.UNARY: {int(op) for op in _UNARY}, Op.GLU: {int(op) for op in _GLU_ACT},
                 Op.ARGSORT: {int(order) for order in SortOrder}}


def supports(node: Tensor) -> bool:
    """True if compute_node computes this node (views and NONE have no compute: evaluate() reads
    them through their source)."""
    if node.op not in SUPPORTED_OPS:
        return False
    known = _KNOWN_SUBOPS.get(node.op)
    return known is None or int(params_i32(node)[0]) in known


def compute_node(node: Tensor, srcs: list) -> np.ndarray:
    """One node's result (numpy order, 4-d) from its sources' decoded values (`srcs[i]` for
    node.src[i], numpy order, 4-d; None for an absent optional source), rounded to node.type.
    SET_ROWS returns the whole updated destination; CPY the copied values."""
    op = node.op
    out_shape = np_shape(node)

    def src(i):
        return srcs[i] if i < len(srcs) else None

    compute = _COMPUTE.get(op)
    if compute is None:
        if op in VIEW_OPS or op == Op.NONE:
            raise ReferenceError(f"{op.name} has no compute: read it through evaluate()")
        raise ReferenceError(f"op {node.op_desc} is not known to the reference")
    fp, ip = params_f32(node), params_i32(node)
    result = np.asarray(compute(node, src, fp, ip))
    if result.shape != out_shape:
        raise ReferenceError(f"{node.op_desc}: computed shape {result.shape}, node has {out_shape}")
    return round_to(node.type, result)


def evaluate(graph, leaf_values: dict, memory: Memory | None = None) -> dict:
    """Run `graph` node by node. leaf_values maps leaf tensors (Tensor, or their name) to their
    storage arrays (as Tensor.get() returns them); leaves not given start as zero bytes.
    Returns {tensor: decoded values (numpy order, 4-d)} for every leaf and node, read after the
    whole graph ran (so a CPY or SET_ROWS target shows its final contents). A graph the
    scheduler has planned reads its splits' copies: a ReferenceError (evaluate it before)."""
    memory = memory if memory is not None else Memory()
    leaves = graph.leafs
    by_name = {t.name: t for t in leaves if t.name}
    for key, stored in leaf_values.items():
        tensor = by_name[key] if isinstance(key, str) else key
        memory.set_stored(storage_of(tensor), stored)
    nodes = graph.nodes
    held = {storage_of(t).address for t in leaves}     # memory this graph holds or computes
    for node in nodes:
        srcs = _sources(node)
        for s in srcs:
            if s is not None and storage_of(s).address not in held:
                raise ReferenceError(
                    f"evaluate(): node {node.name!r} ({Op(node.op).name}) reads {s.name!r}, which "
                    f"the graph neither holds as a leaf nor computes: a graph planned by the "
                    f"scheduler reads its splits' copies; evaluate the graph before planning it "
                    f"(or a fresh build)")
        held.add(storage_of(node).address)
        if node.op in VIEW_OPS:
            continue
        srcs = [memory.read(s) if s is not None else None for s in srcs]
        memory.write(node, compute_node(node, srcs))
    return {t: memory.read(t) for t in [*leaves, *nodes]}


def _sources(node: Tensor) -> list:
    """node.src with None for absent entries up to the last present one."""
    return node.sources
