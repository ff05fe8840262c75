"""The qwen2 architecture (Qwen2, Qwen2.5): llama's graph with neox rope and required QKV biases."""

from __future__ import annotations

from .base import ROPE_NEOX
from .llama import Llama


class Qwen2(Llama):
    name = "qwen2"
    rope_type = ROPE_NEOX      # rotates pairs (i, i + n_dims/2), as llama.cpp's LLAMA_ROPE_TYPE_NEOX
    qkv_bias = True            # blk.N.attn_{q,k,v}.bias are part of the model
