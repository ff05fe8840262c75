"""Tokenizer built from a GGUF vocabulary, token-exact with llama.cpp.

Two vocabulary kinds (tokenizer.ggml.model):

- "gpt2": byte-level BPE. The text is split by the pre-tokenizer named in tokenizer.ggml.pre
  (cann_llm.pretokenize), each piece's UTF-8 bytes are mapped to printable characters (GPT-2's
  bytes_to_unicode) and merged pairwise by rank (tokenizer.ggml.merges), lowest rank first and
  leftmost first among equal ranks.
- "gemma4": BPE as above on characters rather than bytes, spaces written as "▁" first, the text
  split only at runs of newlines; what no merge covers becomes <0xXX> byte tokens (llama.cpp's
  pre-tokenizer "gemma4", which this model always uses).
- "llama": SentencePiece-style. Spaces become "▁" (and a "▁" is prepended at the start of the text
  and after each special token when add_space_prefix is set), characters are merged pairwise into
  the highest-scoring vocabulary entry (tokenizer.ggml.scores), leftmost first among equal
  scores; a character left that is no token is written as byte tokens <0xXX>.

Before either, special-token parsing splits the text at occurrences of control and user-defined
tokens, longest token text first (llama.cpp's tokenizer_st_partition). With special=False only the
user-defined tokens are split out, as in llama.cpp.

Detokenization follows llama.cpp's token_to_piece and detokenize: byte-level decoding for BPE,
"▁" -> " " and byte tokens for SPM and gemma4, control and unknown tokens rendered only with
special=True.
IncrementalDetokenizer turns a stream of ids into text without ever emitting a broken UTF-8
sequence.

The token texts and merge lines stay in blobs (gguf_vocab.StringArray); the text -> id and pair ->
rank tables and the merge loop are C (backend_cann/src/core/vocab.c, backend.VocabTable), so a
150k-token vocabulary holds a few MiB and no Python object per token.
"""

from __future__ import annotations

import codecs
import os
from array import array
from collections.abc import Mapping
from enum import IntFlag

import numpy as np

from . import backend as be
from .gguf_vocab import StringArray, read_metadata
from .pretokenize import PreTokenizer, bytes_to_unicode, pre_tokenizer

__all__ = ["IncrementalDetokenizer", "TokenAttr", "Tokenizer", "TokenizerError"]

_SE = "surrogateescape"


class TokenizerError(ValueError):
    pass


class TokenAttr(IntFlag):
    """llama.cpp's llama_token_attr bits."""
    UNDEFINED = 0
    UNKNOWN = 1 << 0
    UNUSED = 1 << 1
    NORMAL = 1 << 2
    CONTROL = 1 << 3
    USER_DEFINED = 1 << 4
    BYTE = 1 << 5
    NORMALIZED = 1 << 6
    LSTRIP = 1 << 7
    RSTRIP = 1 << 8
    SINGLE_WORD = 1 << 9


# tokenizer.ggml.token_type values (llama_token_type) -> attributes
_TYPE_TO_ATTR = {0: TokenAttr.UNDEFINED, 1: TokenAttr.NORMAL, 2: TokenAttr.UNKNOWN,
                 3: TokenAttr.CONTROL, 4: TokenAttr.USER_DEFINED, 5: TokenAttr.UNUSED,
                 6: TokenAttr.BYTE}

_CONTROL = int(TokenAttr.CONTROL)
_UNKNOWN = int(TokenAttr.UNKNOWN)
_USER = int(TokenAttr.USER_DEFINED)
_NORMAL = int(TokenAttr.NORMAL)
_BYTE = int(TokenAttr.BYTE)
_UNUSED = int(TokenAttr.UNUSED)
_LSTRIP = int(TokenAttr.LSTRIP)
_RSTRIP = int(TokenAttr.RSTRIP)

# Tokens llama.cpp finds by text when the GGUF names none (llama_vocab::load): per kind, the keys
# that name it (a later key wins) and the texts; the token found is made a control token. When
# several texts of one kind are in a vocabulary llama.cpp takes whichever its hash map yields
# first; this takes the first listed.
_EOT_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
              "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
              "<end_of_utterance>")
