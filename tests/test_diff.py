"""The tensor diff tool (cann_llm.tools.diff, `cann-llm diff`) and the eval callback it rides on:
the callback's record, isolated and chained diffs (default model CANN0 vs CPU clean in both
modes), a backend with one wrong op named by isolated mode, dumps and --compare, --print,
filters, thresholds, exit codes and one-line errors (tiny models for the CLI)."""

import json
import re

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from tiny_models import write_tiny_model

PROMPT = "The capital of France is"
LAYER0 = ["inp_embd", "norm-0", "attn_norm-0", "Qcur-0", "Kcur-0", "Vcur-0", "k_store-0",
          "v_store-0", "__fattn__-0", "attn_out-0", "ffn_inp-0", "ffn_norm-0", "ffn_gate-0",
          "ffn_up-0", "ffn_swiglu-0", "ffn_out-0", "l_out-0"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("diff") / "tiny.gguf", weight_type=QT.Q8_0)


@pytest.fixture(scope="module")
def default_models(default_model_path):
    import cann_llm
    # unfused, as `cann-llm diff` loads them: the nodes are llama.cpp's (LAYER0)
    kw = dict(n_ctx=256, log=lambda m: None, fuse_weights=False)
    a = cann_llm.load(default_model_path, device="CANN0", **kw)
    b = cann_llm.load(default_model_path, device="CPU", **kw)
    yield a, b
    a.close()
    b.close()


def _cli(argv, capsys):
    from cann_llm import cli
    try:
        rc = cli.main(["diff", *argv])
    except SystemExit as exc:          # argparse errors (one line, status 1)
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


def _rows(out: str) -> list[list[str]]:
    """Table rows of `cann-llm diff` output: [index, name, op, ..., mark]."""
    return [line.split() for line in out.splitlines() if re.match(r"^\d+\s+\S+\s+[A-Z_]+\s", line)]


# ---- the eval callback ---------------------------------------------------------------------------

def test_callback_record_sources_write_and_stop(tiny):
    import cann_llm
    with cann_llm.load(tiny, device="CANN0", n_ctx=64, log=lambda m: None) as m:
        ids = m.tokenize("hello world")
        plain = m.logits(ids)
        seen = {}

        def cb(name, op, ttype, ne, data, info):
            assert data.shape == tuple(reversed(ne[:info.node.n_dims]))
            assert (info.name, info.op, info.type, info.ne) == (name, op, ttype, ne)
            seen.setdefault(name, (op, info.src_names, info.sources(), data.copy()))
            return True

        np.testing.assert_array_equal(m.logits(ids, eval_callback=cb), plain)
        op, srcs, values, data = seen["attn_norm-0"]
        assert op == "MUL" and srcs == ["norm-0", "blk.0.attn_norm.weight"]
        np.testing.assert_allclose((values[0] * values[1]).reshape(data.shape), data, rtol=1e-6)
        assert seen["__fattn__-0"][1][0] == "Qcur-0 (permuted)"
        assert seen["__fattn__-0"][1][1:] == ["k-0", "v-0", "kq_mask"]
        assert seen["result_output"][1] == ["token_embd.weight", "result_norm"]

        # five-argument callbacks still work, and False stops the run
        names = []
        assert m.logits(ids, eval_callback=lambda n, *a: names.append(n) or n != "Qcur-0") is None
        assert names[-1] == "Qcur-0" and "__fattn__-0" not in names

        # write(): later nodes compute from the written values
        def zero(name, op, ttype, ne, data, info):
            if name == "attn_norm-0":
                info.write(np.zeros_like(data))
            if name == "Kcur-0" and op == "MUL_MAT":
                assert not np.any(data)
            return True
        assert not np.array_equal(m.logits(ids, eval_callback=zero), plain)


# ---- the default model: CANN0 vs CPU clean in both modes, one wrong op named ---------------------

def test_default_model_isolated_clean(default_models):
    from cann_llm.tools import diff
    a, _ = default_models
    ids = a.tokenize(PROMPT)
    rows, _, _, _ = diff.isolated(a, ids, "CPU")
    assert not [r for r in rows if r.over], diff.format_rows([r for r in rows if r.over])
    names = [r.name for r in rows]
    for name in LAYER0 + ["l_out-29", "result_norm", "result_output"]:
        assert name in names
    assert len(rows) == 576
    by = {r.name: r for r in rows}
    assert by["result_output"].threshold == 5e-4 and by["attn_norm-0"].threshold == 1e-7


def test_default_model_chained_clean(default_models):
    from cann_llm.tools import diff
    a, b = default_models
    ids = a.tokenize(PROMPT)
    rows, _, _, la, lb = diff.chained(a, b, ids)
    assert len(rows) == 576 and not [r for r in rows if r.over]
    assert all(r.threshold == diff.CHAINED_NMSE for r in rows)
    assert np.array_equal(np.argmax(la, -1), np.argmax(lb, -1))


