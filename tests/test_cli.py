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


def test_unknown_subcommand_exits_nonzero():
    result = _cann_llm("no-such-command")
    assert result.returncode == 2 and "invalid choice" in result.stderr


@pytest.mark.parametrize("failure", ["ImportError('libcann_llm.so: cannot open')",
                                     "OSError('device lost')"])
def test_errors_are_one_line_without_traceback(monkeypatch, capsys, failure):
    from cann_llm import cli

    def broken(args):
        raise eval(failure)

    monkeypatch.setattr(cli, "cmd_devices", broken)
    assert cli.main(["devices"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("cann-llm: ") and err.count("\n") == 1 and "Traceback" not in err


def test_cann_errors_are_one_line(clm, monkeypatch, capsys):
    from cann_llm import cli

    def broken(args):
        raise clm.CannError(clm.Status.ERR_DEVICE, "aclrtSetDevice failed")

    monkeypatch.setattr(cli, "cmd_devices", broken)
    assert cli.main(["devices"]) == 1
    assert capsys.readouterr().err == "cann-llm: CannError: ERR_DEVICE: aclrtSetDevice failed\n"