_FOUND_BY_TEXT = (
    ("eot", ("eot_token_id",), _EOT_TEXTS),
    ("eom", ("eom_token_id",), ("<|eom_id|>",)),
    ("fim_pre", ("fim_pre_token_id", "prefix_token_id"),
     ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
      "<|code_prefix|>", "<|prefix|>")),
    ("fim_suf", ("fim_suf_token_id", "suffix_token_id"),
     ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
      "<|code_suffix|>", "<|suffix|>")),
    ("fim_mid", ("fim_mid_token_id", "middle_token_id"),
     ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
      "<|code_middle|>", "<|middle|>")),
    ("fim_pad", ("fim_pad_token_id",), ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]")),
    ("fim_rep", ("fim_rep_token_id",),
     ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>")),
    ("fim_sep", ("fim_sep_token_id",), ("<|file_sep|>",)),
)
# end-of-generation texts; these are made control tokens too
_EOG_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
              "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>",
              "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>",
              "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~[")
_ALWAYS_RENDERED = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")

_C_SPACE = " \t\n\v\f\r"  # C isspace() in the "C" locale
_WORD_CACHE_MAX = 1 << 16
_WORD_CACHE_LEN = 64  # longer pre-tokenized words (gemma4 splits at newlines only) are not cached


def _string_array(strings) -> StringArray:
    """The strings as one blob (a GGUF string array read with string_arrays=True already is)."""
    return strings if isinstance(strings, StringArray) else StringArray.from_strings(strings)


class _TokenIds(Mapping):
    """Token text -> id, looked up in the C table (no dict of 150k strings)."""

    def __init__(self, table: be.VocabTable, texts: StringArray):
        self._find = table.find
        self._texts = texts

    def get(self, text, default=None):
        if type(text) is not str:
            return default
        i = self._find(text.encode("utf-8", _SE))
        return default if i < 0 else i

    def __getitem__(self, text):
        i = self.get(text)
        if i is None:
            raise KeyError(text)
        return i

    def __contains__(self, text):
        return self.get(text) is not None

    def __iter__(self):
        return iter(self._texts)

    def __len__(self):
        return len(self._texts)


