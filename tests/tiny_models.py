"""Tiny GGUF models for tests, written with gguf.GGUFWriter: random weights, tiny dimensions.

    path = write_tiny_model(tmp_path / "m.gguf", arch="qwen2", vocab="qwen2", weight_type=Q8_0)

`vocab` is None (a synthetic SentencePiece-style vocabulary of n_vocab tokens, 300 by default:
fast), or the name of a
real llama.cpp vocabulary ("llama-spm", "llama-bpe", "qwen2", "gpt-2"; llama_cpp_data.py),
whose tokenizer.* keys are copied (n_vocab then follows the vocabulary: large embeddings).
Weights are random normal * 0.02 (norms near 1), quantized with gguf.quants for the kept types;
K-quant types (Q4_K, Q6_K, ...) get random blocks with sane fp16 scales (random_blocks).
Hooks for bad-input tests: `drop` (tensor names to leave out), `shapes` (name -> ne override),
`types` (name -> type), `kv` (extra or replaced metadata), `tied`.
"""

from __future__ import annotations

import pathlib

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as QT, GGUFValueType, GGUFWriter, quants

from llama_cpp_data import vocab_dir

__all__ = ["write_tiny_model", "random_blocks", "vocab_path"]


def vocab_path(name: str) -> pathlib.Path:
    return vocab_dir() / f"ggml-vocab-{name}.gguf"


def random_blocks(qtype: int, n_elements: int, rng: np.random.Generator) -> np.ndarray:
    """Random ggml blocks of a quantized type (uint8) whose fp16 scale fields are small finite
    values, so dequantizing gives finite numbers of a sensible size."""
    qtype = QT(qtype)
    block, size = GGML_QUANT_SIZES[qtype]
    n_blocks = n_elements // block
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)

    def f16(offset, scale):
        v = (rng.random(n_blocks) * scale).astype(np.float16)
        raw[:, offset:offset + 2] = v.view(np.uint8).reshape(n_blocks, 2)

    if qtype in (QT.Q4_0, QT.Q5_0, QT.Q8_0):
        f16(0, 0.01)
    elif qtype in (QT.Q4_1, QT.Q5_1, QT.Q8_1):
        f16(0, 0.01)
        f16(2, 0.05)
    elif qtype in (QT.Q4_K, QT.Q5_K):
        f16(0, 0.002)
        f16(2, 0.002)
    elif qtype == QT.Q2_K:
        f16(80, 0.002)
        f16(82, 0.002)
    elif qtype == QT.Q3_K:
        f16(108, 0.002)
    elif qtype == QT.Q6_K:
        f16(208, 0.0005)
    elif qtype == QT.Q8_K:
        raw[:, 0:4] = (rng.random(n_blocks) * 1e-3).astype(np.float32).view(np.uint8).reshape(-1, 4)
    return raw.reshape(-1)


def _synthetic_vocab(n_tokens: int = 300) -> dict:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    tokens += ["\u2581" + w for w in ("the", "a", "hello", "world", "is", "of", "and", "to")]
    tokens += [chr(c) for c in range(ord("a"), ord("z") + 1)]
    tokens += [f"tok{i}" for i in range(n_tokens - len(tokens))]
    types = [2, 3, 3] + [6] * 256 + [1] * (len(tokens) - 259)
    return {"tokenizer.ggml.model": "llama", "tokenizer.ggml.pre": "default",
            "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.scores": np.arange(len(tokens), dtype=np.float32) * -0.01,
            "tokenizer.ggml.token_type": np.array(types, dtype=np.int32),
            "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
            "tokenizer.ggml.unknown_token_id": 0, "tokenizer.ggml.add_bos_token": True}


def _real_vocab(name: str) -> dict:
    from cann_llm import gguf_vocab
    return gguf_vocab.read_metadata(vocab_path(name), lambda k: k.startswith("tokenizer."))