def test_isolated_names_the_one_wrong_op(default_models):
    """A backend whose attn_norm-0 (MUL) comes out wrong: every later node computes from the
    wrong values, yet isolated mode flags exactly that tensor."""
    from cann_llm.tools import diff
    a, _ = default_models
    faulty = diff.InjectFault(a, r"^attn_norm-0$")
    ids = a.tokenize(PROMPT)
    rows, _, _, logits = diff.isolated(faulty, ids, "CPU")
    over = [r for r in rows if r.over]
    assert [(r.name, r.op) for r in over] == [("attn_norm-0", "MUL")]
    assert not np.array_equal(logits, a.logits(ids))       # the fault did propagate
    text = diff.format_rows(rows)
    assert re.search(r"^2\s+attn_norm-0\s+MUL\s.*<< first$", text, re.M)
    # chained mode on the same fault: error everywhere downstream
    rows_c = diff.compare_records(diff.collect(faulty, ids)[0], diff.collect(a, ids)[0])
    over_c = [r.name for r in rows_c if r.over]
    assert over_c[0] == "attn_norm-0" and "l_out-29" in over_c and "result_output" in over_c
    assert [r.over for r in rows_c[:3]] == [False, False, True]


def test_isolated_names_a_wrong_op_type(tiny):
    """Every RMS_NORM wrong (the soft_max attention path): only RMS_NORM rows are flagged, the
    first is norm-0."""
    import cann_llm
    from cann_llm.tools import diff
    with cann_llm.load(tiny, device="CANN0", n_ctx=64, flash_attn=False,
                       log=lambda m: None) as m:
        ids = m.tokenize("hello world")
        rows, _, _, _ = diff.isolated(diff.InjectFault(m, "^RMS_NORM$", by_op=True), ids, "CPU")
    names = [r.name for r in rows]
    assert "kq-0" in names and "kq_soft_max-0" in names and "kqv-0" in names
    over = [r for r in rows if r.over]
    assert over and {r.op for r in over} == {"RMS_NORM"} and over[0].name == "norm-0"
    assert len(over) == 2 * 2 + 1                     # two per layer and the output norm


# ---- the command on a tiny model -----------------------------------------------------------------

def test_cli_isolated_and_chained(tiny, capsys):
    for mode in ("isolated", "chained"):
        rc, out, err = _cli([str(tiny), "-p", "hello world", "--mode", mode], capsys)
        assert rc == 0, out + err
        rows = _rows(out)
        assert [r[1] for r in rows[:3]] == ["inp_embd", "norm-0", "attn_norm-0"]
        assert len(rows[0]) == 10                      # no mark: nothing over
        assert re.search(rf"{mode} CANN0 vs CPU .*: {len(rows)} tensors, 0 over threshold", out)
    assert "same top-1 token" in out


def test_cli_inject_threshold_filter_stop(tiny, capsys):
    rc, out, _ = _cli([str(tiny), "-p", "hello world", "--inject", "^ffn_gate-1$"], capsys)
    assert rc == 1
    bad = [r for r in _rows(out) if r[-1] in ("first", "!")]
    assert [r[1] for r in bad] == ["ffn_gate-1"] and bad[0][-2:] == ["<<", "first"]
    assert "first: ffn_gate-1 (MUL_MAT)" in out
    # a generous threshold accepts it, a zero threshold rejects every rounding difference
    rc, out, _ = _cli([str(tiny), "-p", "hello world", "--inject", "^ffn_gate-1$",
                       "--threshold", "1"], capsys)
    assert rc == 0
    rc, out, _ = _cli([str(tiny), "-p", "hello world", "--threshold", "0"], capsys)
    assert rc == 1 and "first: " in out
    # filter: only matching rows
    rc, out, _ = _cli([str(tiny), "-p", "hello world", "--filter", r"^ffn_\w+-1$"], capsys)
    assert rc == 0
    assert {r[1] for r in _rows(out)} == {"ffn_inp-1", "ffn_norm-1", "ffn_gate-1", "ffn_up-1",
                                          "ffn_swiglu-1", "ffn_out-1"}
    # --stop ends the run at the first bad tensor
    rc, out, _ = _cli([str(tiny), "-p", "hello world", "--inject", "^Vcur-0$", "--stop"], capsys)
    assert rc == 1 and _rows(out)[-1][1] == "Vcur-0"


