"""The Dockerfile without Docker (no image can be built here): every path it copies exists and is
not excluded by .dockerignore, it serves as a non-root user with a health check, and its entry
point and health check work against a real `cann-llm serve` started the way the image starts it.
hadolint runs in .ci/run."""

import fnmatch
import os
import re
import signal
import subprocess
import sys
import time

from conftest import REPO_ROOT
from serve_util import free_port

DOCKERFILE = REPO_ROOT / "Dockerfile"
ENTRYPOINT = REPO_ROOT / "docker" / "entrypoint.sh"
HEALTHCHECK = REPO_ROOT / "docker" / "healthcheck.py"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _copied_sources() -> list[str]:
    """The build-context paths of COPY/ADD (not those copied from another stage)."""
    sources = []
    for word, rest in _instructions():
        if word in ("COPY", "ADD"):
            args = rest.split()
            if any(a.startswith("--from") for a in args):
                continue
            args = [a for a in args if not a.startswith("--")]
            sources += args[:-1]
    return sources


def _ignore_patterns() -> list[str]:
    lines = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    return [ln.strip().strip("/") for ln in lines if ln.strip() and not ln.startswith("#")]


def _ignored(path: str, patterns: list[str]) -> bool:
    """.dockerignore's rule, enough for its patterns: a path is excluded when it or a parent
    directory matches (`**/` matches any depth); a later `!pattern` re-includes."""
    parts = path.strip("/").split("/")
    candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    excluded = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!")
        if pattern.startswith("**/"):
            tail = pattern[3:]
            hit = any(fnmatch.fnmatchcase(part, tail) for part in parts) or \
                any(fnmatch.fnmatchcase(c, tail) for c in candidates)
        else:
            hit = any(fnmatch.fnmatchcase(c, pattern) for c in candidates)
        if hit:
            excluded = not negate
    return excluded


def test_every_copied_path_exists_and_reaches_the_build_context():
    sources = _copied_sources()
    assert {"pyproject.toml", "backend_cann/", "runner/", "server/",
            "docker/entrypoint.sh", "docker/healthcheck.py"} <= set(sources)
    patterns = _ignore_patterns()
    for source in sources:
        assert (REPO_ROOT / source).exists(), f"the Dockerfile copies {source}, which is missing"
        assert not _ignored(source, patterns), f".dockerignore excludes {source}"
    # nor may .dockerignore drop a tracked file inside a copied directory (the build would miss it)
    tracked = subprocess.run(["git", "ls-files", *sources], cwd=REPO_ROOT, capture_output=True,
                             text=True)
    if tracked.returncode == 0:       # a git checkout (CI may run on an exported tree)
        files = tracked.stdout.split()
        assert len(files) > 50
        dropped = [f for f in files if _ignored(f, patterns)]
        assert not dropped, f".dockerignore excludes tracked files the build needs: {dropped}"


def test_the_matcher_follows_dockerignore_rules():
    patterns = ["build", "**/__pycache__", "**/*.so", "docs", "!docs/keep.md"]
    assert _ignored("build/x/y.o", patterns)
    assert _ignored("runner/tools/__pycache__/a.pyc", patterns)
    assert _ignored("runner/_cann_llm.so", patterns)
    assert _ignored("docs/index.md", patterns) and not _ignored("docs/keep.md", patterns)
    assert not _ignored("runner/builder.py", patterns)


def test_the_image_serves_as_a_non_root_user_with_a_health_check():
    steps = _instructions()
    words = [w for w, _ in steps]
    assert words[0] == "ARG" and steps[0][1].startswith("BASE="), "ARG BASE= comes first"
    froms = [rest for w, rest in steps if w == "FROM"]
    assert len(froms) == 2 and all(f.startswith("${BASE}") for f in froms)   # multi-stage
    last = len(words) - 1 - words[::-1].index("FROM")
    final = steps[last:]
    users = [rest for w, rest in final if w == "USER"]
    args = dict(rest.split("=", 1) for w, rest in steps if w == "ARG" and "=" in rest)
    assert users, "the runtime stage sets USER"
    uid = args.get(users[-1].strip("${}"), users[-1])
    assert uid.isdigit() and int(uid) != 0, f"USER {users[-1]} is root or not numeric"
    assert any(w == "HEALTHCHECK" and "healthcheck.py" in rest for w, rest in final)
    assert "/health" in HEALTHCHECK.read_text()
    assert any(w == "ENTRYPOINT" and "entrypoint.sh" in rest for w, rest in final)
    assert "cann-llm" in ENTRYPOINT.read_text() and "serve" in ENTRYPOINT.read_text()
    assert os.access(ENTRYPOINT, os.X_OK)
    for name in ("PULL_MODEL", "CANN_LLM_BUILD"):
        assert name in args, f"build arg {name}"


def _health(port: int) -> int:
    env = {**os.environ, "CANN_LLM_PORT": str(port)}
    return subprocess.run([sys.executable, str(HEALTHCHECK)], env=env, capture_output=True,
                          timeout=30).returncode


def test_the_entrypoint_serves_as_configured_and_the_health_check_sees_it(default_model_path):
    port = free_port()
    assert _health(port) == 1                             # nothing listens yet
    env = {**os.environ, "CANN_LLM_MODEL": str(default_model_path), "CANN_LLM_HOST": "127.0.0.1",
           "CANN_LLM_PORT": str(port), "CANN_LLM_PARALLEL": "1", "CANN_LLM_CTX_SIZE": "512",
           "CANN_LLM_THREADS": "1"}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    proc = subprocess.Popen(["bash", str(ENTRYPOINT), "--model-alias", "boxed"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while _health(port) != 0:
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "the server never became healthy"
            time.sleep(0.2)
        import httpx
        models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=30).json()
        assert [m["id"] for m in models["data"]] == ["boxed"]     # the extra flag arrived
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "1 slots × 512 tokens" in err                  # CANN_LLM_PARALLEL, CANN_LLM_CTX_SIZE


def test_the_entrypoint_runs_a_command_given_instead_of_flags():
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    out = subprocess.run(["bash", str(ENTRYPOINT), "cann-llm", "--version"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("cann-llm "), out.stderr
