"""BPE pre-tokenizers: the regular expressions llama.cpp applies before BPE.

tokenizer.ggml.pre in a GGUF names the pre-tokenizer. Each one is a list of regular expressions
applied in turn: the first splits the text into pieces, each next one splits every piece further
(a match never crosses a piece boundary, and the text between two matches is a piece of its own).
The expressions are llama.cpp's (src/llama-vocab.cpp, llm_tokenizer_bpe), written for the `regex`
module, whose \\s and lookaheads behave like llama.cpp's own matchers.

Which text an expression sees follows llama.cpp (unicode_regex_split):
- one with a \\p{..} class is matched against a copy of the text in which every non-ASCII
  character stands for its class in llama.cpp's Unicode 15.1 tables (_collapse), so \\p{L} etc.
  are llama.cpp's whatever Unicode version the `regex` module has;
- one without (deepseek's literal ranges) is matched against a copy in which non-ASCII whitespace
  is U+000B (_shadow): a class listing such a character (U+3000 in deepseek-llm's) misses it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import lru_cache

import regex

__all__ = ["PreTokenizer", "UnknownPreTokenizer", "bytes_to_unicode", "pre_tokenizer"]

# GPT-2's pattern (contractions, letters, digits, other, whitespace not followed by a non-space).
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
# Llama 3 (case-insensitive contractions spelled out, digits in groups of up to three).
_LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
           r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen2: as Llama 3 with single digits.
_QWEN2 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
          r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen3.5: as Qwen2 with combining marks (\p{M}) kept in words.
_QWEN35 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
           r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+"
           r"|\s+(?!\S)|\s+")

# Tekken (Mistral-Nemo): as Qwen2 with words split before an upper-case run ("camelCase" -> "camel",
# "Case") and "/" kept after punctuation. Mistral's pattern has \p{Lu}/\p{Ll}-style classes; llama.cpp
# writes "a letter that is not a-z" for upper and "a letter that is not A-Z" for lower, so outside
# ASCII every letter counts as both (its collapsed text keeps no case), and so here.
_TEKKEN = (r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+"
           r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*"
           r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# DeepSeek's own split: each CR/LF alone, then Latin/Greek/Cyrillic/... letter runs, ASCII and
# full-width punctuation runs (each with one optional leading space), trailing whitespace, CJK and
# Hangul runs, digits. llama.cpp writes "\s+$"; ECMAScript's $ is the end of the piece only (\Z).
_CJK = r"[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
_DEEPSEEK_LLM = (
    r"[\r\n]",
    r"\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293"
    r"\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c"
    r"\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5"
    r"\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77"
    r"\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59"
    r"\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc"
    r"\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107"
    r"\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
    r"\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee"
    r"\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e"
    r"\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f"
    r"\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2"
    r"\U000118a0-\U000118df\U0001e900-\U0001e943]+",
    r"\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
    r"\s+\Z",
    _CJK,
    r"\p{N}+",
)
_DEEPSEEK_CODER = (r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK, r"\p{N}")

_DEFAULT = (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]")
_FALCON = (r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, r"[0-9][0-9][0-9]")
_STARCODER = (r"\p{N}", _GPT2)  # also smollm, refact, command-r, codeshell, exaone, minerva
# Gemma 4: no word split; runs of newlines apart from the rest (BPE asserts no newline in a merge).
_NEWLINES = (r"[^\n]+|[\n]+",)


@dataclass(frozen=True)
class PreTokenizer:
    """One BPE pre-tokenizer: its regexes and the vocabulary flags llama.cpp ties to its name."""
    name: str
    patterns: tuple
    ignore_merges: bool = False  # a piece that is a whole token is taken as is
    clean_spaces: bool = True  # detokenize drops the space in " ,", " 's", ... (llama.cpp)
    add_bos: bool = False  # default for tokenizer.ggml.add_bos_token when the key is absent
    force_bos: bool = False  # add BOS even when tokenizer.ggml.add_bos_token says false (gemma4)
    byte_encode: bool = True  # GPT-2's bytes_to_unicode; False: characters, <0xXX> byte tokens
    escape_spaces: bool = False  # " " becomes "▁" before splitting, and back in detokenize
    newline_tokens: bool = False  # a piece of newlines only that is a token is taken as is

    def split(self, text: str) -> list:
        """The pieces of `text` (str), in order; their concatenation is `text`."""
        if not text:
            return []
        views = {}  # the text each kind of expression is matched against (see _compiled)
        bounds = [0, len(text)]
        for pattern, by_class in _compiled(self.patterns):
            subject = views.get(by_class)
            if subject is None:
                subject = views[by_class] = _collapse(text) if by_class else _shadow(text)
            out = [0]
            for a, b in zip(bounds, bounds[1:]):
                at = 0
                for m in pattern.finditer(subject[a:b]):
                    s, e = m.span()
                    if s > at:
                        out.append(a + s)
                    if e > s:
                        out.append(a + e)
                    at = e
                if out[-1] != b:
                    out.append(b)
            bounds = out
        return [text[a:b] for a, b in zip(bounds, bounds[1:])]


@lru_cache(maxsize=None)
def _compiled(patterns: tuple) -> tuple:
    """(compiled, by_class) per expression. An expression with a \\p{..} class (by_class) is
    matched against _collapse(text), one without against _shadow(text), as llama.cpp does."""
    out = []
    for p in patterns:
        by_class = "\\p{" in p
        if by_class and (not p.isascii() or "\\u" in p or "\\U" in p):
            raise ValueError(f"{p!r}: a \\p{{..}} class and non-ASCII characters (as llama.cpp, "
                             "not supported)")
        out.append((regex.compile(p), by_class))
    return tuple(out)


# llama.cpp's whitespace (unicode_set_whitespace, Unicode's White_Space) above U+007F
_WS = (0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000)
_WS_TO_VT = {c: 0x0B for c in _WS}
_HAS_WS = regex.compile("[" + "".join(map(chr, _WS)) + "]")


def _shadow(text: str) -> str:
    """text with non-ASCII whitespace as U+000B: what llama.cpp's std::wregex matches."""
    return text.translate(_WS_TO_VT) if not text.isascii() and _HAS_WS.search(text) else text


