"""Corrupt weights: a NaN/inf in a scale, a min or a float element is a load error naming the tensor
and the first bad block; with the check off the NaN reaches the logits, which is an error naming
the position, and never a sampled token."""

import os
import subprocess
import sys

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as QT

from conftest import run_python
from tiny_models import write_tiny_model

BAD = {"nan": np.float16(np.nan), "inf": np.float16(np.inf), "-inf": np.float16(-np.inf)}


def tensor_info(path, name):
    """(type, ne, file offset) of tensor `name` in the GGUF file at `path`."""
    from cann_llm.loader import open_gguf
    gguf = open_gguf(path)
    info = gguf.tensors[name]
    out = info.type, tuple(info.ne), info.offset
    gguf.close()
    return out


def corrupt(path, name, byte_offset, raw: bytes):
    """Overwrite bytes of tensor `name` in the GGUF file at `path` (offset within its data)."""
    start = tensor_info(path, name)[2] + byte_offset
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(raw)


def block_offset(qtype, block: int, field: int) -> int:
    return block * GGML_QUANT_SIZES[QT(qtype)][1] + field


# (weight type, tensor, byte offset inside a block, width of the field, what the field is)
CASES = [
    (QT.Q4_1, "blk.0.attn_q.weight", 0, 2, "scale"),
    (QT.Q4_1, "blk.0.attn_q.weight", 2, 2, "min"),
    (QT.Q4_0, "blk.1.ffn_down.weight", 0, 2, "scale"),
    (QT.Q8_0, "blk.0.attn_v.weight", 0, 2, "scale"),
    (QT.Q4_K, "blk.0.ffn_up.weight", 2, 2, "dmin (converted to Q4_1 at load)"),
    (QT.Q6_K, "blk.1.attn_k.weight", 208, 2, "d (converted to Q8_0 at load)"),
]


@pytest.mark.parametrize("bad", ["nan", "inf"])
@pytest.mark.parametrize("qtype,name,field,width,what", CASES, ids=[f"{c[0].name}-{c[4].split()[0]}" for c in CASES])
def test_quantized_scale_is_a_load_error(tmp_path, qtype, name, field, width, what, bad):
    import cann_llm
    from cann_llm.loader import GGUFError
    n_embd = 256 if qtype in (QT.Q4_K, QT.Q6_K) else 64
    path = write_tiny_model(tmp_path / "m.gguf", weight_type=qtype, n_embd=n_embd, n_ff=256)
    ne = tensor_info(path, name)[1]
    per_row = ne[0] // GGML_QUANT_SIZES[qtype][0]
    block = per_row * 2 + (1 if per_row > 1 else 0)   # row 2: its second block if it has one
    corrupt(path, name, block_offset(qtype, block, field), BAD[bad].tobytes())
    with pytest.raises(GGUFError) as err:
        cann_llm.load(path, n_ctx=64)
    msg = str(err.value)
    assert str(path) in msg and repr(name) in msg, msg
    assert f"block {block} (row 2," in msg and "non-finite scale or min" in msg, msg
    assert "--no-check" in msg


@pytest.mark.parametrize("ttype,name", [(QT.F16, "blk.0.ffn_gate.weight"),
                                        (QT.F32, "blk.1.attn_norm.weight"),
                                        (QT.BF16, "blk.0.attn_output.weight")])
@pytest.mark.parametrize("bad", ["nan", "-inf"])
def test_float_element_is_a_load_error(tmp_path, ttype, name, bad):
    import cann_llm
    from cann_llm.loader import GGUFError
    path = write_tiny_model(tmp_path / "m.gguf", weight_type=ttype if ttype != QT.F32 else QT.F16)
    itype, ne, _ = tensor_info(path, name)
    index = ne[0] + 5 if len(ne) > 1 else 5      # row 1, column 5 (1-D: element 5)
    value = np.float32(BAD[bad])
    raw = {QT.F32: value.tobytes(), QT.F16: np.float16(value).tobytes(),
           QT.BF16: (value.view(np.uint32) >> 16).astype(np.uint16).tobytes()}[QT(itype)]
    corrupt(path, name, index * len(raw), raw)
    with pytest.raises(GGUFError) as err:
        cann_llm.load(path, n_ctx=64)
    msg = str(err.value)
    assert repr(name) in msg and f"element {index}" in msg, msg
    assert ("nan" if bad == "nan" else "-inf") in msg, msg
    # the check ran on loader threads while the graphs were planned: none of them is left
    import threading
    assert not [t for t in threading.enumerate() if t.name.startswith("cann-llm-load")]


