"""The README and docs/ as a user meets them: every shell block carries one marker saying how it is
checked (docs/index.md, "Commands in the docs") and the runnable ones run as written; links
resolve inside the repository; the index lists every page; the CLI reference matches the code;
every environment variable the code reads is documented in docs/deployment.md."""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest

from conftest import REPO_ROOT

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
SHELL = {"sh", "bash", "shell", "console"}
MARKER = re.compile(r"^\s*<!--\s*(runnable|slow|npu-only|tested-by:\s*(\S+))\s*-->\s*$")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
# a command: one of these words, then an argument (not `cann-llm serve: listening ...`, a log line)
COMMAND = re.compile(r"^(?:cann-llm|python3?|pip|bash|docker|curl|cmake) +[^\s:]+(?:\s|$)")
RUN_TIMEOUT = 120


class Block:
    def __init__(self, page: pathlib.Path, line: int, lang: str, text: str, markers: list[str]):
        self.page, self.line, self.lang, self.text, self.markers = page, line, lang, text, markers

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO_ROOT)}:{self.line}"


def blocks(page: pathlib.Path) -> list[Block]:
    """The fenced blocks of a page with the marker lines right above each fence."""
    lines = page.read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang, start = m.group(1), m.group(2), i
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        markers, j = [], start - 1
        while j >= 0 and MARKER.match(lines[j]):
            markers.append(MARKER.match(lines[j]).group(1))
            j -= 1
        out.append(Block(page, start + 1, lang, "\n".join(body) + "\n", markers))
        i += 1
    return out


ALL_BLOCKS = [b for page in PAGES for b in blocks(page)]
RUNNABLE = [b for b in ALL_BLOCKS if b.markers == ["runnable"]]


def test_every_shell_block_has_exactly_one_marker():
    shell = [b for b in ALL_BLOCKS if b.lang in SHELL]
    assert len(shell) > 20
    bad = [f"{b.where}: {b.markers or 'no marker'}" for b in shell if len(b.markers) != 1]
    assert not bad, "shell blocks need exactly one marker (docs/index.md):\n" + "\n".join(bad)
    stray = [b.where for b in ALL_BLOCKS if b.markers and b.lang not in SHELL]
    assert not stray, f"markers on blocks that are not shell: {stray}"
    assert RUNNABLE, "no runnable block: the convention is not being parsed"


def test_commands_are_in_shell_blocks():
    """A block without a language may show output or a synopsis (`cmd [options]`), not commands
    that escape the markers."""
    bad = []
    for b in ALL_BLOCKS:
        if b.lang == "":
            first = b.text.lstrip().splitlines()[0] if b.text.strip() else ""
            if COMMAND.match(first) and " [" not in first:
                bad.append(f"{b.where}: {first}")
    assert not bad, "commands in a block without a language (make it ```sh):\n" + "\n".join(bad)


def test_tested_by_markers_name_a_file_that_reads_the_page():
    for b in ALL_BLOCKS:
        for marker in b.markers:
            if marker.startswith("tested-by:"):
                target = REPO_ROOT / marker.split(":", 1)[1].strip()
                assert target.is_file(), f"{b.where}: {target} does not exist"
                assert b.page.name in target.read_text(), f"{b.where}: {target} never reads {b.page.name}"


def test_the_readme_keeps_its_set_up_commands_first():
    """.ci/run takes the README's two set-up lines from its first ``` block, by position."""
    first = blocks(REPO_ROOT / "README.md")[0]
    lines = [ln for ln in first.text.splitlines() if ln.strip()]
    assert len(lines) == 2 and "pip install ." in lines[0] and "pytest" in lines[1]
    assert first.markers == ["tested-by: .ci/run"]


# ---- runnable blocks ------------------------------------------------------------------------

@pytest.fixture(scope="session")
def checkout(tmp_path_factory, default_model_path) -> pathlib.Path:
    """A fresh copy of the repository's files, with model.gguf standing for the default model."""
    root = tmp_path_factory.mktemp("docs-run") / "cann-llm"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True)
    if tracked.returncode == 0:
        for name in tracked.stdout.decode().split("\0"):
            src = REPO_ROOT / name
            if name and src.is_file():
                (root / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, root / name)
    else:   # an exported tree
        shutil.copytree(REPO_ROOT, root, ignore=shutil.ignore_patterns(
            ".git", ".venv*", "build", "__pycache__", "*.so"))
    (root / "model.gguf").symlink_to(default_model_path)
    return root


