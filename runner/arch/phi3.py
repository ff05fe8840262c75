"""The phi3 architecture (Phi-3 / Phi-3.5 mini and medium, Phi-4-mini): llama's graph with neox
rope, a fused QKV projection (attn_qkv, Q/K/V as views of its rows), a fused FFN input
projection (ffn_up = [gate | up], SwiGLU over its halves), and Q scaled by 1/sqrt(head_dim)
before attention, as llama.cpp's phi3 graph does. Long-context files (rope scaling "longrope",
rope_factors_long/short) are refused by the loader's rope-scaling check."""

from __future__ import annotations

from .base import ROPE_NEOX
from .llama import Llama


class Phi3(Llama):
    name = "phi3"
    rope_type = ROPE_NEOX
    fused_gate_up = True
    scale_q = True
