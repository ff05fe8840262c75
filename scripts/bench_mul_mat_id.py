#!/usr/bin/env python3
"""MUL_MAT_ID's two CANN compositions side by side on this machine's device (acl_host here): the
experts of one Qwen3-MoE FFN (router top-k by ARGSORT, gate and up broadcasting the token's row,
SwiGLU, down a row per slot), computed by a backend that gathers each token's experts and by
one that routes the tokens through a grouped product (CANN_LLM_MUL_MAT_ID=gather / routed),
interleaved, for each token count. Prints the median milliseconds per FFN and routed / gather.

    python scripts/bench_mul_mat_id.py [--type q4_0] [--embd 512] [--ff 256] [--experts 32]
        [--used 8] [--tokens 1,2,3,4,64,128,256,512] [-r 7]
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

from cann_llm.dtypes import bf16_bits


def build(clm, device, wtype, n_embd, n_ff, n_expert, n_used, n_tokens, rng):
    ctx = clm.Context(64)
    x = ctx.new_tensor(clm.TensorType.F32, [n_embd, n_tokens], name="x")
    logits = ctx.new_tensor(clm.TensorType.F32, [n_expert, n_tokens], name="logits")
    mats = {name: ctx.new_tensor(wtype, ne + [n_expert], name=name)
            for name, ne in (("gate", [n_embd, n_ff]), ("up", [n_embd, n_ff]), ("down", [n_ff, n_embd]))}
    ids = ctx.argsort_top_k(logits, n_used)                                  # [n_used, n_tokens]
    cur = ctx.reshape(x, [n_embd, 1, n_tokens])
    gate = ctx.mul_mat_id(mats["gate"], cur, ids)
    up = ctx.mul_mat_id(mats["up"], cur, ids)
    out = ctx.mul_mat_id(mats["down"], ctx.swiglu_split(gate, up), ids)      # [n_embd, n_used, n_tokens]
    graph = ctx.new_graph().build_forward(out)
    buffer = ctx.alloc_tensors(device.buffer_type)
    for name, t in mats.items():
        k, n = t.ne[0], t.ne[1]
        values = (0.05 * rng.standard_normal((n_expert, n, k))).astype(np.float32)
        if wtype == clm.TensorType.F32:
            t.set(values)
        elif wtype == clm.TensorType.F16:
            t.set(values.astype(np.float16))
        elif wtype == clm.TensorType.BF16:
            t.set(bf16_bits(values))
        else:
            t.set(clm.quantize_f32(wtype, values).reshape(n_expert, n, -1))
    x.set(rng.standard_normal((n_tokens, n_embd)).astype(np.float32))
    logits.set(rng.standard_normal((n_tokens, n_expert)).astype(np.float32))
    return ctx, buffer, graph, out


def backend_with(device, path):
    saved = os.environ.get("CANN_LLM_MUL_MAT_ID")
    os.environ["CANN_LLM_MUL_MAT_ID"] = path
    try:
        return device.init_backend()
    finally:
        if saved is None:
            os.environ.pop("CANN_LLM_MUL_MAT_ID")
        else:
            os.environ["CANN_LLM_MUL_MAT_ID"] = saved


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--type", default="q4_0", help="expert weight type: f32 f16 bf16 q8_0 q4_0 q4_1")
    ap.add_argument("--embd", type=int, default=512)
    ap.add_argument("--ff", type=int, default=256, help="each expert's width")
    ap.add_argument("--experts", type=int, default=32)
    ap.add_argument("--used", type=int, default=8)
    ap.add_argument("--tokens", default="1,2,3,4,64,128,256,512")
    ap.add_argument("-r", "--repetitions", type=int, default=7)
    args = ap.parse_args(argv)
    from cann_llm import backend as clm

    wtype = clm.TensorType[args.type.upper()]
    device = clm.Registry().devices[0]
    rng = np.random.default_rng(0)
    paths = ("gather", "routed")
    backends = {p: backend_with(device, p) for p in paths}
    print(f"{args.type} experts: n_embd {args.embd}, width {args.ff}, {args.used} of {args.experts}; "
          f"{device.description}, {args.repetitions} interleaved repetitions (median ms per FFN)")
    print(f"{'tokens':>6} {'gather':>10} {'routed':>10} {'routed/gather':>14} {'same bits':>10}")
    for n_tokens in [int(t) for t in args.tokens.split(",")]:
        ctx, buffer, graph, out = build(clm, device, wtype, args.embd, args.ff, args.experts, args.used,
                                        n_tokens, rng)
        times = {p: [] for p in paths}
        results = {}
        for p in paths:  # warm-up (pool growth, first-touch)
            backends[p].graph_compute(graph)
            backends[p].synchronize()
            results[p] = out.get().tobytes()
        for _ in range(args.repetitions):
            for p in paths:
                t0 = time.perf_counter()
                backends[p].graph_compute(graph)
                backends[p].synchronize()
                times[p].append((time.perf_counter() - t0) * 1e3)
        g, r = statistics.median(times["gather"]), statistics.median(times["routed"])
        same = results["gather"] == results["routed"]
        print(f"{n_tokens:>6} {g:>10.3f} {r:>10.3f} {r / g:>14.2f} {str(same):>10}")
        buffer.close()
        ctx.close()
    for b in backends.values():
        b.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
