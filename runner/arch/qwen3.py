"""The qwen3 architecture (Qwen3 dense models): llama's graph with neox rope and an RMS norm of
every Q and K head (attn_q_norm / attn_k_norm, head_dim weights) before RoPE. Qwen3 has no QKV
biases; as in llama.cpp, a file that has them gets them added."""

from __future__ import annotations

from .base import ROPE_NEOX
from .llama import Llama


class Qwen3(Llama):
    name = "qwen3"
    rope_type = ROPE_NEOX
    qk_norm = True
