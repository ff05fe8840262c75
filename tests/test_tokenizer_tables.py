"""The tokenizer's C tables and merge loop (src/core/vocab.c) against llama.cpp's rules in Python.

The reference below is llama.cpp's work-queue merge on Python strings with a (left, right) -> rank
map built as llama.cpp builds bpe_ranks; random vocabularies, merge lists and words (halves and
results that are no token, bytes no token covers, repeated and unsplittable lines, score ties)
must give the same ids through Tokenizer as through it.
"""

import heapq
import random

import pytest

from cann_llm import backend as be
from cann_llm.gguf_vocab import StringArray, read_metadata
from cann_llm.pretokenize import bytes_to_unicode
from cann_llm.tokenizer import Tokenizer, TokenizerError

from llama_cpp_data import vocab_dir

SE = "surrogateescape"


def ref_merge(symbols: list, priority) -> list:
    """Best pair first (lowest priority, leftmost among equals); None never merges."""
    text = list(symbols)
    n = len(text)
    prev, nxt = list(range(-1, n - 1)), list(range(1, n + 1))
    if n:
        nxt[-1] = -1
    heap = []

    def push(a, b):
        p = priority(text[a], text[b])
        if p is not None:
            heapq.heappush(heap, (p, a, b, len(text[a]) + len(text[b])))

    for i in range(n - 1):
        push(i, i + 1)
    while heap:
        _, a, b, size = heapq.heappop(heap)
        if not text[a] or not text[b] or len(text[a]) + len(text[b]) != size:
            continue
        text[a], text[b] = text[a] + text[b], ""
        nxt[a] = nxt[b]
        if nxt[a] >= 0:
            prev[nxt[a]] = a
        if prev[a] >= 0:
            push(prev[a], a)
        if nxt[a] >= 0:
            push(a, nxt[a])
    return [s for s in text if s]


def ref_bpe_ranks(lines) -> dict:
    ranks = {}
    for rank, line in enumerate(lines):
        pos = line.find(" ", 1)
        if pos >= 0:
            ranks.setdefault((line[:pos], line[pos + 1:]), rank)
    return ranks


def ref_bpe(word, tokens, lines, byte_level):
    t2i = {t: i for i, t in enumerate(tokens)}
    ranks = ref_bpe_ranks(lines)
    if byte_level:
        enc = bytes_to_unicode()
        word = "".join(enc[b] for b in word.encode("utf-8", SE))
    ids = []
    for s in ref_merge(list(word), lambda a, b: ranks.get((a, b))):
        if s in t2i:
            ids.append(t2i[s])
            continue
        for b in s.encode("utf-8", SE):
            t = t2i.get(bytes([b]).decode("utf-8", SE) if byte_level else f"<0x{b:02X}>")
            if t is not None:
                ids.append(t)
    return ids


def ref_spm(text, tokens, scores, unk):
    t2i = {t: i for i, t in enumerate(tokens)}
    ids = []
    for s in ref_merge(list(text), lambda a, b: -scores[t2i[a + b]] if a + b in t2i else None):
        if s in t2i:
            ids.append(t2i[s])
            continue
        for b in s.encode("utf-8", SE):
            t = t2i.get(f"<0x{b:02X}>", t2i.get(bytes([b]).decode("utf-8", SE), unk))
            if t is None:
                raise TokenizerError(f"no byte token for 0x{b:02X}")
            ids.append(t)
    return ids


def random_string(rng, alphabet, lo, hi):
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))


def test_merge_table_as_llama_cpp():
    """A pair has a rank exactly when llama.cpp's (left, right) map holds it (each line split at
    its first space after the first character, the first occurrence of a line winning), also for
    lines that start with a space, have more than one space, repeat, or have nothing to split."""
    lines = ["a b", "ab c d", " x y", "  z", "nospace", "a b", "\u2581 \u2581", "c d e"]
    symbols = ["", "a", "b", "ab", "c", "d", "c d", "ab c", " x", "x", "y", " ", "z", "nospace",
               "\u2581", "d e", "e"]
    table = be.VocabTable(b"ab", StringArray.from_strings(["a", "b"]).offsets)
    merges = StringArray.from_strings(lines)
    table.set_merges(merges.text, merges.offsets)
    expected = ref_bpe_ranks(lines)
    assert expected[("ab", "c d")] == 1 and expected[(" x", "y")] == 2 and expected[("a", "b")] == 0
    for left in symbols:
        for right in symbols:
            rank = table.merge_rank(left.encode(), right.encode())
            assert rank == expected.get((left, right), -1), (left, right)


