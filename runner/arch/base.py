"""What an architecture declares (the Arch base class), read by the generic loader and the model.

An architecture module in runner/arch/ subclasses Arch: its GGUF tensor-name table, the extra
hyperparameters it reads from `{arch}.*` keys, the tensors it expects with their shapes (ggml
order) and its graph builder. arch/__init__.py registers it under its `general.architecture`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# ggml's ROPE modes, here so that declarations load without the native libraries;
# tests/test_arch.py holds them equal to the C header's CLM_ROPE_TYPE_NEOX
ROPE_NORMAL, ROPE_NEOX = 0, 2


@dataclass(frozen=True)
class Key:
    """An extra hyperparameter: HParams.extra[name] = the GGUF key `{arch}.{key}` as `kind`
    (int, float, str, bool, or tuple: a scalar or array key as a tuple); `default` ... means
    the key is required."""
    name: str
    key: str
    kind: type
    default: object = ...


class Arch:
    """One architecture. Subclasses set the class attributes and override build_graph; the
    defaults describe a llama-style decoder (pre-norm attention and SwiGLU FFN)."""

    name: str = ""
    # llama.cpp's LLM_TENSOR_NAMES for this architecture: role -> GGUF name, {bid} is the layer
    tensor_names: dict = {
        "token_embd": "token_embd", "output_norm": "output_norm", "output": "output",
        "rope_freqs": "rope_freqs",
        "attn_norm": "blk.{bid}.attn_norm", "attn_q": "blk.{bid}.attn_q",
        "attn_k": "blk.{bid}.attn_k", "attn_v": "blk.{bid}.attn_v",
        "attn_output": "blk.{bid}.attn_output", "ffn_norm": "blk.{bid}.ffn_norm",
        "ffn_gate": "blk.{bid}.ffn_gate", "ffn_up": "blk.{bid}.ffn_up",
        "ffn_down": "blk.{bid}.ffn_down",
        "attn_q_norm": "blk.{bid}.attn_q_norm", "attn_k_norm": "blk.{bid}.attn_k_norm",
        "attn_qkv": "blk.{bid}.attn_qkv",
        "ffn_gate_up": "blk.{bid}.ffn_gate_up",     # gate and up fused at load (weight_fusions)
        "attn_post_norm": "blk.{bid}.post_attention_norm", "ffn_post_norm": "blk.{bid}.post_ffw_norm",
        "ffn_gate_inp": "blk.{bid}.ffn_gate_inp", "ffn_gate_exps": "blk.{bid}.ffn_gate_exps",
        "ffn_up_exps": "blk.{bid}.ffn_up_exps", "ffn_down_exps": "blk.{bid}.ffn_down_exps",
    }
    extra_keys: tuple = ()          # Key, ...: read into HParams.extra
    rope_type: int = ROPE_NORMAL
    qkv_bias: bool | None = None    # True: required, False: none, None: used when the file has it
    qk_norm: bool = False           # RMS norm of each Q and K head (attn_{q,k}_norm) before RoPE
    fused_gate_up: bool = False     # ffn_up holds gate and up ([n_embd, 2 n_ff]), no ffn_gate
    scale_q: bool = False           # Q scaled by attn_scale(hp) before attention (scale 1 there)
    post_norms: bool = False        # RMS norms of the attention and FFN outputs before each
                                    # residual add (attn_post_norm / ffn_post_norm)
    ffn_act: str = "silu"           # the gated FFN's activation: "silu" (SwiGLU), "gelu" (GEGLU,
                                    # tanh approximation)
    moe: bool = False               # a mixture-of-experts FFN: the router ffn_gate_inp picks
                                    # extra["n_expert_used"] of extra["n_expert"] SwiGLU experts

    # ---- per-model and per-layer hooks of the llama-style graph (arch/llama.py) ----------------
    def embed_scale(self, hp) -> float | None:
        """A factor on the token embeddings (gemma3: sqrt(n_embd)), or None."""
        return None

    def attn_scale(self, hp) -> float:
        """The scale of Q.K^T."""
        return 1.0 / math.sqrt(hp.head_dim)

    def is_swa(self, hp, il: int) -> bool:
        """Layer il attends through the sliding-window mask (kq_mask_swa, hp.extra["n_swa"])."""
        return False

    def layer_rope(self, hp, il: int) -> dict:
        """ROPE keywords layer il overrides (gemma3's local layers: their own freq_base)."""
        return {}

    def logit_softcap(self, hp) -> float | None:
        """cap * tanh(logits / cap) on the output (gemma2/3 when the GGUF has a cap), or None."""
        return None

    def check_hparams(self, hp) -> str | None:
        """What is wrong with hp for this architecture (the loader's GGUFError), or None."""
        if self.moe:
            n_exp, n_used = hp.extra["n_expert"], hp.extra["n_expert_used"]
            if not 0 < n_used <= n_exp:
                return (f"expert_used_count = {n_used} must be between 1 and expert_count = "
                        f"{n_exp}")
            if self.n_ff_exp(hp) <= 0:
                return "the expert FFN width (expert_feed_forward_length) must be positive"
        return None

    def n_ff_exp(self, hp) -> int:
        """An expert's FFN width: expert_feed_forward_length, else n_ff / n_expert_used (as
        llama.cpp)."""
        return hp.extra.get("n_ff_exp") or hp.n_ff // hp.extra["n_expert_used"]

    def tensor(self, role: str, suffix: str = "weight", bid: int | None = None) -> str:
        """The GGUF name of a tensor: tensor("attn_q", "bias", 3) -> "blk.3.attn_q.bias"."""
        return f"{self.tensor_names[role].format(bid=bid)}.{suffix}"

    def has_qkv_bias(self, tensors) -> bool:
        if self.qkv_bias is not None:
            return self.qkv_bias
        role = "attn_qkv" if self.has_fused_qkv(tensors) else "attn_q"
        return self.tensor(role, "bias", 0) in tensors

    def has_fused_qkv(self, tensors) -> bool:
        """Q, K and V come from one attn_qkv projection (any architecture, as in llama.cpp)."""
        return self.tensor("attn_qkv", bid=0) in tensors

    def weight_fusions(self, hp) -> list:
        """Projections of one input that weights.load_weights may load as one tensor, their rows
        stacked: per layer Q, K and V as attn_qkv (rows [Q | K | V], with their biases as
        attn_qkv.bias), and the gated FFN's gate and up as ffn_gate_up (rows [gate | up]). Each
        group is a list of (fused name, part names) fused all together or not at all; the graph
        takes the fused tensor where the store holds it. One product instead of three (two):
        fewer launches and thread-pool jobs per token, and on acl_host the same bits (each output
        element is the same sum, ah_gemm.h)."""
        t = self.tensor
        groups = []
        for i in range(hp.n_layer):
            if not hp.fused_qkv:
                group = [(t("attn_qkv", bid=i), [t(f"attn_{x}", bid=i) for x in "qkv"])]
                if hp.qkv_bias:
                    group.append((t("attn_qkv", "bias", i),
                                  [t(f"attn_{x}", "bias", i) for x in "qkv"]))
                groups.append(group)
            if not self.moe and not self.fused_gate_up:
                groups.append([(t("ffn_gate_up", bid=i),
                                [t("ffn_gate", bid=i), t("ffn_up", bid=i)])])
        return groups

    def expected_tensors(self, hp) -> dict:
        """name -> expected ne (ggml order) of every tensor the forward pass needs."""
        t = self.tensor
        q, kv = hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim
        out = {t("token_embd"): (hp.n_embd, hp.n_vocab), t("output_norm"): (hp.n_embd,)}
        if not hp.tied_embeddings:
            out[t("output")] = (hp.n_embd, hp.n_vocab)
        for i in range(hp.n_layer):
            out.update({
                t("attn_norm", bid=i): (hp.n_embd,), t("attn_output", bid=i): (q, hp.n_embd),
                t("ffn_norm", bid=i): (hp.n_embd,), t("ffn_down", bid=i): (hp.n_ff, hp.n_embd)})
            if hp.fused_qkv:
                out[t("attn_qkv", bid=i)] = (hp.n_embd, q + 2 * kv)
                if hp.qkv_bias:
                    out[t("attn_qkv", "bias", i)] = (q + 2 * kv,)
            else:
                out.update({t("attn_q", bid=i): (hp.n_embd, q), t("attn_k", bid=i): (hp.n_embd, kv),
                            t("attn_v", bid=i): (hp.n_embd, kv)})
                if hp.qkv_bias:
                    out.update({t("attn_q", "bias", i): (q,), t("attn_k", "bias", i): (kv,),
                                t("attn_v", "bias", i): (kv,)})
            if self.moe:
                n_exp, n_ff_exp = hp.extra["n_expert"], self.n_ff_exp(hp)
                del out[t("ffn_down", bid=i)]
                out.update({t("ffn_gate_inp", bid=i): (hp.n_embd, n_exp),
                            t("ffn_gate_exps", bid=i): (hp.n_embd, n_ff_exp, n_exp),
                            t("ffn_up_exps", bid=i): (hp.n_embd, n_ff_exp, n_exp),
                            t("ffn_down_exps", bid=i): (n_ff_exp, hp.n_embd, n_exp)})
            elif self.fused_gate_up:
                out[t("ffn_up", bid=i)] = (hp.n_embd, 2 * hp.n_ff)
            else:
                out.update({t("ffn_gate", bid=i): (hp.n_embd, hp.n_ff),
                            t("ffn_up", bid=i): (hp.n_embd, hp.n_ff)})
            if self.qk_norm:
                out.update({t("attn_q_norm", bid=i): (hp.head_dim,),
                            t("attn_k_norm", bid=i): (hp.head_dim,)})
            if self.post_norms:
                out.update({t("attn_post_norm", bid=i): (hp.n_embd,),
                            t("ffn_post_norm", bid=i): (hp.n_embd,)})
        return out

    def optional_tensors(self, hp) -> dict:
        """name -> expected ne of tensors used when present (checked only then)."""
        return {self.tensor("rope_freqs"): (hp.rope_n_dims // 2,)}

    def build_graph(self, hp, weights: dict, kv, n_tokens: int, n_kv: int, n_outputs: int,
                    flash_attn: bool = True, embeddings: bool = False, tp=None):
        """The forward graph of one micro-batch (a ForwardGraph, see arch/llama.py): logits of
        the n_outputs rows, or with embeddings=True their final-norm hidden states (result_norm
        F32 [n_embd, n_outputs]) and no output projection. tp: a tensor-parallel rank's graph
        (arch/llama.py's TPGraph), with hp and weights its shard's."""
        raise NotImplementedError(f"architecture {self.name!r} has no graph builder")

    def __repr__(self):
        return f"<arch {self.name}>"
