"""Tokenizer: token-exact with llama.cpp on its vocabulary test vectors and on the golden file.

Vectors: llama.cpp's ggml-vocab-<name>.gguf.inp/.out (fetched by llama_cpp_data.py; read and
tokenized as llama.cpp's test-tokenizer-0 does: without BOS, special-token parsing off). Golden: the
"tokenize" cases of tests/data/golden_smollm2-q4_1.json on the default model (add_bos false,
parse_special true). The default model is found or fetched by cann_llm.model_store.
"""

import json
import pathlib
import time

import pytest
import regex

from cann_llm import model_store as models
from cann_llm.gguf_vocab import GGUFMetadataError, read_metadata
from cann_llm.pretokenize import (UnknownPreTokenizer, _class_of, bytes_to_unicode,
                                 pre_tokenizer)
from cann_llm.tokenizer import TokenAttr, Tokenizer, TokenizerError

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
from conftest import GOLDEN_Q4_1 as GOLDEN  # noqa: E402
from llama_cpp_data import read_inp, vocab_dir  # noqa: E402
VOCAB_DIR = vocab_dir()
# Every generation-model vocabulary of llama.cpp's models/ folder with vectors (bert-bge, a WPM
# embedding vocabulary, is not supported), and its vector count: a changed file must be looked at,
# not silently accepted.
N_VECTORS = {"llama-spm": 46, "llama-bpe": 46, "qwen2": 46, "gpt-2": 46, "deepseek-llm": 46,
             "deepseek-coder": 46, "command-r": 46, "falcon": 46, "mpt": 46, "starcoder": 46,
             "refact": 46, "phi-3": 46, "qwen35": 50, "gemma-4": 46}
VOCABS = list(N_VECTORS)


def load_vectors(name):
    """(text, ids) pairs as test-tokenizer-0 reads them, one line of ids per text."""
    texts = read_inp(VOCAB_DIR / f"ggml-vocab-{name}.gguf.inp")
    out_lines = (VOCAB_DIR / f"ggml-vocab-{name}.gguf.out").read_text().split("\n")
    assert out_lines[-1] == ""
    expected = [[int(x) for x in line.split()] for line in out_lines[:-1]]
    assert len(texts) == len(expected)
    return list(zip(texts, expected))


_tokenizers = {}


def vocab(name) -> Tokenizer:
    if name not in _tokenizers:
        _tokenizers[name] = Tokenizer.from_gguf(VOCAB_DIR / f"ggml-vocab-{name}.gguf")
    return _tokenizers[name]


_vectors = {}


def vectors(name):
    if name not in _vectors:
        _vectors[name] = load_vectors(name)
    return _vectors[name]


CASES = [(name, i) for name in VOCABS for i in range(N_VECTORS[name])]


@pytest.mark.parametrize("name", VOCABS)
def test_vector_files_complete(name):
    assert len(vectors(name)) == N_VECTORS[name]


