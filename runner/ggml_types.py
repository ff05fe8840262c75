"""GGUF's value types and ggml's tensor types (numbers, names, block and type sizes in bytes): what
the loader needs of the gguf package, without importing it when a model loads (its import brings
PyYAML, the GGUF writer and the tensor-name maps: ~60 ms and ~6 MiB of a process).
tests/test_types.py checks these against gguf; the C core's own types are cann_llm.backend.TensorType.
"""

from enum import IntEnum

__all__ = ["GGUFValueType", "GGMLQuantizationType", "GGML_QUANT_SIZES"]


class GGUFValueType(IntEnum):
    """The type of a GGUF metadata value."""
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


class GGMLQuantizationType(IntEnum):
    """A tensor type id as GGUF files store it (ggml's enum ggml_type)."""
    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39
    NVFP4 = 40
    Q1_0 = 41


_T = GGMLQuantizationType
# type -> (elements per block, bytes per block)
GGML_QUANT_SIZES = {
    _T.F32: (1, 4),
    _T.F16: (1, 2),
    _T.Q4_0: (32, 18),
    _T.Q4_1: (32, 20),
    _T.Q5_0: (32, 22),
    _T.Q5_1: (32, 24),
    _T.Q8_0: (32, 34),
    _T.Q8_1: (32, 40),
    _T.Q2_K: (256, 84),
    _T.Q3_K: (256, 110),
    _T.Q4_K: (256, 144),
    _T.Q5_K: (256, 176),
    _T.Q6_K: (256, 210),
    _T.Q8_K: (256, 292),
    _T.IQ2_XXS: (256, 66),
    _T.IQ2_XS: (256, 74),
    _T.IQ3_XXS: (256, 98),
    _T.IQ1_S: (256, 50),
    _T.IQ4_NL: (32, 18),
    _T.IQ3_S: (256, 110),
    _T.IQ2_S: (256, 82),
    _T.IQ4_XS: (256, 136),
    _T.I8: (1, 1),
    _T.I16: (1, 2),
    _T.I32: (1, 4),
    _T.I64: (1, 8),
    _T.F64: (1, 8),
    _T.IQ1_M: (256, 56),
    _T.BF16: (1, 2),
    _T.TQ1_0: (256, 54),
    _T.TQ2_0: (256, 66),
    _T.MXFP4: (32, 17),
    _T.NVFP4: (64, 36),
    _T.Q1_0: (128, 18),
}
