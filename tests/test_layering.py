"""backend.py is the only module of runner/ on the cffi extension (issue 11, section 1).

The scan reads Python tokens, not text, so prose in comments and strings ("ops_rope.c", "the
lib. directory") never counts, while every real use does: `from ._cann_llm import ...`,
`lib.clm_*`, `ffi.new`, `be.ffi.NULL`, `tensor.c.data` and a bare `tensor.c` handed on.
"""

import io
import pathlib
import tokenize

import pytest

RUNNER = pathlib.Path(__file__).resolve().parent.parent / "runner"
ALLOWED = {"backend.py", "_cdef.py", "_ffi_build.py"}


def cffi_uses(source: str) -> list[tuple[int, str]]:
    """(line, what) for each use of the cffi extension in Python source."""
    toks = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
            if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE,
                              tokenize.INDENT, tokenize.DEDENT)]
    hits = []
    for i, tok in enumerate(toks):
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        prev = toks[i - 1] if i > 0 else None
        if tok.type == tokenize.NAME and tok.string == "_cann_llm":
            hits.append((tok.start[0], "_cann_llm"))
        elif tok.type == tokenize.NAME and tok.string in ("lib", "ffi") \
                and nxt is not None and nxt.string == ".":
            hits.append((tok.start[0], f"{tok.string}."))
        elif tok.type == tokenize.NAME and tok.string in ("lib", "ffi") \
                and prev is not None and prev.string == "import":
            hits.append((tok.start[0], f"import {tok.string}"))
        elif tok.type == tokenize.NAME and tok.string in ("lib", "ffi") \
                and prev is not None and prev.string == "," and any(
                    t.string == "import" for t in toks[max(0, i - 8):i]):
            hits.append((tok.start[0], f"import {tok.string}"))
        elif tok.type == tokenize.NAME and tok.string == "c" \
                and prev is not None and prev.string == ".":
            hits.append((tok.start[0], ".c"))
    return hits


@pytest.mark.parametrize("source, expected", [
    ("from ._cann_llm import ffi, lib\n", {"_cann_llm", "import ffi", "import lib"}),
    ("from .backend import Op, ffi, lib\n", {"import ffi", "import lib"}),
    ("x = lib.clm_nbytes(t)\n", {"lib."}),
    ("p = ffi.new('int *')\n", {"ffi."}),
    ("ok = s == be.ffi.NULL\n", {"ffi."}),
    ("tensor.c.data = 0\n", {".c"}),
    ("f(root.c, 0)\n", {".c"}),
    ("# see ops_rope.c and lib.clm_x\ns = 'the lib. dir, ffi.new, x.c.y'\n", set()),
    ("calibrate = 1\nlibrary = 2\nx.cpu = 3\n", set()),
])
def test_scanner(source, expected):
    """The pattern catches real uses and not ordinary words."""
    assert {what for _, what in cffi_uses(source)} == expected


def test_only_backend_uses_cffi():
    offenders = []
    for path in sorted(RUNNER.rglob("*.py")):
        if path.name in ALLOWED and path.parent == RUNNER:
            continue
        for line, what in cffi_uses(path.read_text()):
            offenders.append(f"{path.relative_to(RUNNER.parent)}:{line}: {what}")
    assert not offenders, "cffi used outside runner/backend.py:\n" + "\n".join(offenders)