def test_cli_print(tiny, capsys):
    rc, out, _ = _cli([str(tiny), "--print", "-p", "hello world",
                       "--filter", "^(attn_norm-0|ffn_up-0|result_output)$"], capsys)
    assert rc == 0
    heads = [line for line in out.splitlines() if re.match(r"^\s*\d+ \S+ = \(", line)]
    assert len(heads) == 3
    assert re.fullmatch(r"\s*2 attn_norm-0 = \(f32\) MUL\(norm-0\{64, \d+, 1, 1\}, "
                        r"blk\.0\.attn_norm\.weight\{64, 1, 1, 1\}\) = \{64, \d+, 1, 1\} "
                        r"\[CANN0\]", heads[0])
    assert heads[1].split()[1:5] == ["ffn_up-0", "=", "(f32)", "MUL_MAT(blk.0.ffn_up.weight{64,"]
    assert out.count("sum = ") == 3
    # ne0 = 128 > 6: first 3 and last 3 values with ... between, 12.4f each
    value_line = next(line for line in out.splitlines() if "..." in line and "[" in line)
    vals = value_line.strip().strip("[]").split(", ")
    assert len(vals) == 7 and vals[3] == "..." and all(re.fullmatch(r" *-?\d+\.\d{4}", v)
                                                       for v in vals[:3] + vals[4:])


def test_cli_dump_and_compare(tiny, tmp_path, capsys):
    import cann_llm
    from cann_llm.tools.dump import read_dump
    good, bad = tmp_path / "good", tmp_path / "bad"
    assert _cli([str(tiny), "--print", "-p", "hello world", "--dump", str(good)], capsys)[0] == 0
    assert _cli([str(tiny), "--print", "-p", "hello world", "--dump", str(bad),
                 "--inject", "^l_out-0$"], capsys)[0] == 0
    man = json.loads((good / "manifest.json").read_text())
    assert man["format"] == "cann-llm-tensor-dump" and man["format_version"] == 1
    assert man["device"] == "CANN0" and man["cann_llm_version"] == cann_llm.__version__
    assert len(man["model_sha256"]) == 64 and man["tokens"] and man["prompt"] == "hello world"
    first = man["tensors"][0]
    assert (first["name"], first["op"], first["type"]) == ("inp_embd", "GET_ROWS", "F32")
    assert first["ne"][0] == 64 and first["shape"] == [len(man["tokens"]), 64]
    npz = np.load(good / "tensors.npz")
    assert npz[first["key"]].shape == tuple(first["shape"])
    meta, recs = read_dump(good)
    assert [r.name for r in recs] == [e["name"] for e in man["tensors"]]

    rc, out, _ = _cli(["--compare", str(good), str(good)], capsys)
    assert rc == 0 and "0 over threshold" in out and all(r[5] == "0" for r in _rows(out))
    rc, out, _ = _cli(["--compare", str(bad), str(good)], capsys)
    assert rc == 1
    marked = [r for r in _rows(out) if r[-1] == "first"]
    assert marked[0][1] == "l_out-0"
    rc, out, _ = _cli(["--compare", str(bad), str(good), "--filter", "-1$"], capsys)
    assert rc == 1 and all(r[1].endswith("-1") for r in _rows(out))

    # diff --dump writes a and b; the isolated pair compares with per-op thresholds
    pair = tmp_path / "pair"
    assert _cli([str(tiny), "-p", "hello world", "--dump", str(pair)], capsys)[0] == 0
    rc, out, _ = _cli(["--compare", str(pair / "a"), str(pair / "b")], capsys)
    assert rc == 0 and "per-op thresholds" in out
    assert read_dump(pair / "b")[0]["mode"] == "isolated-b"


def test_cli_errors_are_one_line(tiny, tmp_path, capsys):
    other = tmp_path / "other"
    _cli([str(tiny), "--print", "-p", "hello", "--dump", str(other), "--filter", "^norm$"],
         capsys)
    good = tmp_path / "good"
    _cli([str(tiny), "--print", "-p", "hello world", "--dump", str(good), "--filter", "^norm$"],
         capsys)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "manifest.json").write_text("{}")
    cases = [
        ([str(tiny), "-p", "x", "--a", "CANN7"], "no device CANN7"),
        ([str(tiny), "-p", "x", "--b", "NPU0"], "unknown device 'NPU0'"),
        ([str(tmp_path / "missing.gguf"), "-p", "x"], "missing.gguf"),
        ([str(tiny)], "diff needs a prompt"),
        ([str(tiny), "-p", "x", "--filter", "("], "bad regex"),
        ([str(tiny), "-p", "x", "--threshold", "-1"], "--threshold must be >= 0"),
        ([str(tiny), "-p", "x", "--mode", "both"], "invalid choice"),
        (["--compare", str(tmp_path / "nope"), str(good)], "no such dump directory"),
        (["--compare", str(tmp_path / "junk"), str(good)], "not a cann-llm-tensor-dump"),
        (["--compare", str(other), str(good)], "different prompt tokens"),
    ]
    for argv, message in cases:
        rc, out, err = _cli(argv, capsys)
        assert rc == 1, (argv, out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("cann-llm: ") and message in lines[0], \
            (argv, err)
