"""The op checker (`cann-llm test-ops`): the full case list passes on the device (every case OK,
or `not supported` for exactly the cases declined by design), and the checker detects problems: a wrong reference, a perturbed device
output, a guard overwrite, NaN/inf, a device error. Console, csv and json outputs parse.
"""

import csv
import io
import json
import subprocess
import sys

import numpy as np
import pytest

from cann_llm import reference as ref
from cann_llm.tools import opcheck


def run_checker(*args, **kwargs) -> tuple[int, str]:
    out = io.StringIO()
    status = opcheck.run(*args, out=out, **kwargs)
    return status, out.getvalue()


def case_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()
            if line.startswith("  ") and "(" in line and line.rstrip().endswith(
                (": OK", "]")) or " FAIL " in line]


# The cases CANN declines by design (the CPU reference runs them): an I32 table for GET_ROWS, F32
# K/V and a logit softcap for FLASH_ATTN_EXT (FusedInferAttentionScore has neither), an INT4 weight
# of one row (WeightQuantBatchMatmulV2 reads a (K, 1) chunk as contiguous, innermost dim odd; for
# MUL_MAT and MUL_MAT_ID alike), MUL_MAT_ID's b with neither one row nor one per selected expert,
# and CLAMP with min > max (ggml gives min, aclnnClamp would give max). A new entry here is a
# decision, not an accident.
DECLINED = {
    "GET_ROWS(type=i32,n=8,m=10,r=4,b=2)",
    "MUL_MAT(type_a=q4_0,type_b=f32,m=1,n=64,k=256,bs=[1,1],nr=[1,1])",
    "MUL_MAT(type_a=q4_1,type_b=f32,m=1,n=64,k=256,bs=[1,1],nr=[1,1])",
    "FLASH_ATTN_EXT(hs=64,nh=4,nh_kv=4,kv=113,nb=7,mask=1,max_bias=0,softcap=0,type_kv=f32)",
    "FLASH_ATTN_EXT(hs=64,nh=4,nh_kv=4,kv=113,nb=7,mask=1,max_bias=0,softcap=30,type_kv=f16)",
    "MUL_MAT_ID(type_a=f16,type_b=f32,n=16,k=64,n_as=8,n_ids=4,n_tokens=2,n_b1=2,ids=perm)",
    "MUL_MAT_ID(type_a=q4_0,type_b=f32,n=1,k=64,n_as=4,n_ids=2,n_tokens=2,n_b1=1,ids=perm)",
    "CLAMP(type=f32,ne=[10,5,1,1],min=1,max=-1)",
}


def test_full_case_list_passes():
    cases = opcheck.make_cases()
    assert 250 <= len(cases) <= 750, len(cases)
    names = [case.name for case in cases]
    assert len(set(names)) == len(names), "case strings must be unique (-o picks one)"
    status, text = run_checker()
    failing = [line for line in text.splitlines() if ": FAIL" in line]
    assert status == 0 and not failing, "\n".join(failing) or text[-3000:]
    verdicts = [line for line in text.splitlines() if line.startswith("  ") and "): " in line]
    assert len(verdicts) == len(cases)
    declined = {line.strip().split(": not supported [")[0] for line in verdicts
                if ": not supported [" in line}
    assert all(line.endswith(": OK") or ": not supported [" in line for line in verdicts)
    assert declined == DECLINED, declined ^ DECLINED
    assert "Backend CANN0: OK" in text and text.rstrip().endswith("OK")


@pytest.mark.parametrize("path", ["gather", "routed"])
def test_mul_mat_id_cases_pass_with_either_composition(monkeypatch, path):
    """Every MUL_MAT_ID case against the reference with the composition forced
    (CANN_LLM_MUL_MAT_ID, read when the checker creates its backend): the same verdicts."""
    monkeypatch.setenv("CANN_LLM_MUL_MAT_ID", path)
    cases = opcheck.select_cases(opcheck.make_cases(), ["MUL_MAT_ID"], None)
    status, text = run_checker(cases=cases)
    verdicts = [line for line in text.splitlines() if line.startswith("  ") and "): " in line]
    assert status == 0 and len(verdicts) == len(cases), text[-3000:]
    declined = {line.strip().split(": not supported [")[0] for line in verdicts if ": not supported [" in line}
    assert declined == {name for name in DECLINED if name.startswith("MUL_MAT_ID")}