@pytest.mark.parametrize("name,i", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_llama_cpp_vectors(name, i):
    text, expected = vectors(name)[i]
    assert vocab(name).tokenize(text, add_special=False, special=False) == expected


# llama.cpp's detokenizer drops the space in " ?", " !", " .", " ,", " ' ", " 's", " 'm", " 're",
# " 've" for vocabularies with clean_spaces (gpt-2, llama-bpe, ...); these texts do not round-trip.
_CLEANED = regex.compile(r" [?!.,]| ' | '(?:s|m|re|ve)")


@pytest.mark.parametrize("name,i", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_round_trip(name, i):
    tok = vocab(name)
    text, expected = vectors(name)[i]
    out = tok.detokenize(expected)
    if tok.clean_spaces and _CLEANED.search(text):
        assert out != text
    else:
        assert out == text


def test_clean_spaces_as_llama_cpp():
    tok = vocab("gpt-2")
    assert tok.clean_spaces and not vocab("qwen2").clean_spaces
    ids = tok.tokenize("Hello , world ! I 'm sure it 's fine . He 'll go ' now", add_special=False)
    assert tok.detokenize(ids) == "Hello, world! I'm sure it's fine. He 'll go'now"
    q = vocab("qwen2")
    assert q.detokenize(q.tokenize("Hello , world !")) == "Hello , world !"


# -- default model ---------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def default_model():
    try:
        return models.default_model_path(download=True)
    except models.ModelDownloadError as e:
        pytest.fail(f"the default model could not be fetched: {e}")


@pytest.fixture(scope="session")
def smollm(default_model):
    return Tokenizer.from_gguf(default_model)


def golden():
    return json.loads(GOLDEN.read_text())


def test_golden_file_flags():
    g = golden()
    assert g["tokenize_flags"] == {"add_bos": False, "parse_special": True}
    assert g["model_sha256"] == models.DEFAULT_MODEL.sha256
    assert len(g["tokenize"]) >= 10


@pytest.mark.parametrize("i", range(len(json.loads(GOLDEN.read_text())["tokenize"])))
def test_golden_tokenize(smollm, i):
    case = golden()["tokenize"][i]
    assert smollm.tokenize(case["text"], add_special=False, special=True) == case["ids"]
    assert smollm.detokenize(case["ids"], special=True) == case["text"]


def test_golden_prompts(smollm):
    for case in golden()["greedy"]:
        # SmolLM2 has add_bos_token false: add_special adds nothing
        assert smollm.tokenize(case["prompt"]) == case["prompt_ids"]


def test_smollm_vocabulary(smollm):
    assert smollm.kind == "bpe" and smollm.pre.name == "smollm"
    assert not smollm.add_bos and smollm.bos_id == 1 and smollm.eos_id == 2
    assert smollm.is_eog(2) and not smollm.is_eog(19556)
    assert "im_start" in smollm.chat_template


def test_special_parsing_on_off(smollm):
    text = "<|im_start|>user\nHi<|im_end|>"
    on = smollm.tokenize(text, special=True)
    assert on[0] == 1 and on[-1] == 2 and 1 not in on[1:-1]
    off = smollm.tokenize(text, special=False)
    assert 1 not in off and 2 not in off and len(off) > len(on)
    assert smollm.detokenize(off) == text
    # control tokens render only when asked
    assert smollm.detokenize(on) == "user\nHi"
    assert smollm.detokenize(on, special=True) == text


def test_special_parsing_qwen2_and_spm():
    q = vocab("qwen2")
    ids = q.tokenize("<|im_start|>a<|endoftext|>", add_special=False, special=True)
    assert ids[0] == q.token_to_id["<|im_start|>"] and ids[-1] == q.token_to_id["<|endoftext|>"]
    assert q.token_to_id["<|im_start|>"] not in q.tokenize("<|im_start|>", special=False)
    s = vocab("llama-spm")
    # after a special token SPM prepends the "▁" again (add_space_prefix)
    assert s.tokenize("<s>Hello", add_special=False, special=True) == [1, 15043]
    assert s.tokenize("<s>Hello", add_special=False, special=False)[0] != 1


def test_add_bos_flags():
    assert vocab("llama-spm").tokenize("Hello")[0] == 1
    assert vocab("llama-spm").tokenize("Hello", add_special=False)[0] != 1
    assert vocab("llama-bpe").tokenize("Hello")[0] == 128000  # llama-bpe: add_bos by default
    assert vocab("qwen2").tokenize("Hello") == vocab("qwen2").tokenize("Hello", add_special=False)
    assert vocab("llama-spm").tokenize("") == [1]
    assert vocab("llama-spm").tokenize("", add_special=False) == []


# What llama.cpp's llama_vocab::load makes of each vocabulary: BOS by default (the GGUF's
# add_bos_token, else the default of the model or pre-tokenizer; gemma4 always), never EOS, and
# the space clean-up of detokenize (off for the SPM vocabularies and some pre-tokenizers).
FLAGS = {  # name: (add_bos, clean_spaces)
    "llama-spm": (True, False), "llama-bpe": (True, True), "qwen2": (False, False),
    "gpt-2": (False, True), "deepseek-llm": (True, False), "deepseek-coder": (True, False),
    "command-r": (True, False), "falcon": (False, True), "mpt": (False, True),
    "starcoder": (False, True), "refact": (False, True), "phi-3": (True, False),
    "qwen35": (False, False), "gemma-4": (True, True)}


@pytest.mark.parametrize("name", VOCABS)
def test_vocabulary_flags(name):
    tok = vocab(name)
    add_bos, clean_spaces = FLAGS[name]
    assert (tok.add_bos, tok.add_eos, tok.clean_spaces) == (add_bos, False, clean_spaces)
    with_special = tok.tokenize("Hello")
    without = tok.tokenize("Hello", add_special=False)
    assert with_special == ([tok.bos_id] if add_bos else []) + without


def test_fim_tokens_found_by_text():
    # llama.cpp finds the FIM tokens by text when the GGUF does not name them, makes them control
    # tokens and ends generation on the pad, repository and file-separator ones
    for name, eog in (("starcoder", ["<fim_pad>"]), ("refact", ["<fim_pad>", "<reponame>"]),
                      ("command-r", ["<PAD>"])):
        tok = vocab(name)
        for t in eog:
            assert tok.is_eog(tok.token_to_id[t]), (name, t)
    st = vocab("starcoder")
    assert st.special_ids["fim_pre"] == st.token_to_id["<fim_prefix>"]
    assert st.attrs[st.token_to_id["<fim_prefix>"]] & TokenAttr.CONTROL
    assert not st.is_eog(st.token_to_id["<fim_prefix>"])


def test_gemma4_vocabulary():
    g = vocab("gemma-4")
    assert g.model == "gemma4" and g.pre.name == "gemma4" and g.bos_id == 2 and g.eos_id == 1
    # spaces are "▁" in the vocabulary; merges run on characters; a character no merge reaches
    # becomes <0xXX> byte tokens
    assert g.tokenize(" Hello world", add_special=False) == [26352, 1902]
    assert g.tokens[26352] == "▁Hello" and g.detokenize([26352, 1902]) == " Hello world"
    troll = "\U0001f9cc"  # not in the vocabulary
    ids = g.tokenize(troll, add_special=False)
    assert ids == [g.token_to_id[f"<0x{b:02X}>"] for b in troll.encode()]
    assert g.detokenize(ids) == troll
    # "</s>" is an ordinary token in a vocabulary with <|tool_response> (llama.cpp): no EOG, not
    # split out as a special token (ids from llama.cpp)
    s = g.token_to_id["</s>"]
    assert not g.is_eog(s) and g.attrs[s] == TokenAttr.NORMAL
    assert g.tokenize("</s>", add_special=False, special=True) == [954, 236751, 236813]
    assert all(g.is_eog(g.token_to_id[t]) for t in ("<eos>", "<turn|>", "<|tool_response>"))


def test_gemma4_always_adds_bos():
    # tokenizer.ggml.model "gemma4" uses the gemma4 pre-tokenizer whatever .pre says, and
    # llama.cpp adds BOS even when add_bos_token is false
    tokens = ["<pad>", "<eos>", "<bos>", "▁", "a", "▁a", "\n", "\n\n"]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    tok = Tokenizer({
        "tokenizer.ggml.model": "gemma4", "tokenizer.ggml.pre": "gpt-2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": [3, 3, 3] + [1] * 5 + [6] * 256,
        "tokenizer.ggml.merges": ["▁ a"], "tokenizer.ggml.bos_token_id": 2,
        "tokenizer.ggml.eos_token_id": 1, "tokenizer.ggml.add_bos_token": False}, name="synthetic")
    assert tok.pre.name == "gemma4" and tok.add_bos
    byte = {b: 8 + b for b in range(256)}
    assert tok.tokenize(" a b") == [2, 5, 3, byte[ord("b")]]
    # a run of newlines that is a token is taken whole (there is no "\n \n" merge)
    assert tok.tokenize("a\n\na", add_special=False) == [4, 7, 4]
    assert tok.tokenize("\n\n\n", add_special=False) == [6, 6, 6]
    assert tok.detokenize([2, 5, 3, byte[ord("b")]]) == " a b"


def test_harmony_end_is_not_eog():
    # gpt-oss: <|end|> ends a message, not the generation, when <|return|> and <|call|> exist
    tok = _synthetic_bpe([("<|end|>", 3), ("<|return|>", 3), ("<|call|>", 3)])
    end = tok.token_to_id["<|end|>"]
    assert not tok.is_eog(end) and tok.attrs[end] == TokenAttr.USER_DEFINED
    assert tok.is_eog(tok.token_to_id["<|return|>"]) and tok.is_eog(tok.token_to_id["<|call|>"])
    tok = _synthetic_bpe([("<|end|>", 3)])
    assert tok.is_eog(tok.token_to_id["<|end|>"])


def test_unicode_classes_are_llama_cpp():
    # llama.cpp's \p{L} etc. are Unicode 15.1 whatever the `regex` module's version: U+14316 (an
    # Egyptian hieroglyph of Unicode 16) is no letter to it. Ids from llama.cpp.
    assert pre_tokenizer("qwen2").split("z\U00014316=f") == ["z", "\U00014316=", "f"]
    assert vocab("qwen2").tokenize("z\U00014316=f") == [89, 172, 242, 234, 244, 28, 69]
    classes = [_class_of(cp) for cp in (0xE9, 0x300, 0xB2, 0xA1, 0x1FAE8, 0x1FAE9, 0x33C92)]
    assert classes == ["L", "M", "N", "P", "S", "-", "-"]  # U+1FAE9: Unicode 16, U+33C92: 17
    # a letter, a mark, a digit, punctuation and a symbol outside ASCII keep their classes
    assert pre_tokenizer("qwen35").split("e\u0301\u00b2\u00a1\u00a9") == ["e\u0301", "\u00b2",
                                                                               "\u00a1\u00a9"]
    # deepseek's punctuation class lists U+3000, but llama.cpp matches it with non-ASCII
    # whitespace made U+000B: the ideographic space is no punctuation there
    assert pre_tokenizer("deepseek-llm").split("\uff0c\u3000") == ["\uff0c", "\u3000"]


def test_detokenize_remove_special_spm():
    s = vocab("llama-spm")
    ids = s.tokenize("Hello world")
    assert ids[0] == 1
    # llama.cpp strips the prefix space from the first piece only when the ids do not start
    # with BOS (whether or not remove_special drops that BOS)
    assert s.detokenize(ids) == " Hello world"
    assert s.detokenize(ids, remove_special=True) == " Hello world"
    assert s.detokenize(ids, special=True) == "<s> Hello world"
    assert s.detokenize(ids[1:]) == "Hello world"


def _synthetic_bpe(extra, pre="gpt-2"):
    """A byte-level BPE vocabulary: the 256 byte characters, a few merges, then `extra` tokens
    ("world" is a token no merge leads to)."""
    chars = [bytes_to_unicode()[b] for b in range(256)]
    tokens = chars + ["he", "ll", "hell", "hello", "world"] + [t for t, _ in extra]
    types = [1] * (256 + 5) + [ty for _, ty in extra]
    return Tokenizer({
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": ["h e", "l l", "he ll", "hell o"],
        "general.name": "synthetic",
    }, name="synthetic")


def test_user_defined_tokens_always_split():
    tok = _synthetic_bpe([("<tool>", 4), ("<ctl>", 3)])
    tool, ctl = tok.token_to_id["<tool>"], tok.token_to_id["<ctl>"]
    assert tok.attrs[tool] & TokenAttr.USER_DEFINED and tok.attrs[ctl] & TokenAttr.CONTROL
    off = tok.tokenize("hello<tool>hello<ctl>", special=False)
    assert off[:3] == [tok.token_to_id["hello"], tool, tok.token_to_id["hello"]]
    assert ctl not in off
    assert tok.tokenize("hello<ctl>", special=True)[-1] == ctl
    # user-defined tokens render even with special=False, control tokens do not
    assert tok.detokenize([tool, ctl]) == "<tool>"
    assert tok.detokenize([tool, ctl], special=True) == "<tool><ctl>"


def test_ignore_merges_for_llama3():
    # llama-bpe takes a pre-tokenized word that is a whole token as is (ignore_merges)
    llama3 = _synthetic_bpe([], pre="llama-bpe")
    assert llama3.tokenize("world", add_special=False) == [llama3.token_to_id["world"]]
    gpt2 = _synthetic_bpe([])
    assert gpt2.tokenize("world") == [gpt2.token_to_id[c] for c in "world"]


def test_bpe_merge_order():
    tok = _synthetic_bpe([])
    assert tok.tokenize("hello") == [tok.token_to_id["hello"]]
    assert tok.tokenize("hellhe") == [tok.token_to_id["hell"], tok.token_to_id["he"]]


# -- incremental detokenizer ------------------------------------------------------------------------

STREAM_TEXT = "Hi 😁🦙🫠 我想在apple工作 龘 naïve — ok"


@pytest.mark.parametrize("name", VOCABS)
def test_incremental_never_breaks_utf8(name):
    tok = vocab(name)
    ids = tok.tokenize(STREAM_TEXT, add_special=False)
    det = tok.incremental(strip_leading_space=True)
    chunks = [det.add(t) for t in ids]
    chunks.append(det.flush())
    assert all("\ufffd" not in c for c in chunks)
    assert "".join(chunks) == STREAM_TEXT == tok.detokenize(ids)
    # the text holds characters split over several tokens: some step emits nothing
    assert any(c == "" for c in chunks[:-1])


def test_incremental_holds_then_releases():
    tok = vocab("llama-spm")
    byte_ids = [tok.token_to_id[f"<0x{b:02X}>"] for b in "😁".encode()]
    det = tok.incremental()
    assert [det.add(t) for t in byte_ids] == ["", "", "", "😁"]
    assert det.pending == b""
    det.add(byte_ids[0])
    assert det.pending == "😁".encode()[:1]
    assert det.flush() == "\ufffd"  # a truncated character at the end of the stream
    det = tok.incremental()
    assert det.add(byte_ids[1]) == "\ufffd"  # a lone continuation byte can never be valid


# -- loading, speed ---------------------------------------------------------------------------------

def test_metadata_reader():
    meta = read_metadata(VOCAB_DIR / "ggml-vocab-qwen2.gguf")
    assert meta["tokenizer.ggml.model"] == "gpt2" and meta["tokenizer.ggml.pre"] == "qwen2"
    assert len(meta["tokenizer.ggml.tokens"]) == 151936
    assert meta["tokenizer.ggml.token_type"].dtype.kind == "i"


def test_bad_files(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not a gguf file at all, just bytes")
    with pytest.raises(GGUFMetadataError, match="not a GGUF"):
        Tokenizer.from_gguf(bad)
    good = (VOCAB_DIR / "ggml-vocab-gpt-2.gguf").read_bytes()
    bad.write_bytes(good[:5000])
    with pytest.raises(GGUFMetadataError, match="truncated|past the end"):
        Tokenizer.from_gguf(bad)
    with pytest.raises(UnknownPreTokenizer, match="no-such-pre"):
        pre_tokenizer("no-such-pre")
    with pytest.raises(TokenizerError, match="unsupported"):
        Tokenizer({"tokenizer.ggml.model": "t5", "tokenizer.ggml.tokens": ["a"]})


def test_speed():
    tok = vocab("llama-bpe")
    text = (REPO_ROOT / "runner" / "tokenizer.py").read_text()[:4096]
    t0 = time.perf_counter()
    ids = tok.tokenize(text)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    assert tok.tokenize(text) == ids
    warm = time.perf_counter() - t0
    assert cold < 0.25 and warm < 0.1, (cold, warm)


def test_load_speed():
    t0 = time.perf_counter()
    Tokenizer.from_gguf(VOCAB_DIR / "ggml-vocab-llama-bpe.gguf")  # 128k tokens, 280k merges
    assert time.perf_counter() - t0 < 5


# -- models ---------------------------------------------------------------------------------------

def test_models_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("CANN_LLM_MODELS", str(tmp_path / "m"))
    assert models.models_dir() == tmp_path / "m"
    monkeypatch.delenv("CANN_LLM_MODELS")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "c"))
    assert models.models_dir() == tmp_path / "c" / "cann-llm" / "models"


def test_default_model_missing_without_download(monkeypatch, tmp_path):
    monkeypatch.setenv("CANN_LLM_MODELS", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="cann-llm pull"):
        models.default_model_path(download=False)
    (tmp_path / models.DEFAULT_MODEL.file_name).write_bytes(b"GGUF damaged")
    with pytest.raises(models.ModelDownloadError, match="sha256"):
        models.default_model_path(download=False)


def test_default_model_checksum(default_model):
    assert models.sha256_file(default_model) == models.DEFAULT_MODEL.sha256