# One character per class whose category every `regex` version agrees on (L, M, N, P, S, other)
_STAND_IN = {"L": "\u00e9", "M": "\u0300", "N": "\u00b2", "P": "\u00a1", "S": "\u00a2",
             "-": "\u0080"}
_COLLAPSE_MAX = 1 << 16  # cached characters
_collapse_map: dict = {}
_runs = None


def _class_of(cp: int) -> str:
    """llama.cpp's class of a code point above U+007F (runner/_unicode_classes.py)."""
    global _runs
    if _runs is None:
        from ._unicode_classes import RUNS
        found = regex.findall(r"([0-9a-f]+)([-LMNPS])", "".join(RUNS))
        _runs = ([int(a, 16) for a, _ in found], [c for _, c in found])
    starts, classes = _runs
    return classes[bisect.bisect_right(starts, cp) - 1]


def _collapse(text: str) -> str:
    """text with each non-ASCII character replaced by the stand-in of its class in llama.cpp's
    tables (whitespace by U+000B): llama.cpp's collapsed text, one character per code point."""
    global _collapse_map
    if text.isascii():
        return text
    table = _collapse_map
    new = [cp for cp in map(ord, set(text)) if cp > 0x7F and cp not in table]
    if new:
        if len(table) + len(new) > _COLLAPSE_MAX:  # a new table: another thread may use the old
            table = _collapse_map = {}
            new = [cp for cp in map(ord, set(text)) if cp > 0x7F]
        for cp in new:
            table[cp] = 0x0B if cp in _WS_TO_VT else _STAND_IN[_class_of(cp)]
    return text.translate(table)


def _table():
    t = {}

    def add(names, **kw):
        for n in names:
            t[n] = kw

    add(["default"], patterns=_DEFAULT)
    add(["llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
         "jina-v5-nano"], patterns=(_LLAMA3,), ignore_merges=True, add_bos=True)
    add(["dbrx", "smaug-bpe"], patterns=(_LLAMA3,))
    add(["deepseek-llm"], patterns=_DEEPSEEK_LLM, clean_spaces=False)
    add(["deepseek-coder"], patterns=_DEEPSEEK_CODER, clean_spaces=False)
    add(["qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2"], patterns=(_QWEN2,), clean_spaces=False)
    add(["qwen35"], patterns=(_QWEN35,), clean_spaces=False)
    add(["stablelm2", "megrez"], patterns=(_QWEN2,))
    # "gpt2" is not a name llama.cpp knows (its converter writes "gpt-2"); accepted as an alias.
    add(["gpt-2", "gpt2", "phi-2", "jina-es", "jina-de", "jina-v2-es", "jina-v2-de", "gigachat",
         "a.x-4.0", "mellum", "modern-bert", "mpt", "olmo", "exaone4"], patterns=(_GPT2,))
    add(["smollm", "command-r"], patterns=_STARCODER, clean_spaces=False)
    add(["starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2"],
        patterns=_STARCODER)
    add(["falcon"], patterns=_FALCON)
    add(["tekken"], patterns=(_TEKKEN,), ignore_merges=True, clean_spaces=False, add_bos=True)
    # tokenizer.ggml.model "gemma4" always means this one, whatever tokenizer.ggml.pre says
    add(["gemma4", "granite-embed-multi-311m"], patterns=_NEWLINES, force_bos=True,
        byte_encode=False, escape_spaces=True, newline_tokens=True)
    return t


_PRE = _table()


class UnknownPreTokenizer(ValueError):
    pass


def pre_tokenizer(name: str | None) -> PreTokenizer:
    """The pre-tokenizer for a tokenizer.ggml.pre value (None or "" means "default")."""
    key = name or "default"
    try:
        kw = _PRE[key]
    except KeyError:
        known = ", ".join(sorted(_PRE))
        raise UnknownPreTokenizer(
            f"unknown BPE pre-tokenizer {name!r} (tokenizer.ggml.pre); known: {known}") from None
    return PreTokenizer(key, **kw)


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict:
    """GPT-2's byte -> printable character map: printable Latin-1 bytes map to themselves, the other
    bytes to U+0100 onwards in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out = {b: chr(b) for b in keep}
    n = 0
    for b in range(256):
        if b not in out:
            out[b] = chr(256 + n)
            n += 1
    return out
