"""Type numbers and sizes of the C core against gguf: GGUF tensor type ids map directly."""

import gguf
import numpy as np
import pytest


def test_every_c_type_matches_gguf_by_name(clm):
    for tensor_type in clm.TensorType:
        gguf_type = gguf.GGMLQuantizationType[tensor_type.name]
        assert int(tensor_type) == int(gguf_type), tensor_type.name


def test_c_type_names(clm):
    for tensor_type in clm.TensorType:
        # ggml's names: lower case, except the K of the K-quants ("q4_K")
        want = tensor_type.name.lower()
        if want.endswith("_k"):
            want = want[:-1] + "K"
        assert clm.type_name(tensor_type) == want


@pytest.mark.parametrize("name", ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q6_K",
                                  "I8", "I16", "I32", "I64", "F64"])
def test_block_and_type_sizes_match_gguf(clm, name):
    tensor_type = clm.TensorType[name]
    block_size, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[name]]
    assert clm.type_traits(tensor_type) == (block_size, type_size)


def test_all_c_types_have_gguf_sizes(clm):
    for tensor_type in clm.TensorType:
        expected = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[tensor_type.name]]
        assert clm.type_traits(tensor_type) == expected, tensor_type.name


def test_runtime_type_tables_match_gguf():
    """cann_llm.ggml_types (what the loader uses, so a load need not import gguf) holds gguf's
    value types, tensor types and block sizes, every one of them."""
    from cann_llm import ggml_types
    assert {t.name: int(t) for t in ggml_types.GGUFValueType} == \
        {t.name: int(t) for t in gguf.GGUFValueType}
    assert {t.name: int(t) for t in ggml_types.GGMLQuantizationType} == \
        {t.name: int(t) for t in gguf.GGMLQuantizationType}
    assert {int(k): v for k, v in ggml_types.GGML_QUANT_SIZES.items()} == \
        {int(k): v for k, v in gguf.GGML_QUANT_SIZES.items()}


def test_loading_a_model_does_not_import_gguf(default_model_path):
    """The gguf package (PyYAML, the writer, the tensor maps: ~60 ms, ~6 MiB) stays out of a
    process that loads a model and generates."""
    import subprocess
    import sys
    code = ("import sys, cann_llm\n"
            f"m = cann_llm.load({str(default_model_path)!r}, n_ctx=256, log=lambda s: None)\n"
            "list(m.generate([1, 2], max_tokens=2, temperature=0.0))\n"
            "print(sorted(k for k in sys.modules if k == 'gguf' or k.startswith('gguf.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_unknown_type_has_no_traits(clm):
    assert clm.type_traits(5) == (0, 0)   # 5 was Q4_2, removed from ggml
    assert clm.type_name(5) is None


def test_numpy_dtypes_have_the_type_size(clm):
    from cann_llm import dtypes
    for name, dtype in dtypes.NUMPY_DTYPE_BY_NAME.items():
        assert clm.type_traits(clm.TensorType[name]) == (1, dtype.itemsize), name


def test_bf16_bits_round_trip_and_round_to_nearest_even():
    from cann_llm import dtypes
    exact = np.array([0.0, 1.0, -2.5, 3.140625, 65536.0], dtype=np.float32)
    assert np.array_equal(dtypes.bf16_to_f32(dtypes.bf16_bits(exact)), exact)
    assert dtypes.bf16_bits(np.float32(1.0)) == 0x3F80
    halfway = np.array([1 + 2**-8, 1 + 3 * 2**-8], dtype=np.float32)   # ties go to the even bits
    assert dtypes.bf16_to_f32(dtypes.bf16_bits(halfway)).tolist() == [1.0, 1 + 2**-6]