@pytest.mark.slow
@pytest.mark.parametrize("block", RUNNABLE, ids=[b.where for b in RUNNABLE])
def test_runnable_block_runs_as_written(block, checkout):
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    env.pop("PYTHONPATH", None)
    start = time.monotonic()
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", block.text], cwd=checkout, env=env,
                         stdin=subprocess.DEVNULL, capture_output=True, text=True,
                         timeout=RUN_TIMEOUT)
    elapsed = time.monotonic() - start
    assert out.returncode == 0, (f"{block.where} exited {out.returncode} after {elapsed:.1f} s\n"
                                 f"{block.text}\n--- stdout\n{out.stdout[-3000:]}\n"
                                 f"--- stderr\n{out.stderr[-3000:]}")


# ---- links, index, paths ------------------------------------------------------------------------

def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: link text kept, code marks dropped, lower case, punctuation
    other than - and _ dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: pathlib.Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.*)$", text, flags=re.M)}


def _links(page: pathlib.Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    return re.findall(r"\]\(([^)\s]+)\)", text)


def test_relative_links_and_anchors_resolve():
    bad = []
    for page in PAGES:
        for link in _links(page):
            if re.match(r"^[a-z]+:", link):          # https:, mailto:
                continue
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            if not target.exists():
                bad.append(f"{page.name}: {link} (no such file)")
            elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
                bad.append(f"{page.name}: {link} (no such heading)")
            elif REPO_ROOT.resolve() not in target.resolve().parents and target != REPO_ROOT:
                bad.append(f"{page.name}: {link} (outside the repository)")
    assert not bad, "\n".join(bad)


def test_docs_never_point_outside_the_repository():
    local = re.compile(r"\.\./shared|(?<![\w.:/])/(?:work|home|Users|root|mnt)/\w|file://")
    bad = [f"{page.name}:{n}: {line.strip()}" for page in PAGES
           for n, line in enumerate(page.read_text().splitlines(), 1) if local.search(line)]
    assert not bad, "\n".join(bad)


def test_the_index_lists_every_page():
    index = (REPO_ROOT / "docs" / "index.md").read_text()
    missing = [p.name for p in PAGES if p.parent.name == "docs" and p.name != "index.md"
               and f"]({p.name})" not in index]
    assert not missing, f"docs/index.md does not link {missing}"
    assert "](docs/index.md)" in (REPO_ROOT / "README.md").read_text()


def test_the_cli_reference_matches_the_argparse_definitions():
    out = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "gen_cli_docs.py"),
                          "--check"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    page = (REPO_ROOT / "docs" / "cli-reference.md").read_text()
    from cann_llm.cli import build_parser
    parser = build_parser()
    for name, sub in parser.commands.choices.items():
        assert f"## cann-llm {name}" in page
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            for flag in action.option_strings:
                assert f"`{flag}" in page, f"{name} {flag} is missing from the reference"


def _variables_read_by_the_code() -> set[str]:
    names = set()
    for path in (REPO_ROOT / "backend_cann").rglob("*.c"):
        names |= set(re.findall(r'getenv\("(\w+)"\)', path.read_text()))
    for folder in ("runner", "server"):
        for path in (REPO_ROOT / folder).rglob("*.py"):
            text = path.read_text()
            names |= set(re.findall(r'environ(?:\.get\(|\[)"(\w+)"', text))
            names |= set(re.findall(r'getenv\("(\w+)"', text))
    for path in (REPO_ROOT / "CMakeLists.txt", *(REPO_ROOT / "backend_cann").rglob("CMakeLists.txt")):
        names |= set(re.findall(r"ENV\{(\w+)\}", path.read_text()))
    return names - {"XDG_CACHE_HOME"}        # the XDG standard's, documented with CANN_LLM_MODELS


def test_every_environment_variable_the_code_reads_is_documented():
    names = _variables_read_by_the_code()
    assert {"GGML_CANN_MEM_POOL", "CANN_LLM_THREADS", "CANN_LLM_MODELS", "CANN_LLM_BUILD"} <= names
    guide = (REPO_ROOT / "docs" / "deployment.md").read_text()
    missing = sorted(n for n in names if f"`{n}`" not in guide)
    assert not missing, f"docs/deployment.md does not document {missing}"
    entry = (REPO_ROOT / "docker" / "entrypoint.sh").read_text()
    for name in set(re.findall(r"\$\{(CANN_LLM_\w+)", entry)):
        assert f"`{name}`" in guide, f"docs/deployment.md does not document {name}"