@pytest.mark.parametrize("model", ["gpt2", "gemma4"])
def test_bpe_merge_loop_as_reference(model):
    rng = random.Random(model)
    byte_level = model == "gpt2"
    raw = ["a", "b", "c", "é", "\u4e2d", "\U0001f600", "\n"] + ([] if byte_level else
                                                                 ["\u2581", "\udcff"])
    enc = bytes_to_unicode()
    # the units merges and tokens are made of: mapped bytes (byte-level) or characters
    units = sorted({enc[b] for c in raw for b in c.encode("utf-8", SE)}) if byte_level else raw
    for trial in range(6):
        tokens = [u for u in units if rng.random() < 0.8]            # some units are no token
        if not byte_level:
            tokens += [f"<0x{b:02X}>" for b in range(256) if rng.random() < 0.7]
        tokens += [random_string(rng, units, 2, 5) for _ in range(60)]
        tokens = list(dict.fromkeys(tokens))
        lines = [f"{random_string(rng, units, 1, 3)} {random_string(rng, units, 1, 3)}"
                 for _ in range(80)]
        lines += rng.sample(lines, 5) + ["nospace", " a b", "a  b"]  # repeats, odd lines
        rng.shuffle(lines)
        tok = Tokenizer({"tokenizer.ggml.model": model, "tokenizer.ggml.pre": "gpt-2",
                         "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.merges": lines,
                         "tokenizer.ggml.bos_token_id": 0}, name="random")
        for _ in range(60):
            word = random_string(rng, raw, 1, 12)
            assert tok._table.bpe(word.encode("utf-8", SE), tok._bpe_flags & be.BPE_BYTE_LEVEL) \
                == ref_bpe(word, tokens, lines, byte_level), (trial, word)


def test_spm_merge_loop_as_reference():
    rng = random.Random(7)
    chars = ["a", "b", "c", "\u2581", "é", "\u4e2d", "\U0001f600", "\udcff"]
    for trial in range(8):
        tokens = ["<unk>"] + [c for c in chars if rng.random() < 0.7]
        tokens += [f"<0x{b:02X}>" for b in range(256) if rng.random() < 0.8]
        tokens += [random_string(rng, chars, 2, 5) for _ in range(80)]
        tokens = list(dict.fromkeys(tokens))
        scores = [float(rng.choice([-3, -2, -1, 0])) for _ in tokens]   # many ties
        tok = Tokenizer({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
                         "tokenizer.ggml.scores": scores}, name="random")
        for _ in range(60):
            text = random_string(rng, chars, 1, 16)
            unk = rng.choice([0, None])
            try:
                expected = ref_spm(text, tokens, scores, unk)
            except TokenizerError as e:
                with pytest.raises(ValueError, match=str(e)):
                    tok._table.spm(text.encode("utf-8", SE), -1)
                continue
            assert tok._table.spm(text.encode("utf-8", SE), -1 if unk is None else unk) \
                == expected, (trial, text)
            if unk == 0:
                assert tok.tokenize(text.replace("▁", " "), add_special=False) == \
                    ref_spm("▁" + text, tokens, scores, 0)


def test_bad_vocabularies():
    with pytest.raises(TokenizerError, match=r"duplicate token 'b' \(ids 1 and 2\)"):
        Tokenizer({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["a", "b", "b"]})
    tok = Tokenizer({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["a", "", ""]})
    assert list(tok.tokens) == ["a", "[EMPTY_1]", "[EMPTY_2]"] and tok.token_to_id["[EMPTY_2]"] == 2
    with pytest.raises(ValueError, match="offsets decrease"):
        be.VocabTable(b"abc", StringArray.from_strings(["ab", "c"]).offsets[::-1].copy())
    with pytest.raises(TokenizerError, match="2 scores for 3 tokens"):
        Tokenizer({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["a", "b", "c"],
                   "tokenizer.ggml.scores": [0.0, 1.0]})


def test_string_arrays_as_lists():
    path = vocab_dir() / "ggml-vocab-qwen2.gguf"
    lists = read_metadata(path)
    blobs = read_metadata(path, string_arrays=True)
    assert lists.keys() == blobs.keys()
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges"):
        sa = blobs[key]
        assert isinstance(sa, StringArray) and len(sa) == len(lists[key])
        assert list(sa) == lists[key] and sa[-1] == lists[key][-1] and sa[3:5] == lists[key][3:5]
    with pytest.raises(IndexError):
        blobs["tokenizer.ggml.tokens"][len(lists["tokenizer.ggml.tokens"])]
    tok = Tokenizer(blobs)
    assert tok.token_to_id["<|im_start|>"] == lists["tokenizer.ggml.tokens"].index("<|im_start|>")
    assert "no such token" not in tok.token_to_id and tok.token_to_id.get(5) is None
