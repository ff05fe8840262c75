"""clm_convert / clm_quantize_f32 / clm_dequantize_f32 against gguf.quants."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT, quants

from tiny_models import random_blocks

DEQUANT_TYPES = [QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0, QT.Q2_K, QT.Q3_K, QT.Q4_K,
                 QT.Q5_K, QT.Q6_K, QT.BF16]
QUANT_TYPES = [QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.F16, QT.BF16, QT.F32]


@pytest.fixture(scope="module")
def B():
    from cann_llm import backend
    return backend


def _values(rng, n):
    x = rng.standard_normal(n).astype(np.float32) * 2
    x[:32] = 0.0                       # a zero block: d = 0
    x[32:64] = 1.5                     # a constant block
    x[64:96] = np.linspace(-1, 1, 32)  # ties in the rounding
    x[96:98] = [65519.0, 1e-7]         # f16 rounding edges (inf boundary, subnormal)
    return x


@pytest.mark.parametrize("qtype", DEQUANT_TYPES)
def test_dequantize_matches_gguf(B, qtype):
    rng = np.random.default_rng(int(qtype))
    n = 256 * 24
    raw = random_blocks(qtype, n, rng) if qtype != QT.BF16 else \
        quants.quantize(rng.standard_normal(n).astype(np.float32), QT.BF16).view(np.uint8)
    ref = quants.dequantize(raw, qtype).reshape(-1)
    assert np.array_equal(B.dequantize_f32(qtype, raw), ref)


@pytest.mark.parametrize("qtype", QUANT_TYPES)
def test_quantize_bit_exact(B, qtype):
    rng = np.random.default_rng(7)
    x = _values(rng, 32 * 200)
    ref = quants.quantize(x, qtype).view(np.uint8).reshape(-1)
    assert np.array_equal(B.quantize_f32(qtype, x), ref)


def test_q4_k_to_q4_1_sub_blocks(B):
    """Each Q4_K sub-block becomes one Q4_1 block: same nibbles, fp16 d*sc and -dmin*m."""
    rng = np.random.default_rng(1)
    n = 256 * 64
    raw = random_blocks(QT.Q4_K, n, rng)
    q41 = B.convert(QT.Q4_K, raw, QT.Q4_1)
    assert q41.nbytes == n // 32 * 20
    ref = quants.dequantize(raw, QT.Q4_K).reshape(-1)
    got = quants.dequantize(q41, QT.Q4_1).reshape(-1)
    # only the fp16 rounding of the two block constants: 2^-11 relative of scale and min terms
    scale = np.abs(ref).reshape(-1, 32).max(axis=1, keepdims=True) + 1e-30
    assert np.all(np.abs(got - ref).reshape(-1, 32) <= scale * 2.0 ** -10)
    # the generic path (dequantize + requantize) is worse than the direct mapping
    generic = quants.dequantize(B.quantize_f32(QT.Q4_1, ref), QT.Q4_1).reshape(-1)
    assert np.abs(got - ref).max() < np.abs(generic - ref).max()


def test_q5_0_to_q8_0_is_exact(B):
    """Q5_0's quants minus 16 fit Q8_0's int8 with the same fp16 scale: the same values, where
    requantizing the dequantized values would round them to a new scale."""
    rng = np.random.default_rng(5)
    n = 32 * 512
    raw = random_blocks(QT.Q5_0, n, rng)
    q8 = B.convert(QT.Q5_0, raw, QT.Q8_0)
    assert q8.nbytes == n // 32 * 34
    ref = quants.dequantize(raw, QT.Q5_0).reshape(-1)
    assert np.array_equal(quants.dequantize(q8, QT.Q8_0).reshape(-1), ref)
    assert np.array_equal(q8.reshape(-1, 34)[:, :2], raw.reshape(-1, 22)[:, :2])   # the scales
    blocks = raw.reshape(-1, 22)      # the quants, byte for byte: q - 16 as int8
    qh = blocks[:, 2:6].copy().view("<u4")[:, 0]
    high = (qh[:, None] >> np.arange(32, dtype=np.uint32)) & 1
    qs = blocks[:, 6:]
    q = np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.int16) + 16 * high.astype(np.int16)
    assert np.array_equal(q8.reshape(-1, 34)[:, 2:].view(np.int8), (q - 16).astype(np.int8))
    requantized = quants.dequantize(quants.quantize(ref, QT.Q8_0), QT.Q8_0).reshape(-1)
    assert not np.array_equal(requantized, ref)


@pytest.mark.parametrize("src", [QT.Q6_K, QT.Q5_K, QT.Q5_1, QT.Q3_K, QT.Q2_K])
def test_to_q8_0_within_one_step(B, src):
    rng = np.random.default_rng(int(src) + 100)
    n = 256 * 16
    raw = random_blocks(src, n, rng)
    q8 = B.convert(src, raw, QT.Q8_0)
    ref = quants.dequantize(raw, src).reshape(-1)
    got = quants.dequantize(q8, QT.Q8_0).reshape(-1)
    # half a step from rounding, plus the fp16 rounding of the block scale: within one step
    # (plus 127 fp16 subnormal quanta where the scale itself is below fp16's normal range)
    step = np.abs(ref).reshape(-1, 32).max(axis=1, keepdims=True) / 127
    assert np.all(np.abs(got - ref).reshape(-1, 32) <= step + 127 * 2.0 ** -24)
    # and exactly what quantizing the dequantized values gives
    assert np.array_equal(q8, quants.quantize(ref, QT.Q8_0).reshape(-1))


def test_same_type_is_a_copy(B):
    raw = random_blocks(QT.Q4_K, 512, np.random.default_rng(0))
    assert np.array_equal(B.convert(QT.Q4_K, raw, QT.Q4_K), raw)


def test_errors(B):
    x = np.zeros(48, dtype=np.float32)
    with pytest.raises(B.CannError, match="whole number of q8_0 blocks"):
        B.quantize_f32(QT.Q8_0, x)
    with pytest.raises(B.CannError, match="cannot quantize to type q4_K"):
        B.quantize_f32(QT.Q4_K, np.zeros(256, dtype=np.float32))
    with pytest.raises(B.CannError, match="no conversion from q8_0 to q6_K"):
        B.convert(QT.Q8_0, np.zeros(34, dtype=np.uint8), QT.Q6_K, n_elements=32)
    assert not B.convert_supported(QT.IQ2_XS, QT.Q8_0)
    assert B.convert_supported(QT.Q6_K, QT.Q8_0) and B.convert_supported(QT.Q4_K, QT.Q4_1)


_ISA_SCRIPT = """
import sys, numpy as np
sys.path.insert(0, sys.argv[1])
from cann_llm import backend as B
from test_convert import _isa_outputs
np.savez(sys.argv[3], **_isa_outputs(B, dict(np.load(sys.argv[2]))))
"""

# fp16 bit patterns for block scales and mins: zeros, subnormals, the normal edges, a tie maker
# (1 + 2^-10: times 3 lies halfway between two fp16 values), the largest finite (times a 6-bit
# scale: overflow to inf), infinities, signalling / quiet / payload NaNs of both signs
_F16_EDGES = np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0x3C01, 0x7BFF,
                       0xFBFF, 0x7C00, 0xFC00, 0x7C01, 0x7E00, 0xFD55, 0x1234], np.uint16)


def _isa_inputs(rng) -> dict:
    x = _values(rng, 32 * 403)                                # 403 blocks: a tail after 16s
    special = np.array([np.nan, np.inf, -np.inf, 3e38, -3e38, -0.0, 1e-45, -1e-40, 0.5, -0.5,
                        2.5, -2.5, 127.5, 1e30, np.float32(np.nan), 7.0], np.float32)
    for k, start in enumerate(range(128, 32 * 300, 96)):     # specials spread over many blocks
        x[start:start + 4] = special[(k * 4) % 16:(k * 4) % 16 + 4]
    x[3200:3232] = -0.0                                       # an all -0 block
    x[3232:3264] = -1e-40                                     # scale subnormal in f32
    x[3264:3296] = rng.random(32, np.float32) * 127 * 2.0 ** -25
    x[3264] = 127 * 2.0 ** -25                                # scale half fp16's least: tie to 0
    x[3296:3328] = 381 * 2.0 ** -25                           # 1.5 x the least: tie to 2 x
    q6k = rng.integers(0, 256, 210 * 67, dtype=np.uint8)      # random bytes: any scale; 67
    # super-blocks: the generic path's last chunk is not a multiple of 16 Q8_0 blocks
    q6k[:210 * 16] = random_blocks(QT.Q6_K, 256 * 16, rng)
    # Q5_0: sane blocks, random bytes (any scale), every edge scale with qh all clear / all set
    q5 = rng.integers(0, 256, (512 + 256 + 32, 22), dtype=np.uint8)
    q5[:512] = random_blocks(QT.Q5_0, 32 * 512, rng).reshape(-1, 22)
    q5[768:, :2] = np.tile(_F16_EDGES, 2).view(np.uint8).reshape(-1, 2)
    q5[768:784, 2:6], q5[784:, 2:6] = 0, 0xFF
    # Q4_K: sane super-blocks, random bytes, and every (d, dmin) pair of edge values with random
    # 6-bit scales and mins (0 included: inf * 0) or all of them 63
    grid = np.stack(np.meshgrid(_F16_EDGES, _F16_EDGES, indexing="ij"), -1).reshape(-1, 2)
    q4k = rng.integers(0, 256, (64 + 64 + 2 * len(grid), 144), dtype=np.uint8)
    q4k[:64] = random_blocks(QT.Q4_K, 256 * 64, rng).reshape(-1, 144)
    q4k[128:, :4] = np.tile(grid, (2, 1)).view(np.uint8)
    q4k[128 + len(grid):, 4:16] = 0xFF
    return {"x": x, "q6k": q6k, "q5_0": q5.reshape(-1), "q4k": q4k.reshape(-1)}


def _isa_outputs(B, inp: dict) -> dict:
    """What the vector forms compute, as bytes (run in this process and under CANN_LLM_HOST_ISA)."""
    return {
        "quant_q8_0": B.quantize_f32(QT.Q8_0, inp["x"]),
        "deq_q6_k": B.dequantize_f32(QT.Q6_K, inp["q6k"]).view(np.uint32),
        "q6_k_to_q8_0": B.convert(QT.Q6_K, inp["q6k"], QT.Q8_0),
        "q5_0_to_q8_0": B.convert(QT.Q5_0, inp["q5_0"], QT.Q8_0),
        "q4_k_to_q4_1": B.convert(QT.Q4_K, inp["q4k"], QT.Q4_1),
    }


def test_vector_and_scalar_forms_give_the_same_bytes(B, tmp_path):
    """The AVX-512 loops (Q8_0 quantizer, Q6_K dequantizer, the direct Q5_0 -> Q8_0 and Q4_K ->
    Q4_1 conversions) against the scalar ones (CANN_LLM_HOST_ISA=scalar, in a subprocess): the
    same bytes on NaN, inf, huge values, signed zeros, subnormals, ties, and on blocks of random
    bytes (NaN/inf/subnormal scales and mins too)."""
    import os
    import pathlib
    import subprocess
    import sys
    inp = _isa_inputs(np.random.default_rng(11))
    np.savez(tmp_path / "in.npz", **inp)
    env = {**os.environ, "CANN_LLM_HOST_ISA": "scalar"}
    subprocess.run([sys.executable, "-c", _ISA_SCRIPT, str(pathlib.Path(__file__).parent),
                    str(tmp_path / "in.npz"), str(tmp_path / "out.npz")], env=env, check=True)
    scalar = np.load(tmp_path / "out.npz")
    for name, got in _isa_outputs(B, inp).items():
        assert np.array_equal(got, scalar[name]), name