def test_case_list_covers_the_llm_ops():
    ops = {case.op for case in opcheck.make_cases()}
    assert ops >= {"ADD", "MUL", "SCALE", "RMS_NORM", "MUL_MAT", "GET_ROWS", "SET_ROWS", "CPY",
                   "DUP", "CONT", "ROPE", "SOFT_MAX", "FLASH_ATTN_EXT", "SWIGLU", "SILU",
                   "ARGMAX", "GELU", "GELU_ERF", "TANH", "GEGLU", "GEGLU_ERF", "MUL_MAT_ID", "ARGSORT",
                   "SUM_ROWS", "CLAMP", "DIV"}
    vars_ = [case.vars for case in opcheck.make_cases()]
    for needle in ("type_a=q4_0", "type_a=q4_1", "type_a=q8_0", "type_a=bf16", "m=151936",
                   "per=[0,2,1,3]", "nh=14,nh_kv=2", "nh=9,nh_kv=3", "hs=128", "softcap=30",
                   "ext_factor=1", "ff=1", "mask=f16", "max_bias=8", "type_idx=i64",
                   "type_dst=q8_0", "type_dst=q4_0", "values=ties", "n=8229", "n=4192"):
        assert any(needle in v for v in vars_), needle


def test_filters_by_op_exact_case_and_regex():
    cases = opcheck.make_cases()
    rope = opcheck.select_cases(cases, ["ROPE"], None)
    assert rope and all(c.op == "ROPE" for c in rope)
    exact = cases[3].name
    assert [c.name for c in opcheck.select_cases(cases, [exact], None)] == [exact]
    q4 = opcheck.select_cases(cases, ["MUL_MAT"], r"type_a=q4_0")
    assert q4 and all("type_a=q4_0" in c.vars for c in q4)
    assert opcheck.split_ops(f"ADD,{exact},SILU") == ["ADD", exact, "SILU"]


def _add_case():
    return [c for c in opcheck.make_cases() if c.op == "ADD"][:2]


def test_wrong_reference_fails(monkeypatch):
    monkeypatch.setattr(ref, "op_add", lambda a, b: np.asarray(a, np.float64) + 1e-3)
    status, text = run_checker(cases=_add_case())
    assert status == 1
    assert text.count(": FAIL [ADD] NMSE = ") == 2 and "Backend CANN0: FAIL" in text
    assert "0/2 tests passed" in text and text.rstrip().endswith("FAIL")


class PerturbingChecker(opcheck.Checker):
    """Adds a small error to one element of every device output."""

    def __init__(self, device, seed=0, change=None):
        super().__init__(device, seed=seed)
        self.outputs_hook = change or self._perturb

    @staticmethod
    def _perturb(case, node, values):
        values = np.array(values, dtype=np.float64)
        values.reshape(-1)[0] += 0.5
        return values


@pytest.mark.parametrize("change,message", [
    (None, "NMSE = "),
    (lambda case, node, v: np.where(np.arange(v.size).reshape(v.shape) == 3, np.nan, v), "NaN at index 3"),
    (lambda case, node, v: np.where(np.arange(v.size).reshape(v.shape) == 1, np.inf, v), "inf mismatch at index 1"),
])
def test_perturbed_device_output_fails(change, message):
    status, text = run_checker(cases=_add_case(),
                               checker_factory=lambda d, seed: PerturbingChecker(d, seed, change))
    assert status == 1 and message in text, text


def test_exact_ops_catch_one_ulp():
    cpy = [c for c in opcheck.make_cases() if c.op == "CPY" and "type_src=f32,type_dst=f32" in c.vars][:1]

    def one_ulp(case, node, values):
        values = np.array(values, dtype=np.float32)
        values.reshape(-1)[5] = np.nextafter(values.reshape(-1)[5], np.float32(np.inf))
        return values
    status, text = run_checker(cases=cpy, checker_factory=lambda d, seed: PerturbingChecker(d, seed, one_ulp))
    assert status == 1 and "not bit-exact: 1 of" in text, text


def test_guard_overwrite_fails():
    class Overwriting(opcheck.Checker):
        def __init__(self, device, seed=0):
            super().__init__(device, seed=seed)

            def scribble(case, canvas, layout):
                tensor, offset, size = layout[-1]     # the result: one byte past its end
                byte = np.frombuffer(bytes(1), dtype=np.int8).copy()
                from cann_llm.backend import ffi, lib, check
                check(lib.clm_tensor_get(canvas.c, ffi.from_buffer(byte), offset + size, 1))
                byte ^= 0x5A
                check(lib.clm_tensor_set(canvas.c, ffi.from_buffer(byte), offset + size, 1))
            self.after_compute_hook = scribble
    status, text = run_checker(cases=_add_case()[:1], checker_factory=Overwriting)
    assert status == 1 and "guard bytes overwritten: 1 bytes" in text, text


