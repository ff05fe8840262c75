"""cann_llm.grammar: llguidance's token mask over our vocabularies (the default model's byte-level
BPE and a tiny SPM model), the sampler applying it before its chain, and the engine's greedy
output under a JSON schema: valid, compact, deterministic and the same alone or batched."""

import json

import jsonschema
import numpy as np
import pytest

import cann_llm
from cann_llm import grammar as G
from cann_llm.engine import Engine
from cann_llm.sampler import Sampler, SamplingParams
from cann_llm.tokenizer import Tokenizer

PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 40},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "tags": {"type": "array", "items": {"enum": ["red", "green"]}, "maxItems": 3}},
    "required": ["name", "age", "tags"], "additionalProperties": False}


@pytest.fixture(scope="module")
def tok(default_model_path):
    return Tokenizer.from_gguf(default_model_path)


@pytest.fixture(scope="module")
def smol(default_model_path):
    m = cann_llm.load(str(default_model_path), n_ctx=1024, n_batch=64)
    yield m
    m.close()


def _walk(matcher, tok, text, ids=None):
    for t in ids or tok.tokenize(text, add_special=False, special=False):
        assert matcher.allowed()[t], (text, tok.token_to_piece(t))
        matcher.accept(t)


def test_the_mask_follows_a_valid_document_and_then_allows_only_the_end(tok):
    m = G.compile(tok, "json_schema", PERSON).matcher()
    _walk(m, tok, '{"name":"Ann","age":42,"tags":["red","green"]}')
    assert m.done and set(np.flatnonzero(m.allowed())) <= set(tok.eog_ids)


def test_the_tokenizer_gains_no_attribute_from_a_grammar(default_model_path):
    """The LLTokenizer is kept beside the Tokenizer (one per Tokenizer, built once), not on it:
    a 30th instance attribute would cost CPython 3.11 its fast attribute lookup."""
    fresh = Tokenizer.from_gguf(default_model_path)
    before = set(vars(fresh))
    G.compile(fresh, "json_schema", PERSON)
    assert set(vars(fresh)) == before and len(before) < 30
    assert G.ll_tokenizer(fresh) is G.ll_tokenizer(fresh)


def test_compact_json_allows_no_whitespace(tok):
    m = G.compile(tok, "json_object", None).matcher()
    allowed = m.allowed()
    assert not any(allowed[i] for i in range(tok.n_vocab)
                   if tok.token_to_piece(i).strip() == b"" and tok.token_to_piece(i))
    _walk(m, tok, '{"a":')
    allowed = m.allowed()
    assert not allowed[tok.tokenize(" 1", add_special=False)[0]]


def test_bad_schemas_and_grammars_name_the_problem(tok):
    with pytest.raises(G.GrammarError, match="JSON schema"):
        G.compile(tok, "json_schema", {"type": "object", "properties": {"a": {"type": "nope"}}})
    with pytest.raises(G.GrammarError, match="not valid JSON"):
        G.compile(tok, "json_schema", "{not json")
    with pytest.raises(G.GrammarError, match="GBNF"):
        G.compile(tok, "gbnf", "root ::= (")


def test_gbnf_and_lark(tok):
    for kind, text in (("gbnf", 'root ::= "yes" | "no"'), ("lark", 'start: "yes" | "no"')):
        m = G.compile(tok, kind, text).matcher()
        _walk(m, tok, "no")
        assert m.accepting


def test_an_spm_vocabulary_with_byte_tokens(tmp_path):
    from tiny_models import write_tiny_model
    spm = Tokenizer.from_gguf(write_tiny_model(tmp_path / "spm.gguf"))
    m = G.compile(spm, "lark", 'start: "hello world" | "héllo"').matcher()
    ids = [spm.token_to_id[t] for t in ("h", "<0xC3>", "<0xA9>", "l", "l", "o")]
    _walk(m, spm, "", ids)                  # é has no token: two <0xXX> byte tokens
    assert m.accepting and m.done
    assert set(np.flatnonzero(m.allowed())) == {spm.eos_id}


