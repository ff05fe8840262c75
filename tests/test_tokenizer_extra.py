"""Tokenizer on vocabularies llama.cpp ships no test vectors for: tekken (Mistral-Nemo) and Gemma 3.

The vocabularies are built from pinned packages on PyPI by pypi_vocab.py (fetched and cached on
first use); the reference ids and texts are llama.cpp's, made by scripts/gen_tokenizer_refs.py
into tests/data/tokenizer_refs_<name>.json: llama.cpp's ggml-vocab-qwen35.gguf.inp texts and the
script's own texts in several scripts, code, whitespace runs, numbers, characters no token covers
and chat-format special tokens.
"""

import json

import pytest

from cann_llm.pretokenize import pre_tokenizer
from cann_llm.tokenizer import TokenAttr, Tokenizer

import pypi_vocab
from llama_cpp_data import read_inp, vocab_dir

# the case count of each reference file: a changed file must be looked at, not silently accepted
N_CASES = {"tekken": 136, "gemma-3": 136}
NAMES = list(N_CASES)
_refs = {name: json.loads(pypi_vocab.refs_path(name).read_text(encoding="utf-8"))
         for name in NAMES}
_tokenizers = {}


def vocab(name) -> Tokenizer:
    if name not in _tokenizers:
        _tokenizers[name] = Tokenizer.from_gguf(pypi_vocab.vocab_path(name))
    return _tokenizers[name]


_inp = []


def text_of(case) -> str:
    if "text" in case:
        return case["text"]
    if not _inp:
        _inp.extend(read_inp(vocab_dir() / "ggml-vocab-qwen35.gguf.inp"))
    return _inp[case["inp"]]


CASES = [(name, i) for name in NAMES for i in range(N_CASES[name])]


@pytest.mark.parametrize("name", NAMES)
def test_reference_file(name):
    refs = _refs[name]
    src = pypi_vocab.SOURCES[name]
    assert len(refs["cases"]) == N_CASES[name]
    assert refs["source"]["package"] == src.project and refs["source"]["version"] == src.version
    assert refs["source"]["wheel_sha256"] == src.sha256 and refs["source"]["file"] == src.member
    # the cached vocabulary is the one llama.cpp's ids were made on
    assert pypi_vocab.vocab_digest(pypi_vocab.vocab_path(name)) == refs["source"]["vocab_digest"]
    # all 50 texts of llama.cpp's .inp, the own texts both ways, the special-token texts
    assert sorted(c["inp"] for c in refs["cases"] if "inp" in c) == list(range(50))
    assert sum(c["parse_special"] for c in refs["cases"]) >= 40


@pytest.mark.parametrize("name,i", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_llama_cpp_reference(name, i):
    case = _refs[name]["cases"][i]
    tok = vocab(name)
    text = text_of(case)
    ids = tok.tokenize(text, add_special=case["add_special"], special=case["parse_special"])
    assert ids == case["ids"]
    assert tok.detokenize(case["ids"]) == case["detok"]
    assert tok.detokenize(case["ids"], special=True) == case["detok_special"]
    if not case["add_special"] and not case["parse_special"]:
        # neither vocabulary cleans spaces nor strips a prefix space: the text comes back
        assert case["detok"] == text


@pytest.mark.parametrize("name", NAMES)
def test_vocabulary_as_llama_cpp(name):
    ref = _refs[name]["vocab"]
    tok = vocab(name)
    assert tok.n_vocab == ref["n_tokens"]
    assert (tok.bos_id, tok.eos_id, tok.add_bos, tok.add_eos) == (
        ref["bos"], ref["eos"], ref["add_bos"], ref["add_eos"])
    assert (tok.eot_id if tok.eot_id is not None else -1) == ref["eot"]
    assert sorted(tok.eog_ids) == ref["eog"]
    runs = []
    for i, a in enumerate(tok.attrs):
        if not runs or runs[-1][1] != a:
            runs.append([i, int(a)])
    assert runs == ref["attr_runs"]


def test_tekken_split():
    # llama.cpp's tekken expression: a word ends where an upper-case run starts; outside ASCII a
    # letter is both upper and lower case (so "ÉCOLE" splits after "É", unlike Mistral's own
    # pattern); no contractions of their own; digits one by one; "/" runs after newlines
    split = pre_tokenizer("tekken").split
    assert split("camelCaseWORD HTTPServer") == ["camel", "Case", "WORD", " HTTPServer"]
    assert split(" ÉCOLE École") == [" É", "COLE", " École"]
    assert split("it'stv DON'TSTOP") == ["it", "'stv", " DON", "'TSTOP"]
    assert split("a/\r\n/b 2024") == ["a", "/\r\n/", "b", " ", "2", "0", "2", "4"]
    tek = vocab("tekken")
    assert tek.pre.name == "tekken" and tek.pre.ignore_merges and not tek.clean_spaces
    inst = tek.tokenize("[INST] Hi [/INST]")
    assert inst[:2] == [1, 3] and inst[-1] == 4  # <s>, [INST] ... [/INST]
    assert 3 not in tek.tokenize("[INST] Hi [/INST]", special=False)


def test_gemma3_spm():
    g = vocab("gemma-3")
    assert g.kind == "spm" and not g.add_space_prefix and g.add_bos
    # no "▁" in front of the text; BOS from add_special
    ids = g.tokenize("Hello world")
    assert ids[0] == 2 and g.tokens[ids[1]] == "Hello" and g.detokenize(ids) == "Hello world"
    # control tokens only with special=True; user-defined ones (newline runs, image markers)
    # always
    turn = g.token_to_id["<start_of_turn>"]
    assert g.attrs[turn] & TokenAttr.CONTROL and g.is_eog(g.token_to_id["<end_of_turn>"])
    assert g.tokenize("<start_of_turn>user", add_special=False)[0] == turn
    assert turn not in g.tokenize("<start_of_turn>user", add_special=False, special=False)
    image = g.token_to_id["<start_of_image>"]
    assert g.attrs[image] & TokenAttr.USER_DEFINED
    assert g.tokenize("a<start_of_image>", add_special=False, special=False)[-1] == image
    nl3 = g.token_to_id["\n\n\n"]
    assert g.tokenize("a\n\n\nb", add_special=False, special=False)[1] == nl3
    # a character no token covers becomes its UTF-8 bytes
    troll = "\U0001f9cc"
    ids = g.tokenize(troll, add_special=False)
    assert ids == [g.token_to_id[f"<0x{b:02X}>"] for b in troll.encode()]
    assert g.detokenize(ids) == troll


@pytest.mark.parametrize("name", NAMES)
def test_incremental(name):
    tok = vocab(name)
    text = "Hi 😁🦙🫠 我想在apple工作 नमस्ते مرحبا \U0001f9cc naïve"
    ids = tok.tokenize(text, add_special=False)
    det = tok.incremental()
    chunks = [det.add(t) for t in ids] + [det.flush()]
    assert all("\ufffd" not in c for c in chunks)
    assert "".join(chunks) == text == tok.detokenize(ids)