class Tokenizer:
    """A llama.cpp-compatible tokenizer. Build it with Tokenizer.from_gguf(path)."""

    def __init__(self, metadata: dict, name: str = "model"):
        self.name = name
        model = metadata.get("tokenizer.ggml.model")
        tokens = metadata.get("tokenizer.ggml.tokens")
        if model is None or tokens is None:
            raise TokenizerError(f"{name}: the GGUF has no tokenizer.ggml.model/tokens")
        n = len(tokens)
        self.model = model
        self.pre: PreTokenizer | None = None
        merges = None
        if model == "llama":
            self.kind = "spm"
            bos, eos, unk = 1, 2, 0
            add_space_prefix, clean_spaces, add_bos = True, False, True
        elif model in ("gpt2", "gemma4"):
            self.kind = "bpe"
            self.pre = pre_tokenizer("gemma4" if model == "gemma4"
                                     else metadata.get("tokenizer.ggml.pre"))
            merges = metadata.get("tokenizer.ggml.merges")
            if merges is None:
                raise TokenizerError(f"{name}: BPE vocabulary without tokenizer.ggml.merges")
            bos, eos, unk = (11, 11, None) if model == "gpt2" else (None, None, None)
            add_space_prefix, clean_spaces, add_bos = False, self.pre.clean_spaces, self.pre.add_bos
        else:
            raise TokenizerError(f"{name}: unsupported tokenizer.ggml.model {model!r} "
                                 "(supported: 'gpt2' and 'gemma4' BPE, 'llama' SentencePiece)")
        add_eos = False
        add_space_prefix = bool(metadata.get("tokenizer.ggml.add_space_prefix", add_space_prefix))

        # the texts as one blob, indexed in C (src/core/vocab.c): no object per token or merge
        texts = _string_array(tokens)
        if np.any(texts.offsets[1:] == texts.offsets[:-1]):
            texts = StringArray.from_strings(t or f"[EMPTY_{i}]" for i, t in enumerate(texts))
        try:
            self._table = be.VocabTable(texts.text, texts.offsets)
        except ValueError as e:
            if getattr(e, "duplicate", None) is None:
                raise TokenizerError(f"{name}: {e}") from None
            a, b = e.duplicate
            raise TokenizerError(f"{name}: duplicate token {texts[b]!r} (ids {a} and {b})") from None
        if merges is not None:
            merges = _string_array(merges)
            self._table.set_merges(merges.text, merges.offsets)
        scores = metadata.get("tokenizer.ggml.scores")
        self.scores = None                  # only SentencePiece merges by score
        if self.kind == "spm" and scores is not None:
            self.scores = np.array(scores[:n], dtype=np.float64)
            if self.scores.shape != (n,):
                raise TokenizerError(f"{name}: {self.scores.size} scores for {n} tokens")
            self._table.set_scores(self.scores)
        types = metadata.get("tokenizer.ggml.token_type")
        if types is not None:
            lut = np.full(max(_TYPE_TO_ATTR) + 1, int(TokenAttr.UNDEFINED), dtype=np.uint16)
            for t, a in _TYPE_TO_ATTR.items():
                lut[t] = int(a)
            codes = np.asarray(types[:n], dtype=np.int64)
            known = (codes >= 0) & (codes < lut.size)
            attr_values = np.where(known, lut[np.where(known, codes, 0)], int(TokenAttr.UNDEFINED))
            if attr_values.size < n:
                attr_values = np.concatenate([attr_values, np.full(n - attr_values.size, _NORMAL)])
        else:
            attr_values = np.full(n, _NORMAL)
        attrs = array("H", attr_values.astype(np.uint16).tobytes())
        self.tokens = texts                     # id -> text (decoded on access)
        self.token_to_id = _TokenIds(self._table, texts)
        self.attrs = attrs                      # id -> TokenAttr bits, as ints
        self.n_vocab = n

        def special_id(key, default):
            v = metadata.get(key)
            if default is not None and default >= n:
                default = None
            if v is None:
                return default
            return int(v) if 0 <= int(v) < n else default

        self.bos_id = special_id("tokenizer.ggml.bos_token_id", bos)
        self.eos_id = special_id("tokenizer.ggml.eos_token_id", eos)
        self.unk_id = special_id("tokenizer.ggml.unknown_token_id", unk)
        self.pad_id = special_id("tokenizer.ggml.padding_token_id", None)
        # eot, eom, fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep: from the GGUF, else found
        # by text in _fix_attributes
        self.special_ids = {}
        for kind, keys, _ in _FOUND_BY_TEXT:
            tid = None
            for k in keys:
                tid = special_id(f"tokenizer.ggml.{k}", tid)
            self.special_ids[kind] = tid
        self.add_bos = bool(metadata.get("tokenizer.ggml.add_bos_token", add_bos))
        self.add_eos = bool(metadata.get("tokenizer.ggml.add_eos_token", add_eos))
        if self.pre is not None and self.pre.force_bos:
            self.add_bos = True
        if self.add_bos and self.bos_id is None:
            raise TokenizerError(f"{name}: add_bos_token is true but there is no BOS token")
        if self.add_eos and self.eos_id is None:
            raise TokenizerError(f"{name}: add_eos_token is true but there is no EOS token")
        self.add_space_prefix = add_space_prefix
        self.clean_spaces = clean_spaces
        self.chat_template = metadata.get("tokenizer.chat_template")
        self.model_name = metadata.get("general.name") or name

        self._fix_attributes()
        self.eot_id = self.special_ids["eot"]
        self.eom_id = self.special_ids["eom"]
        # special-token cache: control, user-defined and unknown tokens, longest text first
        special = np.flatnonzero(np.frombuffer(attrs, dtype=np.uint16)
                                 & (_CONTROL | _USER | _UNKNOWN)).tolist()
        lengths = np.diff(texts.offsets.astype(np.int64))
        special.sort(key=lambda i: -lengths[i])
        self._special = [(i, texts[i]) for i in special]
        self._word_cache: dict = {}
        self._piece_cache = ({}, {})            # per special flag: id -> token_to_piece
        if self.kind == "bpe":
            self._bpe_flags = ((be.BPE_BYTE_LEVEL if self.pre.byte_encode else 0)
                               | (be.BPE_IGNORE_MERGES if self.pre.ignore_merges else 0)
                               | (be.BPE_NEWLINE_TOKENS if self.pre.newline_tokens else 0))
            # GPT-2's character -> byte map, and the same as a str.translate table to Latin-1
            # characters (one outside the map becomes U+FFFF or stays above U+00FF, so encoding
            # to Latin-1 fails on it)
            dec = {c: b for b, c in bytes_to_unicode().items()}
            table = {ord(c): chr(b) for c, b in dec.items()}
            table.update((i, "\uffff") for i in range(256) if chr(i) not in dec)
            self._byte_dec = (dec, table)

    @classmethod
    def from_gguf(cls, path) -> "Tokenizer":
        path = os.fspath(path)
        meta = read_metadata(path, string_arrays=True)
        return cls(meta, name=os.path.basename(path))

    # -- load-time fix-ups (llama_vocab::load) -------------------------------------------------

    def _fix_attributes(self):
        attrs, t2i, ids = self.attrs, self.token_to_id, self.special_ids
        for kind, _, texts in _FOUND_BY_TEXT:
            if ids[kind] is None:
                i = next((t2i[t] for t in texts if t in t2i), None)
                if i is not None:
                    ids[kind] = i
                    attrs[i] |= _CONTROL
        for i in np.flatnonzero(np.frombuffer(attrs, dtype=np.uint16) & _CONTROL).tolist():
            if "unused" in self.tokens[i]:
                attrs[i] |= _UNUSED
        eog = {ids[k] for k in ("fim_pad", "fim_rep", "fim_sep") if ids[k] is not None}
        for t in _EOG_TEXTS:
            i = t2i.get(t)
            if i is not None:
                eog.add(i)
                attrs[i] |= _CONTROL
        for text in _ALWAYS_RENDERED:
            i = t2i.get(text)
            if i is not None:
                attrs[i] = _USER
        eog.update(i for i in (self.eos_id, ids["eot"], ids["eom"]) if i is not None)
        texts = {self.tokens[i]: i for i in eog}
        # gpt-oss (harmony) and solar-open end a message with <|end|> but not the generation
        if "<|end|>" in texts and ("<|call|>" in texts or "<|calls|>" in texts) and (
                "<|return|>" in texts or "<|flush|>" in texts):
            eog.discard(texts["<|end|>"])
            attrs[texts["<|end|>"]] = _USER
        # gemma4 and plamo2 have an ordinary "</s>"
        if "</s>" in texts and ("<|tool_response>" in texts or "<|plamo:eos|>" in texts):
            eog.discard(texts["</s>"])
            attrs[texts["</s>"]] = _NORMAL
        self.eog_ids = frozenset(eog)
        name = str(self.model_name).lower()
        if "phi-3" in name or "phi3" in name:
            for i in range(self.n_vocab):
                if attrs[i] & (_CONTROL | _USER | _UNKNOWN):
                    attrs[i] |= _RSTRIP
            for t, on in (("</s>", True), ("<unk>", False), ("<s>", False), ("<|endoftext|>", False)):
                if t in t2i:
                    attrs[t2i[t]] = attrs[t2i[t]] | _RSTRIP if on else attrs[t2i[t]] & ~_RSTRIP

    # -- tokenize ------------------------------------------------------------------------------

    def tokenize(self, text: str, *, add_special: bool = True, special: bool = True) -> list:
        """Token ids of `text`.

        add_special: add BOS/EOS as the model's add_bos_token/add_eos_token say (llama.cpp's
        add_special). special: text matching a control token (e.g. "<|im_start|>") becomes that
        token (llama.cpp's parse_special); user-defined tokens are always matched.
        """
        if not isinstance(text, str):
            raise TypeError(f"tokenize() takes str, not {type(text).__name__}")
        frags = self._partition(text, special) if text else []
        out = []
        if self.kind == "spm":
            if add_special and self.add_bos:
                out.append(self.bos_id)
            prev_special = True
            for f in frags:
                if isinstance(f, int):
                    out.append(f)
                    prev_special = True
                    continue
                if self.add_space_prefix and prev_special:
                    f = " " + f
                self._spm(f.replace(" ", "▁"), out)
                prev_special = False
        else:
            if add_special and self.add_bos:
                out.append(self.bos_id)
            escape = self.pre.escape_spaces
            for f in frags:
                if isinstance(f, int):
                    out.append(f)
                else:
                    self._bpe(f.replace(" ", "▁") if escape else f, out)
        if add_special and self.add_eos:
            out.append(self.eos_id)
        return out

    def _partition(self, text: str, special: bool) -> list:
        frags = [text]
        attrs = self.attrs
        for tid, tt in self._special:
            attr = attrs[tid]
            if not special and attr & (_CONTROL | _UNKNOWN):
                continue
            if not any(type(f) is str and tt in f for f in frags):
                continue
            new = []
            for f in frags:
                if type(f) is not str or tt not in f:
                    new.append(f)
                    continue
                start = 0
                while True:
                    m = f.find(tt, start)
                    if m < 0:
                        break
                    left = f[start:m]
                    if attr & _LSTRIP:
                        left = left.rstrip(_C_SPACE)
                    if left:
                        new.append(left)
                    new.append(tid)
                    start = m + len(tt)
                    if attr & _RSTRIP:
                        while start < len(f) and f[start] in _C_SPACE:
                            start += 1
                if start < len(f):
                    new.append(f[start:])
            frags = new
        return frags

    # BPE (byte-level, or on characters for gemma4): the merge loop is vocab.c's
    def _bpe(self, text: str, out: list):
        cache = self._word_cache
        bpe, flags = self._table.bpe, self._bpe_flags
        for piece in self.pre.split(text):
            ids = cache.get(piece)
            if ids is None:
                ids = tuple(bpe(piece.encode("utf-8", _SE), flags))
                if len(piece) <= _WORD_CACHE_LEN:
                    if len(cache) >= _WORD_CACHE_MAX:
                        cache.clear()
                    cache[piece] = ids
            out.extend(ids)

    # SentencePiece-style, the whole fragment at once
    def _spm(self, text: str, out: list):
        try:
            out += self._table.spm(text.encode("utf-8", _SE),
                                   -1 if self.unk_id is None else self.unk_id)
        except ValueError as e:
            raise TokenizerError(f"{self.name}: {e}") from None

    # -- detokenize ----------------------------------------------------------------------------

    def token_to_piece(self, token: int, special: bool = False) -> bytes:
        """The bytes of one token (llama.cpp's token_to_piece with lstrip 0): control and unknown
        tokens give b"" unless special; user-defined tokens give their text; unused tokens b""."""
        cache = self._piece_cache[1 if special else 0]
        piece = cache.get(token)
        if piece is None:
            token = int(token)
            piece = cache[token] = self._piece(token, bool(special))
        return piece

    def _piece(self, token: int, special: bool) -> bytes:
        if not 0 <= token < self.n_vocab:
            raise IndexError(f"token id {token} out of range (n_vocab {self.n_vocab})")
        attr = self.attrs[token]
        if not special and attr & (_CONTROL | _UNKNOWN):
            return b""
        texts = self.tokens
        off = texts._off
        text = texts.text[off[token]:off[token + 1]].decode("utf-8", _SE)   # tokens[token]
        if attr & (_CONTROL | _UNKNOWN | _USER):
            return text.encode("utf-8", _SE)
        if attr & _NORMAL:
            if self.kind == "spm" or self.pre.escape_spaces:
                return text.replace("▁", " ").encode("utf-8", _SE)
            dec, table = self._byte_dec
            try:
                return text.translate(table).encode("latin-1")
            except UnicodeEncodeError:
                pass
            out = bytearray()
            for ch in text:
                b = dec.get(ch)
                if b is not None:
                    out.append(b)
                else:
                    u = ch.encode("utf-8", _SE)
                    out += b"[UNK_BYTE_0x" + u.hex().encode() + text.encode("utf-8", _SE) + b"]"
            return bytes(out)
        if attr & _BYTE:
            return bytes([int(text[3:5], 16)])
        return b""

    def detokenize_bytes(self, ids, *, special: bool = False, remove_special: bool = False) -> bytes:
        """llama.cpp's llama_detokenize(remove_special, unparse_special=special) as bytes: the first
        piece loses one leading space when add_space_prefix is set, and the clean-up of spaces
        before punctuation and contractions runs when the vocabulary asks for it (clean_spaces)."""
        ids = list(ids)
        remove_space = self.add_space_prefix
        if remove_special and self.add_bos and ids and ids[0] == self.bos_id:
            remove_space = False
            ids = ids[1:]
        if remove_special and self.add_eos and ids and ids[-1] == self.eos_id:
            ids = ids[:-1]
        get = self._piece_cache[1 if special else 0].get
        piece_of = self.token_to_piece
        pieces = [p if (p := get(t)) is not None else piece_of(t, special) for t in ids]
        if remove_space and pieces and pieces[0][:1] == b" ":
            pieces[0] = pieces[0][1:]
        if self.clean_spaces:
            return bytes(_clean_spaces(bytearray(b"".join(pieces))))
        return b"".join(pieces)

    def detokenize(self, ids, *, special: bool = False, remove_special: bool = False) -> str:
        """Text of `ids` (invalid UTF-8 becomes U+FFFD). special=True renders control tokens."""
        return self.detokenize_bytes(ids, special=special,
                                     remove_special=remove_special).decode("utf-8", "replace")

    def incremental(self, *, special: bool = False, strip_leading_space: bool = False):
        """An IncrementalDetokenizer over this vocabulary."""
        return IncrementalDetokenizer(self, special=special, strip_leading_space=strip_leading_space)

    def is_eog(self, token: int) -> bool:
        return token in self.eog_ids

    def __repr__(self):
        pre = f", pre={self.pre.name!r}" if self.pre else ""
        return f"<Tokenizer {self.model_name!r} {self.kind}{pre} n_vocab={self.n_vocab}>"


