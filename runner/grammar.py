"""Constrained decoding: JSON schemas, JSON objects, Lark and GBNF grammars as a token mask.

The grammar engine is llguidance (Rust core, no torch): compile() turns a request's format into
a Grammar over the model's vocabulary (the LLTokenizer is built once per Tokenizer); each
sequence's Sampler holds its own Matcher, which bans the tokens the grammar does not allow
before the sampling chain runs and follows the tokens drawn.
"""

from __future__ import annotations

import json
import re
import weakref

import numpy as np

__all__ = ["Grammar", "GrammarError", "Matcher", "compile", "from_response_format",
           "ll_tokenizer"]

# compact JSON: no optional whitespace anywhere, so a model cannot pad until max_tokens
_JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}


class GrammarError(ValueError):
    """A schema or grammar the engine cannot compile (the message names the problem)."""


def _llg():
    try:
        import llguidance
    except ImportError:
        raise GrammarError("constrained decoding needs the llguidance package "
                           "(pip install 'cann-llm[server]' or pip install llguidance)") from None
    return llguidance


class _Vocab:
    """What llguidance's LLTokenizer reads from a tokenizer: each token's bytes (control tokens
    marked by a leading 0xFF, as llguidance expects), EOS, and a tokenize function."""

    def __init__(self, tok):
        from .tokenizer import TokenAttr
        special = TokenAttr.CONTROL | TokenAttr.UNKNOWN | TokenAttr.UNUSED
        self.tokens = []
        for i in range(tok.n_vocab):
            piece = tok._piece(i, True)     # token_to_piece uncached: raw bytes, SPM "▁", <0xXX> decoded
            if tok.attrs[i] & special or i in tok.eog_ids:
                piece = b"\xff" + (piece or tok.tokens[i].encode("utf-8", "replace"))
            self.tokens.append(piece)
        eos = tok.eos_id if tok.eos_id is not None else min(tok.eog_ids, default=0)
        self.eos_token_id = eos
        self.bos_token_id = tok.bos_id
        self.special_token_ids = [i for i, t in enumerate(self.tokens) if t[:1] == b"\xff"]
        self.is_tokenizer_wrapper = True
        self._tok = tok

    def __call__(self, s):
        if isinstance(s, bytes):
            s = s.decode("utf-8", "replace")
        tok = self._tok
        if tok.kind == "spm":           # no space prefix: the text continues the output
            out = []
            if s:
                tok._spm(s.replace(" ", "▁"), out)
            return out
        return tok.tokenize(s, add_special=False, special=False)


# Tokenizer -> its LLTokenizer. Kept beside the Tokenizer rather than on it: a 30th instance
# attribute costs CPython 3.11 its shared-key attribute lookup (token_to_piece 15% slower).
_LL_TOKENIZERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def ll_tokenizer(tok):
    """llguidance's LLTokenizer for our Tokenizer, built once per Tokenizer (about a second for
    150k tokens). Every end-of-generation token counts as EOS."""
    cached = _LL_TOKENIZERS.get(tok)
    if cached is None:
        llg = _llg()
        eog = sorted(tok.eog_ids) or [tok.eos_id]
        cached = llg.LLTokenizer(_Vocab(tok), n_vocab=tok.n_vocab, eos_token=eog)
        _LL_TOKENIZERS[tok] = cached
    return cached


class Grammar:
    """A compiled grammar over one vocabulary; matcher() gives a fresh per-sequence state."""

    def __init__(self, tokenizer, grammar: str, description: str):
        llg = _llg()
        self.tokenizer = tokenizer
        self.ll_tok = ll_tokenizer(tokenizer)
        self.source = grammar
        self.description = description
        is_error, messages = llg.LLMatcher.validate_grammar_with_warnings(grammar, self.ll_tok)
        if is_error:
            first = messages[0].strip().splitlines()[0] if messages else "invalid"
            raise GrammarError(f"{description}: {first}")
        probe = llg.LLMatcher(self.ll_tok, grammar, log_level=0)
        if probe.is_error():
            raise GrammarError(f"{description}: {probe.get_error()}")
        self._probe = probe

    def matcher(self) -> "Matcher":
        m, self._probe = (self._probe, None) if self._probe is not None else (None, None)
        if m is None:
            m = _llg().LLMatcher(self.ll_tok, self.source, log_level=0)
        return Matcher(m, self.tokenizer.n_vocab)

    def __repr__(self):
        return f"<Grammar {self.description}>"


