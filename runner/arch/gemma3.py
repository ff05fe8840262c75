"""The gemma3 architecture (Gemma 3 text models, 270M-27B), following llama.cpp's gemma3 graph:

- token embeddings scaled by sqrt(n_embd);
- RMS norms everywhere with the weights as stored (Gemma's checkpoints keep w and apply 1 + w;
  llama.cpp's converter writes 1 + w into the GGUF, so the graph multiplies by the weight as is);
- Q/K head norms, and post-attention / post-FFN norms before each residual add;
- GEGLU FFN (tanh-approximated GELU);
- local sliding-window attention on 5 of every 6 layers (attention.sliding_window_pattern: a
  period, or one bool per layer), with their own RoPE base (rope.freq_base_swa, 10000 by default)
  and scale 1, global layers with rope.freq_base and the file's rope scaling;
- Q scaled by 1/sqrt(head_dim) before attention (27B: 1/sqrt(n_embd / n_head));
- the final logit soft-cap when the file has final_logit_softcapping.
"""

from __future__ import annotations

import math

from .base import ROPE_NEOX, Key
from .llama import Llama


class Gemma3(Llama):
    name = "gemma3"
    rope_type = ROPE_NEOX
    qk_norm = True
    post_norms = True
    scale_q = True
    ffn_act = "gelu"
    extra_keys = (Key("n_swa", "attention.sliding_window", int, 0),
                  Key("swa_pattern", "attention.sliding_window_pattern", tuple, (6,)),
                  Key("rope_freq_base_swa", "rope.freq_base_swa", float, 10000.0),
                  Key("logit_softcap", "final_logit_softcapping", float, 0.0))

    def embed_scale(self, hp):
        return math.sqrt(hp.n_embd)

    def attn_scale(self, hp):
        if hp.n_layer == 62:     # Gemma 3 27B, as llama.cpp keys it: the query_pre_attn_scalar
            return 1.0 / math.sqrt(hp.n_embd / hp.n_head)
        return 1.0 / math.sqrt(hp.head_dim)

    def is_swa(self, hp, il):
        if hp.extra["n_swa"] <= 0:
            return False
        pattern = hp.extra["swa_pattern"]
        if len(pattern) > 1:     # one flag per layer
            return bool(pattern[il])
        n = int(pattern[0])
        return n == 0 or il % n < n - 1

    def layer_rope(self, hp, il):
        if self.is_swa(hp, il):
            return {"freq_base": hp.extra["rope_freq_base_swa"], "freq_scale": 1.0}
        return {}

    def logit_softcap(self, hp):
        return hp.extra["logit_softcap"] or None
