#!/usr/bin/env python3
"""Element rates of the loader's conversions on one thread: backend.convert on random blocks
(finite fp16 scales) for Q5_0 -> Q8_0, Q4_K -> Q4_1, Q6_K -> Q8_0, and F32 -> Q8_0 (the Q8_0
quantizer behind the generic path).

    python scripts/bench_convert.py [--elements 1M,4M] [--repeats 15]
    CANN_LLM_HOST_ISA=scalar python scripts/bench_convert.py      (the portable loops)

Prints the best of --repeats calls per conversion and size, in G elements/s. The output buffer
is reused, so page faults do not count.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from cann_llm import backend as B
from cann_llm.ggml_types import GGML_QUANT_SIZES, GGMLQuantizationType as QT

CONVERSIONS = [(QT.Q5_0, QT.Q8_0), (QT.Q4_K, QT.Q4_1), (QT.Q6_K, QT.Q8_0)]
SCALE_OFFSET = {QT.Q5_0: [0], QT.Q4_K: [0, 2], QT.Q6_K: [208]}   # fp16 fields of each block


def random_blocks(qtype, n_elements: int, rng: np.random.Generator) -> np.ndarray:
    block, size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (n_elements // block, size), dtype=np.uint8)
    for off in SCALE_OFFSET[qtype]:
        scale = (rng.random(len(raw)) * 1e-3).astype(np.float16)
        raw[:, off:off + 2] = scale.view(np.uint8).reshape(-1, 2)
    return raw.reshape(-1)


def best_seconds(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def parse_count(text: str) -> int:
    text = text.strip().upper()
    n = int(text.rstrip("MK")) * (1 << 20 if text.endswith("M") else 1 << 10 if text.endswith("K") else 1)
    if n <= 0 or n % 256:
        raise argparse.ArgumentTypeError(f"{text}: a positive multiple of 256 elements")
    return n


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--elements", default="1M,4M", help="comma list of sizes (K/M suffixes)")
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args(argv)
    sizes = [parse_count(s) for s in args.elements.split(",")]
    rng = np.random.default_rng(0)
    isa = os.environ.get("CANN_LLM_HOST_ISA", "best the CPU has")
    print(f"CANN_LLM_HOST_ISA: {isa}")
    for n in sizes:
        for src, dst in CONVERSIONS:
            raw = random_blocks(src, n, rng)
            out = B.convert(src, raw, dst)
            s = best_seconds(lambda: B.convert(src, raw, dst, out), args.repeats)
            print(f"{src.name} -> {dst.name}, {n / 2**20:g}M elements: {n / s / 1e9:6.2f} G el/s")
        x = B.dequantize_f32(QT.Q6_K, random_blocks(QT.Q6_K, n, rng)).view(np.uint8)
        out = B.convert(QT.F32, x, QT.Q8_0)
        s = best_seconds(lambda: B.convert(QT.F32, x, QT.Q8_0, out), args.repeats)
        print(f"F32 -> Q8_0 (the quantizer), {n / 2**20:g}M elements: {n / s / 1e9:6.2f} G el/s")


if __name__ == "__main__":
    main()
