"""Element types between the C core and numpy: which numpy dtype holds each clm_type.

The type numbers themselves come from the C header (cann_llm.backend.TensorType, derived from the
cffi declarations); they equal ggml's and gguf.GGMLQuantizationType's. Quantized types have no
numpy dtype: their data moves as raw bytes (uint8), whole blocks per row.
"""

import numpy as np

# By type name (TensorType member name). BF16 has no numpy dtype: its bits travel as uint16.
NUMPY_DTYPE_BY_NAME = {
    "F32": np.dtype(np.float32),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(np.uint16),
    "F64": np.dtype(np.float64),
    "I8": np.dtype(np.int8),
    "I16": np.dtype(np.int16),
    "I32": np.dtype(np.int32),
    "I64": np.dtype(np.int64),
}

RAW_BYTES = np.dtype(np.uint8)


def numpy_dtype(type_name: str) -> np.dtype:
    """The dtype of a tensor's elements, or uint8 (raw blocks) for quantized types."""
    return NUMPY_DTYPE_BY_NAME.get(type_name, RAW_BYTES)


def is_plain(type_name: str) -> bool:
    """True if one element is one numpy scalar (not a quantized block)."""
    return type_name in NUMPY_DTYPE_BY_NAME


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 values -> bfloat16 bit patterns (round to nearest even), as uint16."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounding = ((bits >> 16) & 1) + 0x7FFF
    return ((bits + rounding) >> 16).astype(np.uint16)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> float32 values."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