def _add_kv(w: GGUFWriter, key: str, value) -> None:
    if isinstance(value, bool):
        w.add_bool(key, value)
    elif isinstance(value, (int, np.integer)):
        w.add_uint32(key, int(value)) if value >= 0 else w.add_int32(key, int(value))
    elif isinstance(value, float):
        w.add_float32(key, value)
    elif isinstance(value, str):
        w.add_string(key, value)
    elif isinstance(value, np.ndarray):
        sub = {np.dtype(np.float32): GGUFValueType.FLOAT32, np.dtype(np.int32): GGUFValueType.INT32,
               np.dtype(np.uint32): GGUFValueType.UINT32}.get(value.dtype, GGUFValueType.INT32)
        w.add_key_value(key, value.tolist(), GGUFValueType.ARRAY, sub_type=sub)
    elif isinstance(value, (list, tuple)):
        w.add_array(key, list(value))
    else:
        raise TypeError(f"{key}: cannot write {type(value)}")


def _encode(data: np.ndarray, qtype: int, rng) -> tuple[np.ndarray, QT | None]:
    qtype = QT(qtype)
    if qtype == QT.F32:
        return data.astype(np.float32), None
    if qtype == QT.F16:
        return data.astype(np.float16), None
    if qtype in (QT.BF16, QT.Q8_0, QT.Q4_0, QT.Q4_1):
        return quants.quantize(data.astype(np.float32), qtype), qtype
    # types gguf.quants cannot quantize: random blocks of the right byte shape
    block, size = GGML_QUANT_SIZES[qtype]
    rows = data.size // data.shape[-1]
    return random_blocks(qtype, data.size, rng).reshape(rows, data.shape[-1] // block * size), qtype


def tiny_tensors(arch: str, n_vocab: int, n_embd: int, n_layer: int, n_head: int,
                 n_head_kv: int, n_ff: int, head_dim: int, tied: bool,
                 n_expert: int = 4) -> dict[str, tuple]:
    """name -> ne (ggml order) of a llama/qwen2/qwen3/qwen3moe/phi3/gemma3 model."""
    q, kv = n_head * head_dim, n_head_kv * head_dim
    out = {"token_embd.weight": (n_embd, n_vocab), "output_norm.weight": (n_embd,)}
    if arch == "phi3":      # fused QKV and gate/up projections
        for i in range(n_layer):
            b = f"blk.{i}."
            out.update({b + "attn_norm.weight": (n_embd,), b + "attn_qkv.weight": (n_embd, q + 2 * kv),
                        b + "attn_output.weight": (q, n_embd), b + "ffn_norm.weight": (n_embd,),
                        b + "ffn_up.weight": (n_embd, 2 * n_ff), b + "ffn_down.weight": (n_ff, n_embd)})
        if not tied:
            out["output.weight"] = (n_embd, n_vocab)
        return out
    if not tied:
        out["output.weight"] = (n_embd, n_vocab)
    for i in range(n_layer):
        b = f"blk.{i}."
        out.update({b + "attn_norm.weight": (n_embd,), b + "attn_q.weight": (n_embd, q),
                    b + "attn_k.weight": (n_embd, kv), b + "attn_v.weight": (n_embd, kv),
                    b + "attn_output.weight": (q, n_embd), b + "ffn_norm.weight": (n_embd,),
                    b + "ffn_gate.weight": (n_embd, n_ff), b + "ffn_up.weight": (n_embd, n_ff),
                    b + "ffn_down.weight": (n_ff, n_embd)})
        if arch == "qwen2":
            out.update({b + "attn_q.bias": (q,), b + "attn_k.bias": (kv,), b + "attn_v.bias": (kv,)})
        if arch == "qwen3moe":      # n_ff is each expert's width here
            for role in ("ffn_gate", "ffn_up", "ffn_down"):
                del out[b + role + ".weight"]
            out.update({b + "ffn_gate_inp.weight": (n_embd, n_expert),
                        b + "ffn_gate_exps.weight": (n_embd, n_ff, n_expert),
                        b + "ffn_up_exps.weight": (n_embd, n_ff, n_expert),
                        b + "ffn_down_exps.weight": (n_ff, n_embd, n_expert)})
        if arch in ("qwen3", "qwen3moe", "gemma3"):
            out.update({b + "attn_q_norm.weight": (head_dim,), b + "attn_k_norm.weight": (head_dim,)})
        if arch == "gemma3":
            out.update({b + "post_attention_norm.weight": (n_embd,),
                        b + "post_ffw_norm.weight": (n_embd,)})
    return out


def write_tiny_model(path, arch: str = "llama", vocab: str | None = None, n_embd: int = 64,
                     n_layer: int = 2, n_head: int = 4, n_head_kv: int = 2, n_ff: int = 128,
                     n_ctx: int = 512, weight_type: int = QT.F32, embd_type: int | None = None,
                     tied: bool = True, seed: int = 0, rms_eps: float = 1e-5,
                     rope_freq_base: float = 10000.0, types: dict | None = None,
                     shapes: dict | None = None, drop=(), kv: dict | None = None,
                     chat_template: str | None = None, n_vocab: int = 300,
                     head_dim: int | None = None, weight_scale: float = 0.02,
                     n_expert: int = 4, n_expert_used: int = 2) -> pathlib.Path:
    """Write a random-weight llama/qwen2/qwen3/qwen3moe/phi3/gemma3 GGUF at `path` and return
    the path (see module doc). head_dim other than n_embd / n_head is written as
    attention.key_length (Qwen3-style); weight_scale is the standard deviation of the matrices
    (larger: more peaked logits); qwen3moe has n_expert experts of width n_ff, n_expert_used of
    them per token."""
    path = pathlib.Path(path)
    rng = np.random.default_rng(seed)
    meta = _synthetic_vocab(n_vocab) if vocab is None else _real_vocab(vocab)
    n_vocab = len(meta["tokenizer.ggml.tokens"])
    if head_dim is not None:
        kv = {f"{arch}.attention.key_length": head_dim, f"{arch}.attention.value_length": head_dim,
              **(kv or {})}
    head_dim = head_dim or n_embd // n_head
    if arch == "qwen3moe":      # n_ff is the experts' width
        kv = {f"{arch}.expert_count": n_expert, f"{arch}.expert_used_count": n_expert_used,
              f"{arch}.expert_feed_forward_length": n_ff, **(kv or {})}
    w = GGUFWriter(str(path), arch)
    a = arch + "."
    base = {a + "context_length": n_ctx, a + "embedding_length": n_embd,
            a + "block_count": n_layer, a + "feed_forward_length": n_ff,
            a + "attention.head_count": n_head, a + "attention.head_count_kv": n_head_kv,
            a + "attention.layer_norm_rms_epsilon": float(rms_eps),
            a + "rope.freq_base": float(rope_freq_base), a + "vocab_size": n_vocab,
            "general.name": f"tiny-{arch}", "general.file_type": 0}
    if chat_template is not None:
        base["tokenizer.chat_template"] = chat_template
    merged = {**base, **meta, **(kv or {})}
    for key, value in merged.items():
        if value is not None and key != "general.architecture":
            _add_kv(w, key, value)
    ne_by_name = tiny_tensors(arch, n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff, head_dim,
                              tied, n_expert)
    ne_by_name.update(shapes or {})
    for name, ne in ne_by_name.items():
        if name in drop:
            continue
        if len(ne) == 1:
            default = QT.F32
            data = (1.0 + 0.1 * rng.standard_normal(ne[0])) if name.endswith("norm.weight") \
                else 0.02 * rng.standard_normal(ne[0])
        else:
            default = embd_type if (name == "token_embd.weight" and embd_type is not None) \
                else weight_type
            data = weight_scale * rng.standard_normal(tuple(reversed(ne)))
        qtype = (types or {}).get(name, default)
        if ne[0] % GGML_QUANT_SIZES[QT(qtype)][0]:   # as llama.cpp's quantize: a fallback type
            qtype = QT.Q8_0 if ne[0] % 32 == 0 else QT.F32
        array, raw = _encode(np.asarray(data, dtype=np.float32), qtype, rng)
        w.add_tensor(name, array, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
