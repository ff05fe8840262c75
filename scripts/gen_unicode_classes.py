"""Generate runner/_unicode_classes.py: the Unicode character classes llama.cpp's tokenizer uses.

llama.cpp's pre-tokenizers classify a code point by its general category (\\p{L}, \\p{N}, ...) as
given in its src/unicode-data.cpp, which is generated from Unicode 15.1.0. The `regex` module
carries its own Unicode version (14 to 17 across the versions this project accepts), so the
classes are taken from Unicode 15.1.0 here, through the unicodedata2 backport:

    python -m pip install --target /tmp/ud2 unicodedata2==15.1.0
    PYTHONPATH=/tmp/ud2 python scripts/gen_unicode_classes.py [--llama-cpp SRC/unicode-data.cpp]

--llama-cpp compares the result with llama.cpp's table (every code point's category flag) and
fails on any difference. tests/test_tokenizer.py checks a few known values of the output.
"""

import argparse
import bisect
import pathlib
import re
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
OUTPUT = REPO / "runner" / "_unicode_classes.py"
VERSION = "15.1.0"
# general category (first letter) -> class; C (control, format, private use, surrogate), Z and
# unassigned code points are "-"
CLASSES = {"L": "L", "M": "M", "N": "N", "P": "P", "S": "S", "C": "-", "Z": "-"}
# llama.cpp's unicode_cpt_flags bits for the same classes
LLAMA_FLAGS = {0x01: "-", 0x02: "N", 0x04: "L", 0x08: "-", 0x10: "M", 0x20: "P", 0x40: "S",
               0x80: "-"}

BANNER = '''\
"""GENERATED - do not edit. Made by scripts/gen_unicode_classes.py from Unicode {version}.

The class of every code point from U+0080 on as llama.cpp's tokenizer sees it (its
src/unicode-data.cpp is Unicode {version}): the first letter of the general category, L, M, N, P
or S, and "-" for the others (C, Z, unassigned). RUNS holds runs as <hex first code point><class>;
a run lasts until the next one starts.
"""

UNICODE_VERSION = "{version}"

RUNS = (
'''


def classes_from_unicodedata():
    import unicodedata2
    if unicodedata2.unidata_version != VERSION:
        sys.exit(f"unicodedata2 is Unicode {unicodedata2.unidata_version}, not {VERSION}")
    return [CLASSES[unicodedata2.category(chr(c))[0]] for c in range(0x110000)]


def classes_from_llama_cpp(path):
    text = pathlib.Path(path).read_text(encoding="utf-8")
    block = text[text.index("unicode_ranges_flags"):text.index("unicode_set_whitespace")]
    ranges = [(int(a, 16), int(f, 16)) for a, f in
              re.findall(r"\{0x([0-9A-Fa-f]+), 0x([0-9A-Fa-f]+)\}", block)]
    starts = [a for a, _ in ranges]
    return [LLAMA_FLAGS[ranges[bisect.bisect_right(starts, c) - 1][1] & 0xFF]
            for c in range(0x110000)]


def runs(classes):
    out = []
    for c in range(0x80, 0x110000):
        if not out or out[-1][1] != classes[c]:
            out.append((c, classes[c]))
    return out


def render(run_list, width=92):
    lines, line = [], ""
    for start, cls in run_list:
        item = f"{start:x}{cls}"
        if len(line) + len(item) > width:
            lines.append(line)
            line = ""
        line += item
    lines.append(line)
    body = "".join(f'    "{ln}"\n' for ln in lines)
    return BANNER.format(version=VERSION) + body + ")\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-cpp", metavar="UNICODE_DATA_CPP",
                    help="llama.cpp's src/unicode-data.cpp to compare with")
    ap.add_argument("--output", default=str(OUTPUT))
    args = ap.parse_args()
    classes = classes_from_unicodedata()
    if args.llama_cpp:
        theirs = classes_from_llama_cpp(args.llama_cpp)
        bad = [c for c in range(0x110000) if classes[c] != theirs[c]]
        if bad:
            sys.exit(f"{len(bad)} code points differ from llama.cpp's table, first U+{bad[0]:04X}")
        print("same classes as llama.cpp's table")
    run_list = runs(classes)
    pathlib.Path(args.output).write_text(render(run_list), encoding="utf-8")
    print(f"{args.output}: {len(run_list)} runs")


if __name__ == "__main__":
    main()
