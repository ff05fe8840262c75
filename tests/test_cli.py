"""The `cann-llm` console script as a user runs it: a subprocess, stdout and exit codes."""

import shutil
import subprocess

import pytest

import cann_llm


def _cann_llm(*args):
    executable = shutil.which("cann-llm")
    assert executable, "the cann-llm console script is not on PATH (is the venv active?)"
    return subprocess.run([executable, *args], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def test_version():
    result = _cann_llm("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"cann-llm {cann_llm.__version__}"


def test_devices_lists_cann0_with_runtime(clm):
    result = _cann_llm("devices")
    assert result.returncode == 0, result.stderr
    assert "CANN0" in result.stdout
    assert clm.runtime_name() in result.stdout
    if clm.runtime_name() == "acl_host":
        assert "acl_host" in result.stdout
    assert "MiB" in result.stdout or "GiB" in result.stdout


def test_ascend_rt_visible_devices_picks_and_renumbers_devices(clm):
    # CANN's rule, which Ray relies on for actors that request NPUs: only the listed devices
    # are visible, numbered from 0 in the list's order; a malformed list is an error naming it
    if clm.runtime_name() != "acl_host":
        pytest.skip("the device count of a real NPU host is not ours to set")
    import os

    def devices(visible):
        env = dict(os.environ, CANN_LLM_HOST_DEVICES="4", ASCEND_RT_VISIBLE_DEVICES=visible)
        return subprocess.run([shutil.which("cann-llm"), "devices"], capture_output=True,
                              text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)

    two = devices("3,1")
    assert two.returncode == 0, two.stderr
    assert "CANN0" in two.stdout and "CANN1" in two.stdout and "CANN2" not in two.stdout
    for bad, why in [("1,1", "lists device 1 twice"), ("4", "0..3"), ("0,x", "0..3"),
                     ("0,", "0..3")]:
        out = devices(bad)
        assert out.returncode == 1 and why in out.stderr, (bad, out.stderr)
    assert "no CANN devices" in devices("").stderr


def test_unknown_subcommand_exits_nonzero():
    result = _cann_llm("no-such-command")
    assert result.returncode == 2 and "invalid choice" in result.stderr


@pytest.mark.parametrize("failure", ["ImportError('libcann_llm.so: cannot open')",
                                     "OSError('device lost')"])
def test_errors_are_one_line_without_traceback(monkeypatch, capsys, failure):
    from cann_llm import cli
    from cann_llm.cli import devices

    def broken(args):
        raise eval(failure)

    monkeypatch.setattr(devices, "cmd_devices", broken)
    assert cli.main(["devices"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("cann-llm: ") and err.count("\n") == 1 and "Traceback" not in err


def test_cann_errors_are_one_line(clm, monkeypatch, capsys):
    from cann_llm import cli
    from cann_llm.cli import devices

    def broken(args):
        raise clm.CannError(clm.Status.ERR_DEVICE, "aclrtSetDevice failed")

    monkeypatch.setattr(devices, "cmd_devices", broken)
    assert cli.main(["devices"]) == 1
    assert capsys.readouterr().err == "cann-llm: CannError: ERR_DEVICE: aclrtSetDevice failed\n"


# ---- the CLI package's layering -------------------------------------------------------------------

_HEAVY = ("cann_llm.tools", "cann_llm.backend", "cann_llm._cann_llm", "cann_llm.model",
          "cann_llm.bench", "numpy", "cffi", "gguf", "jinja2")


def test_importing_the_cli_and_building_its_parser_loads_no_tool():
    """`import cann_llm.cli` and the parser of every command load no tool, no backend and no
    numpy: a command imports what it uses when it runs (a fresh interpreter, since this one has
    loaded everything)."""
    import json
    import sys
    code = ("import json, sys\n"
            "import cann_llm.cli as cli\n"
            "after_import = sorted(sys.modules)\n"
            "parser = cli.build_parser()\n"
            "print(json.dumps([after_import, sorted(sys.modules),"
            " sorted(parser.commands.choices)]))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    after_import, after_parser, commands = json.loads(proc.stdout)
    for stage, modules in (("import cann_llm.cli", after_import), ("build_parser()", after_parser)):
        heavy = [m for m in modules if m.split(".")[0] in _HEAVY
                 or any(m == h or m.startswith(h + ".") for h in _HEAVY)]
        assert not heavy, f"{stage} imported {heavy}"
    assert commands == sorted(["devices", "test-ops", "run", "serve", "bench", "pull", "info", "quantize",
                               "diff"])


def test_tools_never_import_the_cli():
    """The tools (opcheck, diff, dump) are libraries with their own errors: no import of
    cann_llm.cli, at the top or inside a function."""
    import ast
    import pathlib
    tools = pathlib.Path(cann_llm.__file__).parent / "tools"
    offenders = []
    for path in sorted(tools.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                names = [("." * node.level) + (node.module or "")]
                names += [f"{names[0]}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            if any(n in ("..cli", "cann_llm.cli") or n.startswith(("..cli.", "cann_llm.cli."))
                   for n in names):
                offenders.append(f"{path.name}:{node.lineno}")
    assert not offenders, offenders
