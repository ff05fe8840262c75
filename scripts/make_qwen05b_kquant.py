#!/usr/bin/env python3
"""The [perf] benchmark's larger model: a GGUF of Qwen2.5-0.5B's shape (qwen2, 24 layers, n_embd
896, 14 query / 2 KV heads of 64, n_ff 4864, tied embeddings, the real 151,936-token Qwen2
vocabulary) with random weights, quantized by llama.cpp itself as Q4_K_M files are. 896 is not a
multiple of 256, so llama.cpp's quantizer mixes Q4_K and Q6_K (the 4864-wide ffn_down) with its
fallbacks Q5_0 and Q8_0, as in the published Qwen2.5-0.5B Q4_K_M.

    python scripts/make_qwen05b_kquant.py [OUT.gguf] [--python PY] [--keep-f16]

OUT defaults to $XDG_CACHE_HOME/cann-llm/bench/qwen2.5-0.5b-shape.Q4_K_M.gguf. --python is a
Python that imports llama_cpp (default: this one, else /tmp/vllama/bin/python). The F16 file
(~1 GB) is written beside OUT and removed unless --keep-f16. Prints the tensor type mix.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "scripts"))

from gguf import GGMLQuantizationType as QT  # noqa: E402

from check_arch_llamacpp import find_python, quantize  # noqa: E402
from tiny_models import write_tiny_model  # noqa: E402

SHAPE = dict(arch="qwen2", vocab="qwen2", n_embd=896, n_layer=24, n_head=14, n_head_kv=2,
             n_ff=4864, n_ctx=32768, rope_freq_base=1e6, rms_eps=1e-6, tied=True,
             weight_type=QT.F16)


def default_out() -> pathlib.Path:
    cache = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache")
    return cache / "cann-llm" / "bench" / "qwen2.5-0.5b-shape.Q4_K_M.gguf"


def type_mix(path: pathlib.Path) -> dict:
    from cann_llm import loader
    g = loader.open_gguf(path)
    mix: dict = {}
    for t in g.tensors.values():
        name = loader.type_name(t.type)
        n, b = mix.get(name, (0, 0))
        mix[name] = (n + 1, b + t.nbytes)
    return mix


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", type=pathlib.Path, default=None)
    ap.add_argument("--python", default=None, help="a Python that imports llama_cpp")
    ap.add_argument("--keep-f16", action="store_true", help="keep the F16 file beside OUT")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    out = args.out or default_out()
    out.parent.mkdir(parents=True, exist_ok=True)
    f16 = out.with_name(out.stem.replace(".Q4_K_M", "") + ".F16.gguf")
    python = find_python(args.python)
    print(f"writing {f16} (random weights, Qwen2.5-0.5B's shape)", flush=True)
    write_tiny_model(f16, seed=args.seed, **SHAPE)
    print(f"quantizing to Q4_K_M with llama.cpp ({python}) -> {out}", flush=True)
    quantize(python, f16, out, "Q4_K_M")
    if not args.keep_f16:
        f16.unlink()
    for name, (n, nbytes) in sorted(type_mix(out).items()):
        print(f"  {name:6s} {n:4d} tensors {nbytes / 2**20:8.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