def test_finite_weights_pass_and_the_scan_reports_first_index():
    from cann_llm import backend
    rng = np.random.default_rng(0)
    x = rng.standard_normal(4096).astype(np.float32)
    for ttype in (QT.F32, QT.F16, QT.BF16, QT.Q8_0, QT.Q4_0, QT.Q4_1):
        data = backend.quantize_f32(ttype, x)
        assert backend.find_nonfinite(ttype, data) == -1
    h = x.astype(np.float16)
    for i in (0, 63, 64, 1000, 4095):           # inside and outside the 64-wide fast loop
        y = h.copy()
        y[i] = np.nan
        y[-1] = np.inf
        assert backend.find_nonfinite(QT.F16, y) == min(i, 4095)
    q = backend.quantize_f32(QT.Q4_1, x).reshape(-1, 20).copy()
    q[7, 2:4] = np.frombuffer(np.float16(np.inf).tobytes(), np.uint8)   # block 7's min
    assert backend.find_nonfinite(QT.Q4_1, q) == 7
    with pytest.raises(backend.CannError):
        backend.find_nonfinite(QT.Q4_0, np.zeros(18, np.uint8), n_elements=31)


_SCAN_CASES = """
import json, numpy as np
from cann_llm import backend
from cann_llm.backend import TensorType as T
rng = np.random.default_rng(5)
out = []
for name, dtype in (("F32", np.float32), ("F16", np.float16), ("BF16", None)):
    for n in (1, 127, 128, 129, 1000, 4096, 4133):
        for at in sorted({0, 63, 64, 127, 128, 255, 256, n // 2, n - 1}):
            if at >= n:
                continue
            for bad in ("nan", "inf", "-inf", "max"):
                x = (100 * rng.standard_normal(n)).astype(np.float32)
                if bad != "max":
                    x[at] = float(bad)
                if dtype is None:   # bf16 bits; "max" is the largest finite bf16
                    bits = (x.view(np.uint32) >> 16).astype(np.uint16)
                    if bad == "max":
                        bits[at] = 0x7f7f
                    data, t = bits, T.BF16
                else:
                    data, t = x.astype(dtype), T[name]
                    if bad == "max":
                        data[at] = np.finfo(dtype).max
                out.append([name, n, at, bad, backend.find_nonfinite(t, data)])
print(json.dumps(out))
"""


def test_the_vector_and_portable_scans_find_the_same_first_bad_element():
    """find_nonfinite's AVX-512 loops (this machine, when it has them) and the portable ones
    (CANN_LLM_HOST_ISA=scalar) report the first NaN / inf wherever it lies against their
    256-byte steps, and never flag the largest finite value."""
    import json
    runs = [run_python(_SCAN_CASES, env=env) for env in (None, {"CANN_LLM_HOST_ISA": "scalar"})]
    for done in runs:
        assert done.returncode == 0, done.stderr
    vector, portable = (json.loads(done.stdout) for done in runs)
    assert vector == portable
    for name, n, at, bad, found in vector:
        assert found == (-1 if bad == "max" else at), (name, n, at, bad, found)


def test_unchecked_nan_weights_give_a_logits_error_not_a_token(tmp_path):
    import cann_llm
    path = write_tiny_model(tmp_path / "m.gguf", weight_type=QT.Q4_1)
    corrupt(path, "blk.1.ffn_down.weight", 0, np.full(1, np.nan, np.float16).tobytes())
    model = cann_llm.load(path, n_ctx=64, check_weights=False)
    try:
        with pytest.raises(cann_llm.NonFiniteLogitsError) as err:
            model.logits([1, 2, 3])
        assert "position 0 (sequence 0)" in str(err.value) and "cann-llm diff" in str(err.value)
        with pytest.raises(cann_llm.NonFiniteLogitsError):
            list(model.generate([1, 2, 3], max_tokens=4, temperature=0))
    finally:
        model.close()


def test_sampler_refuses_nan():
    from cann_llm.sampler import Sampler
    logits = np.zeros(10, np.float32)
    logits[3] = np.nan
    for temp in (0.0, 0.8):
        with pytest.raises(ValueError, match="NaN"):
            Sampler(temperature=temp, seed=1).sample(logits)
    ok = np.zeros(10, np.float32)
    ok[4] = -np.inf                              # a banned token is fine
    assert Sampler(temperature=0.0).sample(ok) == 0


def _cli(*args):
    exe = os.path.join(os.path.dirname(sys.executable), "cann-llm")
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def test_cli_run_on_a_corrupt_file(tmp_path):
    path = write_tiny_model(tmp_path / "m.gguf", weight_type=QT.Q4_1)
    corrupt(path, "blk.0.attn_q.weight", 0, np.full(1, np.nan, np.float16).tobytes())
    r = _cli("run", str(path), "--raw", "-p", "hello", "-n", "4", "-c", "64")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "blk.0.attn_q.weight" in r.stderr and "block 0" in r.stderr, r.stderr
    corrupt(path, "blk.1.ffn_down.weight", 0, np.full(1, np.nan, np.float16).tobytes())
    r = _cli("run", str(path), "--raw", "-p", "hello", "-n", "4", "-c", "64", "--no-check")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "NaN/inf" in r.stderr and "cann-llm diff" in r.stderr, r.stderr