class Matcher:
    """One sequence's place in its grammar: mask() bans what the grammar does not allow next,
    accept() follows a drawn token; done once the grammar can only end."""

    def __init__(self, matcher, n_vocab: int):
        self._m = matcher
        self.n_vocab = n_vocab
        self._bits = np.zeros((n_vocab + 31) // 32, dtype=np.int32)
        self._ready = False          # _bits already hold the mask of the current state

    def prepare(self) -> None:
        """Compute the next mask now (the engine does this on a worker thread while the
        forward runs; llguidance releases the GIL), so that mask() only applies it."""
        if not self._m.is_error():
            self._m.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
            self._ready = True

    def allowed(self) -> np.ndarray:
        """bool [n_vocab]: the tokens the grammar allows next (ValueError once in error)."""
        m = self._m
        if m.is_error():
            raise ValueError(f"grammar: {m.get_error()}")
        if not self._ready:
            m.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        self._ready = False
        bits = np.unpackbits(self._bits.view(np.uint8), bitorder="little")
        return bits[:self.n_vocab].view(bool)

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """A copy of float32 logits [n_vocab] with the disallowed tokens at -inf."""
        allowed = self.allowed()
        n = min(logits.shape[0], self.n_vocab)
        out = np.full(logits.shape[0], -np.inf, dtype=np.float32)
        np.copyto(out[:n], logits[:n], where=allowed[:n])
        return out

    def accept(self, token: int) -> None:
        self._ready = False
        if not self._m.consume_token(int(token)):
            raise ValueError(f"grammar: token {token} is not allowed here: {self._m.get_error()}")

    @property
    def done(self) -> bool:
        """Nothing but the end may follow (the grammar is complete and cannot grow)."""
        return self._m.is_stopped()

    @property
    def accepting(self) -> bool:
        return self._m.is_accepting()


def _json_grammar(schema, what: str) -> str:
    llg = _llg()
    try:
        return llg.LLMatcher.grammar_from_json_schema(schema, overrides=_JSON_OPTIONS)
    except (ValueError, TypeError) as e:
        raise GrammarError(f"{what}: {e}") from None


# a thinking model's reasoning before the constrained answer: free text up to </think>
_THOUGHT = 'thought[lazy]: /(?s:.*)<\\/think>/\nTHOUGHT_END: /\\n{0,2}/\n'


def _after_thinking(lark: str, think: str) -> str:
    """Lark text whose `start` becomes `answer`, preceded by a think block: optional
    (think="optional": the model may open one) or already open in the prompt ("open")."""
    body = re.sub(r"(?m)^start(\s*):", r"answer\1:", lark)
    head = ('start: think? answer\nthink: "<think>" thought THOUGHT_END\n' if think == "optional"
            else "start: thought THOUGHT_END answer\n")
    return head + _THOUGHT + body


def compile(tokenizer, kind: str, value, name: str | None = None,
            think: str | None = None) -> Grammar:
    """A Grammar of `kind`: "json_schema" (a dict or JSON text), "json_object" (any JSON
    object), "lark" or "gbnf" (grammar text; GBNF goes through llguidance's converter),
    "regex". think ("optional" or "open", for JSON and Lark): the constrained answer may
    follow a <think>...</think> block (a thinking model's reasoning), or follows the end of
    the one the prompt opened."""
    llg = _llg()
    if kind == "json_object":
        kind, value, name = "json_schema", {"type": "object"}, None
        what = "json_object"
    else:
        what = f"JSON schema {name!r}" if name else "JSON schema"
    if kind == "json_schema":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as e:
                raise GrammarError(f"the JSON schema is not valid JSON: {e}") from None
        if not isinstance(value, (dict, bool)):
            raise GrammarError("a JSON schema must be an object")
        if think is None:
            return Grammar(tokenizer, _json_grammar(value, what), what)
        if value is True:
            value = {}
        if value is False:
            raise GrammarError(f"{what}: false allows nothing")
        schema = {**value, "x-guidance": {**value.get("x-guidance", {}), **_JSON_OPTIONS}}
        lark = _after_thinking(f"start: %json {json.dumps(schema)}\n", think)
        return Grammar(tokenizer, llg.LLMatcher.grammar_from_lark(lark), what)
    if not isinstance(value, str) or not value.strip():
        raise GrammarError(f"a {kind} grammar must be non-empty text")
    if kind == "lark":
        if think is not None:
            value = _after_thinking(value, think)
        return Grammar(tokenizer, llg.LLMatcher.grammar_from_lark(value), "Lark grammar")
    if kind == "gbnf":
        try:
            text = llg.grammar_from("gbnf", value)
        except Exception as e:
            raise GrammarError(f"GBNF grammar: {e}") from None
        return Grammar(tokenizer, text, "GBNF grammar")
    if kind == "regex":
        return Grammar(tokenizer, llg.LLMatcher.grammar_from_regex(value), "regex")
    raise GrammarError(f"unknown grammar kind {kind!r}")


def from_response_format(tokenizer, response_format) -> Grammar | None:
    """The Grammar of an OpenAI response_format ({"type": "text" | "json_object" |
    "json_schema", "json_schema": {"name", "schema", "strict"}}), None for text."""
    if response_format is None:
        return None
    rf = response_format if isinstance(response_format, dict) else dict(response_format)
    kind = rf.get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return compile(tokenizer, "json_object", None)
    if kind == "json_schema":
        js = rf.get("json_schema")
        if not isinstance(js, dict):
            raise GrammarError("response_format json_schema needs a json_schema object "
                               "{name, schema, strict}")
        schema = js.get("schema", {"type": "object"}) if "schema" in js or "name" in js else js
        return compile(tokenizer, "json_schema", schema, js.get("name"))
    raise GrammarError(f"unknown response_format type {kind!r}")
