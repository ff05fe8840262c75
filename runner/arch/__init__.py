"""Forward graphs per model architecture (llama, qwen2), built with the C core's op constructors.

Between the loader (hyperparameters, weights) and the scheduler (runner/sched.py): build_graph()
returns the graph of one micro-batch with llama.cpp's tensor names.
"""

from .llama import ForwardGraph, build_graph

__all__ = ["ForwardGraph", "build_graph"]
