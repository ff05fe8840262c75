"""The qwen3moe architecture (Qwen3-30B-A3B, Qwen3-235B-A22B): qwen3's attention (neox rope, Q/K
head norms) with a mixture-of-experts FFN in every layer: softmax routing over expert_count
experts, the expert_used_count most probable per token with their weights renormalised, SwiGLU
experts of width expert_feed_forward_length, no shared expert (llama.cpp's qwen3moe graph)."""

from __future__ import annotations

from .base import Key
from .qwen3 import Qwen3


class Qwen3Moe(Qwen3):
    name = "qwen3moe"
    moe = True
    extra_keys = (Key("n_expert", "expert_count", int),
                  Key("n_expert_used", "expert_used_count", int),
                  Key("n_ff_exp", "expert_feed_forward_length", int, 0))
