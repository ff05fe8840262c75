"""The architecture registry: GGUF `general.architecture` -> its declaration (runner/arch/base.py).

Each module here declares one architecture (tensor names, extra hyperparameters, expected tensors
and the forward graph of a micro-batch with llama.cpp's tensor names); the generic loader and the
model reach them only through get(). Adding one: docs/adding-a-model.md.
"""

from __future__ import annotations

from .base import ROPE_NEOX, ROPE_NORMAL, Arch, Key
from .gemma3 import Gemma3
from .llama import ForwardGraph, Llama, TPGraph
from .phi3 import Phi3
from .qwen2 import Qwen2
from .qwen3 import Qwen3
from .qwen3moe import Qwen3Moe

ARCHS: dict[str, Arch] = {a.name: a for a in (Gemma3(), Llama(), Phi3(), Qwen2(), Qwen3(), Qwen3Moe())}


def supported() -> tuple[str, ...]:
    """The architecture names the registry knows, sorted."""
    return tuple(sorted(ARCHS))


def get(name: str) -> Arch:
    """The declaration of `name`; KeyError naming the supported ones otherwise."""
    try:
        return ARCHS[name]
    except KeyError:
        raise KeyError(f"unknown architecture {name!r}; supported: {', '.join(supported())}") \
            from None


def build_graph(hp, weights: dict, kv, n_tokens: int, n_kv: int, n_outputs: int,
                flash_attn: bool = True, embeddings: bool = False,
                tp: TPGraph | None = None) -> ForwardGraph:
    """The forward graph of one micro-batch for hp.arch (see Arch.build_graph)."""
    return get(hp.arch).build_graph(hp, weights, kv, n_tokens, n_kv, n_outputs, flash_attn,
                                    embeddings, tp)


__all__ = ["ARCHS", "Arch", "ForwardGraph", "Key", "ROPE_NEOX", "ROPE_NORMAL", "TPGraph",
           "build_graph", "get", "supported"]