def test_device_error_is_a_fail_and_the_run_goes_on():
    from cann_llm.backend import CannError

    class Failing(opcheck.Checker):
        calls = 0

        def _run(self, case, *args):
            Failing.calls += 1
            if Failing.calls == 1:
                raise CannError(4, "aclrtSynchronizeStream: out-of-bounds read of tensor 'x'")
            return super()._run(case, *args)
    status, text = run_checker(cases=_add_case(), checker_factory=Failing)
    assert status == 1
    assert "FAIL device error: ERR_DEVICE: aclrtSynchronizeStream: out-of-bounds" in text
    assert "1/2 tests passed" in text


def test_declined_case_is_not_supported_and_not_a_failure():
    softcap = [c for c in opcheck.make_cases() if "softcap=30" in c.vars]
    status, text = run_checker(cases=softcap)
    assert status == 0 and ": not supported [CANN0]" in text and "0/0 tests passed" in text


def test_json_and_csv_outputs_parse():
    cases = _add_case() + [c for c in opcheck.make_cases() if "softcap=30" in c.vars]
    status, text = run_checker(cases=cases, output="json")
    data = json.loads(text)
    assert status == 0 and data["ok"] is True and len(data["results"]) == 3
    first = data["results"][0]
    assert first["op"] == "ADD" and first["passed"] is True and first["backend"] == "CANN0"
    assert first["nmse"] <= first["threshold"]
    assert data["results"][2]["supported"] is False and data["results"][2]["passed"] is None
    status, text = run_checker(cases=cases, output="csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["case"] for r in rows] == [c.name for c in cases]
    assert rows[0]["passed"] == "True" and rows[2]["supported"] == "False"


def test_support_mode_lists_every_case():
    cases = _add_case() + [c for c in opcheck.make_cases() if "softcap=30" in c.vars]
    status, text = run_checker("support", cases=cases)
    assert status == 0
    assert f"{cases[0].name}: yes [ADD:f32,f32->f32]" in text
    assert f"{cases[2].name}: no [" in text and "2/3 cases supported" in text


def test_seed_makes_inputs_reproducible():
    case = _add_case()[:1]
    outs = []
    for seed in (1, 1, 2):
        status, text = run_checker(cases=case, output="json", seed=seed)
        outs.append(json.loads(text)["results"][0]["nmse"])
    assert status == 0 and outs[0] == outs[1]


def test_thresholds():
    cases = {c.op: c for c in opcheck.make_cases()}
    assert opcheck.OP_NMSE["MUL_MAT"] == 5e-4 and opcheck.OP_NMSE["SOFT_MAX"] == 1e-6
    assert opcheck.DEFAULT_NMSE == 1e-7 and "ARGMAX" in opcheck.EXACT_OPS
    assert cases  # the table is used through nmse_threshold in every run above


def test_compare_rules():
    e = np.array([1.0, -np.inf, 2.0])
    assert opcheck.compare(e, e.copy(), 1e-7)[0] == ""
    assert "inf mismatch" in opcheck.compare(e, np.array([1.0, np.inf, 2.0]), 1e-7)[0]
    assert "NaN at index 2" in opcheck.compare(e, np.array([1.0, -np.inf, np.nan]), 1e-7)[0]
    assert opcheck.compare(np.zeros(3), np.zeros(3), 0.0) == ("", 0.0)
    reason, nmse = opcheck.compare(np.array([1.0, 1.0]), np.array([1.0, 1.1]), 1e-3)
    assert reason.startswith("NMSE = ") and nmse == pytest.approx(0.005)


@pytest.mark.slow
def test_cli_subcommand():
    result = subprocess.run([sys.executable, "-m", "cann_llm.cli", "test-ops", "-o", "SCALE,ARGMAX",
                             "--output", "json"], capture_output=True, text=True, timeout=300,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert {r["op"] for r in data["results"]} == {"SCALE", "ARGMAX"}
    bad = subprocess.run([sys.executable, "-m", "cann_llm.cli", "test-ops", "-b", "CANN9"],
                         capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert bad.returncode == 1 and "no device named CANN9" in bad.stderr


def test_reference_evaluates_every_case():
    """Every case, including those the device declines today, runs in the reference without
    NaN, so a device implementation that lands is compared against a working reference."""
    from cann_llm import backend as clm
    for index, case in enumerate(opcheck.make_cases()):
        with clm.Context(256) as ctx:
            builder = opcheck.Builder(ctx)
            graph = opcheck.Checker._graph(ctx, case, builder)
            rng = np.random.default_rng(index)
            leaves = {item.tensor: ref.encode(item.tensor.type, item.init(rng)).reshape(
                item.tensor.shape) for item in builder.inputs}
            values = ref.evaluate(graph, leaves)
            for node in opcheck._compute_nodes(graph):
                assert not np.isnan(values[node]).any(), case.name
                assert values[node].shape == tuple(reversed(node.ne)), case.name
