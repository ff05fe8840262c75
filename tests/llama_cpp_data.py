"""llama.cpp's tokenizer test data, fetched from a package registry for the suite.

The vocabulary-only GGUFs and their .inp/.out vectors (llama.cpp's models/ folder, MIT licence)
come from the llama-cpp-python 0.3.36 source distribution on PyPI (vendor/llama.cpp/models/).
The first use downloads the sdist from the package index's simple API (PIP_INDEX_URL, else
PyPI; about 77 MB, checked against the index's sha256), keeps the 42 files (14 vocabularies) and
one chat template of models/templates/ (Qwen3's, for its enable_thinking switch) under
$XDG_CACHE_HOME/cann-llm/test-data/ and checks them against tests/data/llama_cpp_vocab.sha256;
later runs only re-hash the cache.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import re
import shutil
import tarfile
import tempfile
import urllib.parse
import urllib.request

PROJECT, VERSION = "llama-cpp-python", "0.3.36"
ARCHIVE = f"llama_cpp_python-{VERSION}.tar.gz"
MEMBER_DIR = "vendor/llama.cpp/models/"
MANIFEST = pathlib.Path(__file__).resolve().parent / "data" / "llama_cpp_vocab.sha256"


def _expected() -> dict[str, str]:
    out = {}
    for line in MANIFEST.read_text().splitlines():
        if line.strip():
            digest, name = line.split()
            out[name] = digest
    return out


def _sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cache_dir() -> pathlib.Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "cann-llm" / "test-data" / f"{PROJECT}-{VERSION}"


def _complete(directory: pathlib.Path, expected: dict[str, str]) -> bool:
    return all((directory / n).is_file() and _sha256(directory / n) == d for n, d in expected.items())


def _download_sdist(dest: pathlib.Path) -> pathlib.Path:
    """The sdist from the index's simple page (PEP 503), its sha256 checked."""
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    page_url = f"{index}/{PROJECT}/"
    try:
        page = urllib.request.urlopen(page_url, timeout=60).read().decode("utf-8", "replace")
        links = [u for u in re.findall(r'href="([^"]+)"', page) if ARCHIVE in u]
        if not links:
            raise RuntimeError(f"{page_url} lists no {ARCHIVE}")
        url, _, fragment = urllib.parse.urljoin(page_url, links[0]).partition("#")
        path = dest / ARCHIVE
        digest = hashlib.sha256()
        with urllib.request.urlopen(url, timeout=120) as response, open(path, "wb") as out:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
    except (OSError, RuntimeError) as exc:
        raise RuntimeError(f"cannot fetch llama.cpp's tokenizer test data ({ARCHIVE} from "
                           f"{index}): {exc}") from None
    if fragment.startswith("sha256=") and digest.hexdigest() != fragment[7:]:
        raise RuntimeError(f"{url}: sha256 {digest.hexdigest()} is not the index's {fragment[7:]}")
    return path


def vocab_dir() -> pathlib.Path:
    """The directory holding ggml-vocab-<name>.gguf{,.inp,.out}, fetched on first use."""
    expected = _expected()
    target = cache_dir()
    if _complete(target, expected):
        return target
    with tempfile.TemporaryDirectory(prefix="cann-llm-sdist-") as tmp:
        tmp = pathlib.Path(tmp)
        archive = _download_sdist(tmp)
        staging = tmp / "files"
        staging.mkdir()
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                name = member.name.rsplit("/", 1)[-1]
                if name in expected and member.isfile() and \
                        member.name.endswith((MEMBER_DIR + name, MEMBER_DIR + "templates/" + name)):
                    (staging / name).write_bytes(tar.extractfile(member).read())
        bad = [n for n, d in expected.items()
               if not (staging / n).is_file() or _sha256(staging / n) != d]
        if bad:
            raise RuntimeError(f"{ARCHIVE}: missing or changed tokenizer test files {bad}")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = pathlib.Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
        for n in expected:
            shutil.copyfile(staging / n, partial / n)
        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
        try:
            partial.rename(target)
        except OSError:            # another process got there first
            shutil.rmtree(partial, ignore_errors=True)
    if not _complete(target, expected):
        raise RuntimeError(f"{target}: tokenizer test data incomplete after fetching")
    return target
