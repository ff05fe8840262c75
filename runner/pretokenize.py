"""BPE pre-tokenizers: the regular expressions llama.cpp applies before byte-level BPE.

tokenizer.ggml.pre in a GGUF names the pre-tokenizer. Each one is a list of regular expressions
applied in turn: the first splits the text into pieces, each next one splits every piece further
(a match never crosses a piece boundary, and the text between two matches is a piece of its own).
The expressions are llama.cpp's (src/llama-vocab.cpp, llm_tokenizer_bpe), written for the `regex`
module, whose \\p{L}/\\p{N} classes and lookaheads behave like llama.cpp's own matchers.
"""

from __future__ import annotations

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

_DEFAULT = (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]")
_FALCON = (r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, r"[0-9][0-9][0-9]")
_STARCODER = (r"\p{N}", _GPT2)  # also smollm, refact, command-r, codeshell, exaone, minerva


@dataclass(frozen=True)
class PreTokenizer:
    """One BPE pre-tokenizer: its regexes and the vocabulary flags llama.cpp ties to its name."""
    name: str
    patterns: tuple
    ignore_merges: bool = False  # a piece that is a whole token is taken as is
    clean_spaces: bool = True  # detokenize drops the space in " ,", " 's", ... (llama.cpp)
    add_bos: bool = False  # default for tokenizer.ggml.add_bos_token when the key is absent

    def split(self, text: str) -> list:
        """The pieces of `text` (str), in order; their concatenation is `text`."""
        pieces = [text] if text else []
        for pattern in _compiled(self.patterns):
            out = []
            for piece in pieces:
                start = 0
                for m in pattern.finditer(piece):
                    s, e = m.span()
                    if s > start:
                        out.append(piece[start:s])
                    if e > s:
                        out.append(piece[s:e])
                    start = e
                if start < len(piece):
                    out.append(piece[start:])
            pieces = out
        return pieces


@lru_cache(maxsize=None)
def _compiled(patterns: tuple) -> tuple:
    return tuple(regex.compile(p) for p in patterns)


def _table():
    t = {}

    def add(names, **kw):
        for n in names:
            t[n] = kw

    add(["default"], patterns=_DEFAULT)
    add(["llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"],
        patterns=(_LLAMA3,), ignore_merges=True, add_bos=True)
    add(["dbrx", "smaug-bpe"], patterns=(_LLAMA3,))
    add(["qwen2", "deepseek-r1-qwen"], patterns=(_QWEN2,), clean_spaces=False)
    add(["stablelm2", "megrez"], patterns=(_QWEN2,))
    # "gpt2" is not a name llama.cpp knows (its converter writes "gpt-2"); accepted as an alias.
    add(["gpt-2", "gpt2", "phi-2", "jina-es", "jina-de", "jina-v2-es", "jina-v2-de", "mpt", "olmo",
         "exaone4"], patterns=(_GPT2,))
    add(["smollm", "command-r"], patterns=_STARCODER, clean_spaces=False)
    add(["starcoder", "refact", "codeshell", "exaone", "minerva-7b"], patterns=_STARCODER)
    add(["falcon"], patterns=_FALCON)
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
