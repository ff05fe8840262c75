"""The wheel as pip builds it from this work tree: one top-level package, cann_llm, holding the
Python sources of runner/ and server/, the cffi extension and the native libraries it loads.

Building takes a while (a full CMake build), so the wheel is built once per session.
"""

import re
import subprocess
import sys
import zipfile

import pytest

from conftest import REPO_ROOT

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def wheel(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("wheel")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(REPO_ROOT), "--no-deps", "-q", "-w", str(out_dir)],
        capture_output=True, text=True, timeout=1500, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    wheels = list(out_dir.glob("cann_llm-*.whl"))
    assert len(wheels) == 1, wheels
    with zipfile.ZipFile(wheels[0]) as archive:
        yield archive


def test_only_cann_llm_at_top_level(wheel):
    top_level = {name.split("/")[0] for name in wheel.namelist()}
    dist_info = {name for name in top_level if name.endswith(".dist-info")}
    assert len(dist_info) == 1 and dist_info.pop().startswith("cann_llm-")
    assert top_level - {name for name in top_level if name.endswith(".dist-info")} == {"cann_llm"}


def test_python_sources_and_server_are_inside(wheel):
    names = set(wheel.namelist())
    for module in ["__init__.py", "_cdef.py", "backend.py", "cli/__init__.py", "cli/__main__.py",
                   "cli/common.py", "cli/run.py", "tools/diff.py", "dtypes.py",
                   "server/__init__.py"]:
        assert f"cann_llm/{module}" in names, module
    assert "cann_llm/_ffi_build.py" not in names and "cann_llm/cffi_module.cmake" not in names
    assert not any("__pycache__" in name for name in names)


def test_native_libraries_are_inside(wheel, clm):
    names = set(wheel.namelist())
    assert any(re.fullmatch(r"cann_llm/_cann_llm\.cpython-.*\.so", name) for name in names), names
    assert "cann_llm/libcann_llm.so" in names
    if clm.runtime_name() == "acl_host":
        assert "cann_llm/libacl_host.so" in names


def test_extension_finds_its_libraries_through_origin(wheel, tmp_path):
    extension = next(n for n in wheel.namelist() if n.startswith("cann_llm/_cann_llm."))
    path = wheel.extract(extension, tmp_path)
    dynamic = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True)
    assert re.search(r"(RUNPATH|RPATH).*\$ORIGIN", dynamic.stdout), dynamic.stdout
    assert "libcann_llm.so" in dynamic.stdout


def test_console_script_entry_point(wheel):
    entry_points = next(n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt"))
    text = wheel.read(entry_points).decode()
    assert re.search(r"^cann-llm\s*=\s*cann_llm\.cli:main$", text, re.M), text


def test_import_quiets_openblas_spin():
    """import cann_llm lets idle OpenBLAS threads sleep (OPENBLAS_THREAD_TIMEOUT=4) unless the
    user set the variable."""
    import os
    import subprocess
    import sys
    code = "import os, cann_llm; print(os.environ['OPENBLAS_THREAD_TIMEOUT'])"
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "4", out.stderr
    out = subprocess.run([sys.executable, "-c", code], env={**env, "OPENBLAS_THREAD_TIMEOUT": "20"},
                         capture_output=True, text=True)
    assert out.stdout.strip() == "20", out.stderr
