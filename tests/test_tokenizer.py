"""Tokenizer: token-exact with llama.cpp on its vocabulary test vectors and on the golden file.

Vectors: llama.cpp's ggml-vocab-<name>.gguf.inp/.out (fetched by llama_cpp_data.py; tokenized
without BOS and with special-token parsing off, as llama.cpp's test-tokenizer-0 does). Golden: the
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
from cann_llm.pretokenize import UnknownPreTokenizer, bytes_to_unicode, pre_tokenizer
from cann_llm.tokenizer import TokenAttr, Tokenizer, TokenizerError

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
from conftest import GOLDEN_Q4_1 as GOLDEN  # noqa: E402
from llama_cpp_data import vocab_dir  # noqa: E402
VOCAB_DIR = vocab_dir()
VOCABS = ["llama-spm", "llama-bpe", "qwen2", "gpt-2"]
N_VECTORS = 46  # per vocabulary; a changed file must be looked at, not silently accepted


def load_vectors(name):
    raw = (VOCAB_DIR / f"ggml-vocab-{name}.gguf.inp").read_text(encoding="utf-8")
    parts = raw.split("\n__ggml_vocab_test__\n")
    assert parts[-1] == "", "the .inp file must end with a separator line"
    out_lines = (VOCAB_DIR / f"ggml-vocab-{name}.gguf.out").read_text().split("\n")
    assert out_lines[-1] == ""
    expected = [[int(x) for x in line.split()] for line in out_lines[:-1]]
    assert len(parts) - 1 == len(expected)
    return list(zip(parts[:-1], expected))


_tokenizers = {}


def vocab(name) -> Tokenizer:
    if name not in _tokenizers:
        _tokenizers[name] = Tokenizer.from_gguf(VOCAB_DIR / f"ggml-vocab-{name}.gguf")
    return _tokenizers[name]


CASES = [(name, i) for name in VOCABS for i in range(N_VECTORS)]


@pytest.mark.parametrize("name", VOCABS)
def test_vector_files_complete(name):
    assert len(load_vectors(name)) == N_VECTORS


@pytest.mark.parametrize("name,i", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_llama_cpp_vectors(name, i):
    text, expected = load_vectors(name)[i]
    assert vocab(name).tokenize(text, add_special=False, special=False) == expected


# llama.cpp's detokenizer drops the space in " ?", " !", " .", " ,", " ' ", " 's", " 'm", " 're",
# " 've" for vocabularies with clean_spaces (gpt-2, llama-bpe); those strings do not round-trip.
_CLEANED = regex.compile(r" [?!.,]| ' | '(?:s|m|re|ve)")


@pytest.mark.parametrize("name,i", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_round_trip(name, i):
    tok = vocab(name)
    text, expected = load_vectors(name)[i]
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