def _clean_spaces(text: bytearray) -> bytearray:
    """llama.cpp's clean_up_tokenization_spaces passes over the detokenized bytes."""
    # 1: " ?", " !", " .", " ," lose the space
    out = bytearray(text[:1])
    for i in range(1, len(text)):
        x = text[i]
        if text[i - 1] == 0x20 and x in b"?!.,":
            out.pop()
        out.append(x)
    # 2: " ' " becomes "'" (the byte after the apostrophe is zeroed and skipped, as in llama.cpp)
    text = out
    out = bytearray(text[:1])
    i = 1
    n = len(text)
    while i < n:
        x = text[i]
        if x == 0x27 and i + 1 < n and text[i - 1] == 0x20 and text[i + 1] == 0x20:
            out.pop()
            text[i + 1] = 0
            i += 1
            out.append(x)
            i += 1
            continue
        out.append(x)
        i += 1
    # 3: " 's", " 'm", " 're", " 've" lose the space
    text = out
    out = bytearray(text[:1])
    n = len(text)
    for i in range(1, n):
        x = text[i]
        if text[i - 1] == 0x20 and x == 0x27 and i + 1 < n:
            x1 = text[i + 1]
            if x1 in b"sm":
                out.pop()
            elif x1 not in b"td" and i + 2 < n:
                x2 = text[i + 2]
                if (x1, x2) in ((0x72, 0x65), (0x76, 0x65)):
                    out.pop()
        out.append(x)
    return out


class IncrementalDetokenizer:
    """Turns token ids into text as they come (streaming) and never emits part of a UTF-8
    sequence: bytes of an incomplete character wait for the next tokens; bytes that can never
    form a character come out as U+FFFD.

        det = tok.incremental()
        for t in ids:
            print(det.add(t), end="")
        print(det.flush())
    """

    def __init__(self, tokenizer: Tokenizer, *, special: bool = False,
                 strip_leading_space: bool = False):
        self.tokenizer = tokenizer
        self.special = special
        self._strip = strip_leading_space and tokenizer.add_space_prefix
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._first = True

    def add(self, token: int) -> str:
        piece = self.tokenizer.token_to_piece(int(token), self.special)
        if self._first:
            self._first = False
            if self._strip and piece[:1] == b" ":
                piece = piece[1:]
        return self._decoder.decode(piece)

    def add_many(self, tokens) -> str:
        return "".join(self.add(t) for t in tokens)

    @property
    def pending(self) -> bytes:
        """Bytes held back because they start a character not yet complete."""
        return self._decoder.getstate()[0]

    def flush(self) -> str:
        """What is left at the end of the stream (an incomplete character becomes U+FFFD)."""
        return self._decoder.decode(b"", final=True)
