"""The llama architecture (Llama 2/3, Mistral-style models, SmolLM): its declaration and the
forward pass of one micro-batch as a ggml-style graph (qwen2.py reuses it).

Tensor names follow llama.cpp (inp_embd, attn_norm-0, Qcur-0, ..., __fattn__-0, l_out-0,
result_norm, result_output) so the eval callback and tensor diffs line up with llama-eval-callback.
The graph writes this micro-batch's K and V into the cache rows given by an index tensor
(SET_ROWS) and attends over the first n_kv cells under the KQ mask. Only the rows listed in
inp_out_ids reach the output projection; an embeddings graph stops at result_norm (no output
projection). Shapes are ggml order: [n_embd, n_tokens] is n_tokens rows of n_embd.

With `tp` (a tensor-parallel rank, runner/tensor_parallel.py) the same graph runs on one rank's
shard: hp holds the rank's heads, KV heads, FFN columns and vocabulary rows; the embedding is a
masked lookup of the rank's vocabulary rows summed over the ranks (ALL_REDUCE), the attention
output and FFN down projections are summed over the ranks (ALL_REDUCE, before their biases and
post-norms), and the logits of the ranks' vocabulary shards are gathered (ALL_GATHER).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .base import ROPE_NORMAL, Arch

if TYPE_CHECKING:      # the backend loads with the first graph: the loader reads declarations only
    from .. import backend as be


@dataclass(frozen=True)
class TPGraph:
    """What the graph of a tensor-parallel rank needs beyond its shard's hp: the rank count and
    the rows of its vocabulary shard (equal on every rank, the last one padded with zero rows)."""
    n_ranks: int
    vocab_rows: int


@dataclass
class ForwardGraph:
    ctx: be.Context
    graph: be.Graph
    inputs: dict          # name -> leaf tensor: inp_tokens, inp_pos, kq_mask, kv_idxs, inp_out_ids
    logits: be.Tensor | None       # result_output F32 [n_vocab, n_outputs] (None: embeddings)
    n_tokens: int
    n_kv: int
    n_outputs: int
    embd: be.Tensor | None = None  # embeddings graph: result_norm F32 [n_embd, n_outputs]


def _input(ctx, ttype, ne, name):
    t = ctx.new_tensor(ttype, ne, name=name)
    t.mark_input()
    return t


def llama_graph(arch: Arch, hp, weights: dict, kv, n_tokens: int, n_kv: int, n_outputs: int,
                flash_attn: bool = True, embeddings: bool = False,
                tp: TPGraph | None = None) -> ForwardGraph:
    """The graph of one micro-batch: n_tokens new tokens, attention over cells [0, n_kv) of the
    unified cache `kv` (runner.kv_cache.KVCache), logits for n_outputs of the tokens (embeddings:
    their final-norm hidden states, result_norm, instead). tp: one tensor-parallel rank's graph
    (module doc); its logits are [vocab_rows * n_ranks, n_outputs], the padding rows last."""
    from .. import backend as be
    from ..backend import TensorType
    n_layer, n_embd, head_dim = hp.n_layer, hp.n_embd, hp.head_dim
    n_head, n_head_kv = hp.n_head, hp.n_head_kv
    n_embd_k_gqa = n_embd_v_gqa = head_dim * n_head_kv
    per_layer = 64 + (4 * hp.extra["n_expert_used"] + 32 if arch.moe else 0)
    ctx = be.Context(max_tensors=per_layer * n_layer + 64)
    w, tn = weights, arch.tensor

    def name(t, base, il=None):
        t.name = base if il is None else f"{base}-{il}"
        return t

    inp_tokens = _input(ctx, TensorType.I32, [n_tokens], "inp_tokens")
    inp_pos = _input(ctx, TensorType.I32, [n_tokens], "inp_pos")
    kq_mask = _input(ctx, TensorType.F16, [n_kv, n_tokens], "kq_mask")
    # the sliding-window mask, for architectures with local layers (KVCache.mask with n_swa)
    kq_mask_swa = _input(ctx, TensorType.F16, [n_kv, n_tokens], "kq_mask_swa") \
        if any(arch.is_swa(hp, il) for il in range(n_layer)) else None
    kv_idxs = _input(ctx, TensorType.I64, [n_tokens], "kv_idxs")
    out_ids = _input(ctx, TensorType.I32, [n_outputs], "inp_out_ids")
    freq_factors = w.get(tn("rope_freqs"))
    rope_kw = dict(n_dims=hp.rope_n_dims, mode=hp.rope_type, freq_base=hp.rope_freq_base,
                   freq_scale=hp.rope_freq_scale, n_ctx_orig=hp.n_ctx_train)
    if hp.rope_yarn is not None:
        ext, attn, fast, slow, n_orig = hp.rope_yarn
        rope_kw.update(ext_factor=ext, attn_factor=attn, beta_fast=fast, beta_slow=slow,
                       n_ctx_orig=n_orig)
    kq_scale = arch.attn_scale(hp)

    graph = ctx.new_graph(max_nodes=per_layer * n_layer + 64)
    inpL = name(ctx.get_rows(w[tn("token_embd")], inp_tokens), "inp_embd")
    embd_mask = None
    if tp is not None:
        # inp_tokens holds the rows of this rank's vocabulary shard (0 for tokens of other
        # shards), inp_embd_mask 1 for the tokens in the shard, else 0: the sum over the ranks
        # is the embedding
        embd_mask = _input(ctx, TensorType.F32, [1, n_tokens], "inp_embd_mask")
        inpL = name(ctx.all_reduce(name(ctx.mul(inpL, embd_mask), "inp_embd_shard")), "inp_embd")
    embed_scale = arch.embed_scale(hp)
    if embed_scale is not None:
        inpL = name(ctx.scale(inpL, embed_scale), "inp_scaled")
    for il in range(n_layer):
        inpSA = inpL
        mask = kq_mask_swa if arch.is_swa(hp, il) else kq_mask
        layer_rope = {**rope_kw, **arch.layer_rope(hp, il)}
        cur = ctx.rms_norm(inpL, hp.rms_eps)
        name(cur, "norm", il)
        cur = name(ctx.mul(cur, w[tn("attn_norm", bid=il)]), "attn_norm", il)

        def proj(kind, n_heads):
            t = name(ctx.mul_mat(w[tn(f"attn_{kind}", bid=il)], cur), f"{kind.upper()}cur", il)
            bias = w.get(tn(f"attn_{kind}", "bias", il))
            if bias is not None:
                t = name(ctx.add(t, bias), f"{kind.upper()}cur", il)
            return t

        if hp.fused_qkv or tn("attn_qkv", bid=il) in w:
            # one projection (the file's, or fused at load: Arch.weight_fusions); Q, K and V are
            # views of its rows [Q | K | V] (llama.cpp's build_qkv)
            qkv = proj("qkv", 0)
            name(qkv, "wqkv", il)
            es, row = qkv.nb[0], qkv.nb[1]
            q_dim = head_dim * n_head

            def head_view(n_heads, first):
                return ctx.view_4d(qkv, [head_dim, n_heads, n_tokens],
                                   [head_dim * es, row, row * n_tokens], first * es)
            q = name(head_view(n_head, 0), "Qcur", il)
            k = name(head_view(n_head_kv, q_dim), "Kcur", il)
            v = name(head_view(n_head_kv, q_dim + n_embd_k_gqa), "Vcur", il)
            # the rows V is stored from, [n_embd_v_gqa, n_tokens] (a view: V is not contiguous)
            v_rows = ctx.view_4d(qkv, [n_embd_v_gqa, n_tokens], [row, row * n_tokens],
                                 (q_dim + n_embd_k_gqa) * es)
        else:
            q = ctx.reshape(proj("q", n_head), [head_dim, n_head, n_tokens])
            k = ctx.reshape(proj("k", n_head_kv), [head_dim, n_head_kv, n_tokens])
            v = name(ctx.reshape(proj("v", n_head_kv), [head_dim, n_head_kv, n_tokens]),
                     "Vcur", il)
            v_rows = ctx.reshape(v, [n_embd_v_gqa, n_tokens])
        if arch.qk_norm:    # qwen3, gemma3: RMS norm over each head's head_dim values
            q = name(ctx.mul(ctx.rms_norm(q, hp.rms_eps), w[tn("attn_q_norm", bid=il)]),
                     "Qcur_normed", il)
            k = name(ctx.mul(ctx.rms_norm(k, hp.rms_eps), w[tn("attn_k_norm", bid=il)]),
                     "Kcur_normed", il)
        q = name(ctx.rope_ext(q, inp_pos, freq_factors, **layer_rope), "Qcur", il)
        k = name(ctx.rope_ext(k, inp_pos, freq_factors, **layer_rope), "Kcur", il)
        attn_scale = kq_scale
        if arch.scale_q:    # phi3, gemma3: Q scaled as a node of its own, attention at scale 1
            q = name(ctx.scale(q, kq_scale), "Qcur", il)
            attn_scale = 1.0

        # store this micro-batch's K and V rows into their cells (one row of the cache per cell)
        k_cache, v_cache = kv.k[il], kv.v[il]
        k_store = ctx.set_rows(k_cache, ctx.reshape(k, [n_embd_k_gqa, n_tokens]), kv_idxs)
        name(k_store, "k_store", il)
        v_store = ctx.set_rows(v_cache, v_rows, kv_idxs)
        name(v_store, "v_store", il)
        graph.build_forward(k_store)
        graph.build_forward(v_store)

        # K, V of cells [0, n_kv): [head_dim, n_kv, n_head_kv] views of the cache rows
        row_k, row_v = k_cache.nb[1], v_cache.nb[1]             # the cache's type (-ctk/-ctv)
        esize_k, esize_v = k_cache.nb[0], v_cache.nb[0]
        kview = name(ctx.view_4d(k_cache, [head_dim, n_kv, n_head_kv, 1],
                                 [row_k, head_dim * esize_k, row_k * n_kv]), "k", il)
        vview = name(ctx.view_4d(v_cache, [head_dim, n_kv, n_head_kv, 1],
                                 [row_v, head_dim * esize_v, row_v * n_kv]), "v", il)
        qp = ctx.permute(q, 0, 2, 1, 3)                # [head_dim, n_tokens, n_head]
        if flash_attn:
            # the KV cache's mask holds 0 and -inf only (kv_cache.KVCache.mask)
            fa = name(ctx.flash_attn_ext(qp, kview, vview, mask, attn_scale, mask_binary=True),
                      "__fattn__", il)
            cur = ctx.reshape(fa, [head_dim * n_head, n_tokens])
        else:
            kq = name(ctx.mul_mat(kview, qp), "kq", il)             # [n_kv, n_tokens, n_head]
            kq = name(ctx.soft_max_ext(kq, mask, attn_scale), "kq_soft_max", il)
            vt = ctx.cont(ctx.permute(vview, 1, 0, 2, 3))           # [n_kv, head_dim, n_head_kv]
            name(vt, "v_t", il)
            kqv = name(ctx.mul_mat(vt, kq), "kqv", il)              # [head_dim, n_tokens, n_head]
            merged = ctx.permute(kqv, 0, 2, 1, 3)                   # [head_dim, n_head, n_tokens]
            cur = ctx.reshape(name(ctx.cont(merged), "kqv_merged_cont", il),
                              [head_dim * n_head, n_tokens])
        name(cur, "kqv_out", il)
        cur = name(ctx.mul_mat(w[tn("attn_output", bid=il)], cur), "attn_out", il)
        if tp is not None:      # each rank's heads give a part of the sum
            cur = name(ctx.all_reduce(cur), "attn_out_sum", il)
        bias = w.get(tn("attn_output", "bias", il))
        if bias is not None:
            cur = name(ctx.add(cur, bias), "attn_out", il)
        if il == n_layer - 1:
            # only the rows whose logits are wanted go on (llama.cpp's inp_out_ids)
            cur = name(ctx.get_rows(cur, out_ids), "attn_out_rows", il)
            inpSA = name(ctx.get_rows(inpSA, out_ids), "inp_sa_rows", il)
        if arch.post_norms:
            cur = name(ctx.rms_norm(cur, hp.rms_eps), "norm", il)
            cur = name(ctx.mul(cur, w[tn("attn_post_norm", bid=il)]), "attn_post_norm", il)
        ffn_inp = name(ctx.add(cur, inpSA), "ffn_inp", il)

        cur = name(ctx.rms_norm(ffn_inp, hp.rms_eps), "norm", il)
        cur = name(ctx.mul(cur, w[tn("ffn_norm", bid=il)]), "ffn_norm", il)
        if arch.moe:
            cur = moe_ffn(ctx, arch, hp, w, cur, il, name)
        elif arch.fused_gate_up:      # phi3: ffn_up's rows are [gate | up]
            up = name(ctx.mul_mat(w[tn("ffn_up", bid=il)], cur), "ffn_up", il)
            cur = name(ctx.swiglu(up), "ffn_swiglu", il)
        elif tn("ffn_gate_up", bid=il) in w:    # gate and up fused at load, rows [gate | up]
            gate_up = name(ctx.mul_mat(w[tn("ffn_gate_up", bid=il)], cur), "ffn_gate_up", il)
            if arch.ffn_act == "gelu":
                cur = name(ctx.geglu(gate_up), "ffn_geglu", il)
            else:
                cur = name(ctx.swiglu(gate_up), "ffn_swiglu", il)
        else:
            gate = name(ctx.mul_mat(w[tn("ffn_gate", bid=il)], cur), "ffn_gate", il)
            up = name(ctx.mul_mat(w[tn("ffn_up", bid=il)], cur), "ffn_up", il)
            if arch.ffn_act == "gelu":
                cur = name(ctx.geglu_split(gate, up), "ffn_geglu", il)
            else:
                cur = name(ctx.swiglu_split(gate, up), "ffn_swiglu", il)
        if not arch.moe:
            cur = name(ctx.mul_mat(w[tn("ffn_down", bid=il)], cur), "ffn_out", il)
            if tp is not None:  # each rank's FFN columns give a part of the sum
                cur = name(ctx.all_reduce(cur), "ffn_out_sum", il)
        if arch.post_norms:
            cur = name(ctx.rms_norm(cur, hp.rms_eps), "norm", il)
            cur = name(ctx.mul(cur, w[tn("ffn_post_norm", bid=il)]), "ffn_post_norm", il)
        inpL = name(ctx.add(cur, ffn_inp), "l_out", il)

    cur = name(ctx.rms_norm(inpL, hp.rms_eps), "norm")
    cur = name(ctx.mul(cur, w[tn("output_norm")]), "result_norm")
    inputs = {"inp_tokens": inp_tokens, "inp_pos": inp_pos, "kq_mask": kq_mask,
              "kv_idxs": kv_idxs, "inp_out_ids": out_ids}
    if kq_mask_swa is not None:
        inputs["kq_mask_swa"] = kq_mask_swa
    if embd_mask is not None:
        inputs["inp_embd_mask"] = embd_mask
    if embeddings:
        cur.mark_output()
        graph.build_forward(cur)
        return ForwardGraph(ctx, graph, inputs, None, n_tokens, n_kv, n_outputs, embd=cur)
    out_w = w.get(tn("output")) or w[tn("token_embd")]
    logits = name(ctx.mul_mat(out_w, cur), "result_output")
    if tp is not None:
        # [vocab_rows, n_outputs] per rank -> [vocab_rows, n_outputs, 1, n_ranks] -> each
        # output's rows of every shard in rank order: [vocab_rows * n_ranks, n_outputs]
        name(logits, "result_output_shard")
        gathered = ctx.all_gather(logits, tp.n_ranks)
        gathered = ctx.reshape(name(gathered, "result_output_gathered"),
                               [tp.vocab_rows, n_outputs, tp.n_ranks])
        logits = ctx.cont(ctx.permute(gathered, 0, 2, 1, 3))
        logits = name(ctx.reshape(logits, [tp.vocab_rows * tp.n_ranks, n_outputs]),
                      "result_output")
    cap = arch.logit_softcap(hp)
    if cap:
        logits = ctx.scale(ctx.tanh(ctx.scale(logits, 1.0 / cap)), cap)
        name(logits, "result_output")
    logits.mark_output()
    graph.build_forward(logits)
    return ForwardGraph(ctx, graph, inputs, logits, n_tokens, n_kv, n_outputs)


def moe_ffn(ctx, arch: Arch, hp, w, cur, il: int, name):
    """llama.cpp's build_moe_ffn with softmax gating, SwiGLU experts and normalised weights
    (Qwen3-MoE): the router's softmax over the experts, the n_used most probable (ARGSORT top-k),
    their probabilities renormalised to sum 1, each token through its experts (MUL_MAT_ID), and
    the experts' outputs summed with those weights. cur: [n_embd, n_tokens]."""
    tn, n_embd, n_tokens = arch.tensor, hp.n_embd, cur.ne[1]
    n_expert, n_used = hp.extra["n_expert"], hp.extra["n_expert_used"]
    logits = name(ctx.mul_mat(w[tn("ffn_gate_inp", bid=il)], cur), "ffn_moe_logits", il)
    probs = name(ctx.soft_max_ext(logits), "ffn_moe_probs", il)       # [n_expert, n_tokens]
    selected = name(ctx.argsort_top_k(probs, n_used), "ffn_moe_topk", il)   # I32 [n_used, n_t]
    name(selected.view_src, "ffn_moe_argsort", il)      # the sort the top-k is a view of
    weights = ctx.get_rows(ctx.reshape(probs, [1, n_expert, n_tokens]), selected)
    weights = ctx.reshape(name(weights, "ffn_moe_weights", il), [n_used, n_tokens])
    # renormalised to sum 1, the sum clamped to F16's smallest normal (llama.cpp's norm_w)
    wsum = name(ctx.sum_rows(weights), "ffn_moe_weights_sum", il)
    wsum = name(ctx.clamp(wsum, 6.103515625e-5, math.inf), "ffn_moe_weights_sum_clamped", il)
    weights = name(ctx.div(weights, wsum), "ffn_moe_weights_norm", il)
    weights = ctx.reshape(weights, [1, n_used, n_tokens])
    x = ctx.reshape(cur, [n_embd, 1, n_tokens])
    up = name(ctx.mul_mat_id(w[tn("ffn_up_exps", bid=il)], x, selected), "ffn_moe_up", il)
    gate = name(ctx.mul_mat_id(w[tn("ffn_gate_exps", bid=il)], x, selected), "ffn_moe_gate", il)
    act = name(ctx.swiglu_split(gate, up), "ffn_moe_swiglu", il)
    experts = name(ctx.mul_mat_id(w[tn("ffn_down_exps", bid=il)], act, selected),
                   "ffn_moe_down", il)                                # [n_embd, n_used, n_t]
    experts = name(ctx.mul(experts, weights), "ffn_moe_weighted", il)
    out = None
    for i in range(n_used):     # the experts' rows summed in order, as llama.cpp adds them
        view = ctx.view_4d(experts, [n_embd, n_tokens], [experts.nb[2], experts.nb[2] * n_tokens],
                           i * experts.nb[1])
        out = view if out is None else ctx.add(out, view)
    if n_used == 1:
        out = ctx.cont(out)
    return name(out, "ffn_moe_out", il)


class Llama(Arch):
    """llama: normal rope, QKV biases used when the file has them (the defaults of Arch)."""
    name = "llama"
    rope_type = ROPE_NORMAL

    def build_graph(self, hp, weights, kv, n_tokens, n_kv, n_outputs, flash_attn=True,
                    embeddings=False, tp=None):
        return llama_graph(self, hp, weights, kv, n_tokens, n_kv, n_outputs, flash_attn,
                           embeddings, tp)