def test_the_mask_comes_before_bias_and_penalties(tok):
    g = G.compile(tok, "gbnf", 'root ::= "yes" | "no"')
    logits = np.zeros(tok.n_vocab, dtype=np.float32)
    banned = tok.tokenize("maybe", add_special=False)[0]
    s = Sampler(temperature=0, logit_bias={banned: 100.0}, grammar=g)
    t = s.sample(logits)
    assert tok.token_to_piece(t) in (b"yes", b"no", b"y", b"n")
    assert s.probabilities(logits)[0][0] != banned
    # a bias of -inf on every allowed token: an error that says so
    first = [i for i in range(tok.n_vocab) if tok.token_to_piece(i) in (b"yes", b"no", b"y",
                                                                          b"n", b"ye")]
    s2 = Sampler(temperature=0, logit_bias={i: -np.inf for i in first}, grammar=g)
    with pytest.raises(ValueError, match="grammar allows"):
        s2.sample(logits)


def test_mask_cost_per_token(tok):
    """The cost of one mask on the 49152-token vocabulary, printed (speed is reported, never
    asserted); what is asserted is that each mask along a valid document allows its next token."""
    import time
    m = G.compile(tok, "json_schema", PERSON).matcher()
    logits = np.random.default_rng(0).standard_normal(tok.n_vocab).astype(np.float32)
    times = []
    for t in tok.tokenize('{"name":"Ann Lee","age":42,"tags":["red"]}', add_special=False):
        t0 = time.perf_counter()
        masked = m.mask(logits)
        times.append(time.perf_counter() - t0)
        assert np.isfinite(masked[t])
        m.accept(t)
    print(f"mask: median {np.median(times) * 1e6:.0f} us per token over {len(times)} tokens")


def _prompt(model, what):
    msgs = [{"role": "user", "content": f"Give me {what} as JSON."}]
    return model.tokenize(model.chat_template.render(msgs, add_generation_prompt=True),
                          special=True)


def test_greedy_under_a_schema_is_valid_deterministic_and_batch_invariant(smol):
    g = G.compile(smol.tokenizer, "json_schema", PERSON)
    engine = Engine(smol)
    smol.kv.clear()
    prompt = _prompt(smol, "a person with a name, an age and colour tags")

    def alone():
        seq = engine.add(prompt, SamplingParams(temperature=0, grammar=g), max_tokens=64)
        engine.run()
        engine.release(seq)
        return seq.generated, seq.finish_reason
    a, b = alone(), alone()
    assert a == b and a[1] == "stop"
    text = smol.detokenize(a[0])
    jsonschema.validate(json.loads(text), PERSON)
    # batched beside an unconstrained greedy sequence and a sampled one under the same schema
    seqs = [engine.add(_prompt(smol, "a short poem"), SamplingParams(temperature=0),
                       max_tokens=20),
            engine.add(prompt, SamplingParams(temperature=0, grammar=g), max_tokens=64),
            engine.add(prompt, SamplingParams(temperature=1.0, seed=3, grammar=g),
                       max_tokens=64)]
    engine.run()
    assert (seqs[1].generated, seqs[1].finish_reason) == a
    jsonschema.validate(json.loads(smol.detokenize(seqs[2].generated)), PERSON)
    for s in seqs:
        engine.release(s)


def test_chat_and_generate_take_response_format_and_grammar(smol):
    msgs = [{"role": "user", "content": "Describe a cat as JSON."}]
    text = "".join(smol.chat(msgs, response_format={"type": "json_object"}, temperature=0,
                             max_tokens=96))
    assert isinstance(json.loads(text), dict)
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    text = "".join(smol.chat(msgs, response_format=fmt, temperature=0, max_tokens=96))
    jsonschema.validate(json.loads(text), PERSON)
    ids = smol.generate("Is the sky blue? Answer:", grammar='root ::= " yes" | " no"',
                        temperature=0, max_tokens=8)
    assert smol.detokenize(list(ids)) in (" yes", " no")


def test_a_mask_prepared_ahead_is_the_mask(tok):
    """The engine computes masks on a worker thread during the forward (Matcher.prepare)."""
    g = G.compile(tok, "json_schema", PERSON)
    a, b = g.matcher(), g.matcher()
    for t in tok.tokenize('{"name":"Al","age":7,"tags":[]}', add_special=False):
        a.prepare()
        assert np.array_equal(a.allowed(), b.allowed())
        a.prepare()                  # prepared, then the state moves on: recomputed
        a.accept(t)
        b.accept(t)
        assert np.array_equal(a.allowed(), b.allowed())
