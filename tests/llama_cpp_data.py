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


_SEP = "\n__ggml_vocab_test__\n"


def read_inp(path) -> list[str]:
    """The texts of a ggml-vocab-*.gguf.inp file as llama.cpp's test-tokenizer-0 reads them: texts
    end at a separator line or at the end of the file (gemma-4's last one has no separator)."""
    raw = pathlib.Path(path).read_text(encoding="utf-8")
    texts, pos = [], 0
    while pos < len(raw):
        end = raw.find(_SEP, pos)
        if end < 0:
            texts.append(raw[pos:])
            break
        texts.append(raw[pos:end])
        pos = end + len(_SEP)
    return texts


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


def download_from_index(project: str, filename: str, dest: pathlib.Path,
                        sha256: str | None = None) -> pathlib.Path:
    """`filename` of `project` from the index's simple page (PEP 503) into `dest`, its sha256
    checked against the index's and, when given, against `sha256`."""
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    page_url = f"{index}/{project}/"
    try:
        page = urllib.request.urlopen(page_url, timeout=60).read().decode("utf-8", "replace")
        links = [u for u in re.findall(r'href="([^"]+)"', page) if filename in u]
        if not links:
            raise RuntimeError(f"{page_url} lists no {filename}")
        url, _, fragment = urllib.parse.urljoin(page_url, links[0]).partition("#")
        path = dest / filename
        digest = hashlib.sha256()
        with urllib.request.urlopen(url, timeout=120) as response, open(path, "wb") as out:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
    except (OSError, RuntimeError) as exc:
        raise RuntimeError(f"cannot fetch test data ({filename} from {index}): {exc}") from None
    if fragment.startswith("sha256=") and digest.hexdigest() != fragment[7:]:
        raise RuntimeError(f"{url}: sha256 {digest.hexdigest()} is not the index's {fragment[7:]}")
    if sha256 is not None and digest.hexdigest() != sha256:
        raise RuntimeError(f"{url}: sha256 {digest.hexdigest()} is not the expected {sha256}")
    return path


def _download_sdist(dest: pathlib.Path) -> pathlib.Path:
    return download_from_index(PROJECT, ARCHIVE, dest)


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
