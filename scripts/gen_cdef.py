"""Generate runner/_cdef.py (the cffi declarations) from backend_cann/include/cann_llm.h.

The public header is the single source of truth for the Python binding: this script strips what
cffi's cdef() cannot parse (comments, include guards, #include, the extern "C" wrapper) and keeps
integer #defines. Run it after editing the header; tests/test_cdef_sync.py fails when they drift.
"""

import argparse
import pathlib
import re
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
HEADER = REPO / "backend_cann" / "include" / "cann_llm.h"
OUTPUT = REPO / "runner" / "_cdef.py"

BANNER = '''\
"""GENERATED - do not edit. Made by scripts/gen_cdef.py from backend_cann/include/cann_llm.h.

The cffi declarations of the public C API; runner/_ffi_build.py compiles them in API mode against
the real header, so a declaration that disagrees with it fails the build.
"""

'''

_INT_DEFINE = re.compile(r"#\s*define\s+(\w+)\s+(-?(?:0[xX][0-9a-fA-F]+|\d+))[uUlL]*\s*$")


def strip_comments(text: str) -> str:
    """Remove /* */ and // comments, keeping line breaks so the layout survives."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def drop_cplusplus_blocks(lines: list[str]) -> list[str]:
    """Drop `#ifdef __cplusplus ... #endif` blocks (the extern "C" wrapper), nesting-aware."""
    kept, depth = [], 0
    for line in lines:
        stripped = line.strip()
        if depth:
            if re.match(r"#\s*if", stripped):
                depth += 1
            elif re.match(r"#\s*endif", stripped):
                depth -= 1
            continue
        if re.match(r"#\s*if(def)?\s+(defined\s*\(?\s*)?__cplusplus", stripped):
            depth = 1
            continue
        kept.append(line)
    return kept


def header_to_cdef(header_text: str) -> tuple[str, dict[str, int]]:
    """The cdef text for cffi and the header's integer #define constants."""
    lines = drop_cplusplus_blocks(strip_comments(header_text).splitlines())
    out, defines = [], {}
    for line in lines:
        stripped = line.rstrip()
        if stripped.lstrip().startswith("#"):
            match = _INT_DEFINE.match(stripped.strip())
            if match:
                defines[match.group(1)] = int(match.group(2), 0)
                out.append(f"#define {match.group(1)} {match.group(2)}")
            continue  # include guards, #include, other preprocessor lines
        out.append(stripped)
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip("\n") + "\n"
    return text, defines


def render_module(header_text: str) -> str:
    """The full text of runner/_cdef.py for this header."""
    cdef, defines = header_to_cdef(header_text)
    if "CLM_ABI_VERSION" not in defines:
        raise ValueError("cann_llm.h has no integer CLM_ABI_VERSION #define")
    body = [BANNER]
    body.append(f"CLM_ABI_VERSION = {defines['CLM_ABI_VERSION']}\n\n")
    body.append('CDEF = r"""\n' + cdef + '"""\n')
    return "".join(body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--header", type=pathlib.Path, default=HEADER)
    parser.add_argument("--output", type=pathlib.Path, default=OUTPUT)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the output file differs from a fresh generation")
    args = parser.parse_args(argv)
    fresh = render_module(args.header.read_text())
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != fresh:
            print(f"{args.output} is out of date: run scripts/gen_cdef.py", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
