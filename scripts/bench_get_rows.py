#!/usr/bin/env python3
"""GET_ROWS on the device: the AscendC kernel clm_get_rows against the aclnn IndexSelect
composition it replaced, for decode-sized index tensors (1 to 8 ids) from the default model's Q8_0
token_embd [576, 49152] (and, with --table, an F32 / F16 / Q4_0 / Q4_1 table made from it).

    python scripts/bench_get_rows.py [MODEL] [--ids 1,2,4,8] [--rounds 6] [--capture]
    python scripts/bench_get_rows.py --cpy F32,F16 --ids 1,64,512    (CPY of [576, n], the same way)

Each round runs two fresh processes one after the other, CANN_LLM_ASCENDC=1 (kernel) then 0
(IndexSelect), in alternating order; each process times a graph of 64 GET_ROWS nodes (so the
per-graph cost is spread) and reports microseconds per node, the median of its repetitions.
The result is the median over rounds of each path and their ratio (IndexSelect / kernel: above 1
means the kernel is faster). --capture keeps graph capture on (replays), else it is off.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

NODES = 64


def child_cpy(src_type: str, dst_type: str, rows_list: list[int], reps: int) -> dict:
    """CPY of [576, rows] src_type into a contiguous dst_type tensor, per node."""
    import numpy as np

    from cann_llm import backend as clm
    T = clm.TensorType
    device = clm.Registry().devices[0]
    rng = np.random.default_rng(7)
    out = {}
    with device.init_backend() as backend:
        for rows in rows_list:
            with clm.Context() as ctx:
                srcs = [ctx.new_tensor(T[src_type], [576, rows]) for _ in range(NODES)]
                dsts = [ctx.new_tensor(T[dst_type], [576, rows]) for _ in range(NODES)]
                graph = ctx.new_graph()
                for a, b in zip(srcs, dsts):
                    graph.build_forward(ctx.cpy(a, b))
                with ctx.alloc_tensors(device.buffer_type):
                    for a in srcs:
                        a.set(rng.standard_normal((rows, 576)).astype(np.float32).astype(
                            np.float16 if src_type == "F16" else np.float32))
                    samples = []
                    for rep in range(reps + 3):
                        start = time.perf_counter()
                        for _ in range(10):
                            backend.graph_compute(graph)
                        backend.synchronize()
                        if rep >= 3:
                            samples.append((time.perf_counter() - start) / (10 * NODES) * 1e6)
            out[rows] = statistics.median(samples)
    return out


def child(model: str, table_type: str, ids_list: list[int], reps: int) -> dict:
    import gguf
    import numpy as np

    from cann_llm import backend as clm
    from cann_llm import reference as ref

    reader = gguf.GGUFReader(model)
    embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
    assert embd.tensor_type == gguf.GGMLQuantizationType.Q8_0, embd.tensor_type
    ne0, n_vocab = (int(x) for x in embd.shape)
    T = clm.TensorType
    ttype = T[table_type]
    if ttype == T.Q8_0:
        stored = np.asarray(embd.data)
    else:
        values = gguf.quants.dequantize(np.asarray(embd.data), gguf.GGMLQuantizationType.Q8_0)
        stored = ref.encode(ttype, values.reshape(n_vocab, ne0))
    device = clm.Registry().devices[0]
    rng = np.random.default_rng(7)
    out = {}
    with device.init_backend() as backend:
        for n in ids_list:
            with clm.Context() as ctx:
                table = ctx.new_tensor(ttype, [ne0, n_vocab], name="token_embd")
                ids = [ctx.new_tensor(T.I32, [n], name=f"ids{i}") for i in range(NODES)]
                graph = ctx.new_graph()
                for i in range(NODES):
                    graph.build_forward(ctx.get_rows(table, ids[i]))
                with ctx.alloc_tensors(device.buffer_type):
                    table.set(stored)
                    for t in ids:
                        t.set(rng.integers(0, n_vocab, size=n).astype(np.int32))
                    for _ in range(3):
                        backend.graph_compute(graph)
                    backend.synchronize()
                    samples = []
                    for _ in range(reps):
                        start = time.perf_counter()
                        for _ in range(10):
                            backend.graph_compute(graph)
                        backend.synchronize()
                        samples.append((time.perf_counter() - start) / (10 * NODES) * 1e6)
            out[n] = statistics.median(samples)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", help="GGUF whose token_embd is Q8_0 (default: the default model)")
    parser.add_argument("--ids", default="1,2,4,8", help="ids per node, comma-separated")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--reps", type=int, default=15, help="timed repetitions in each process")
    parser.add_argument("--table", default="Q8_0", choices=["Q8_0", "Q4_0", "Q4_1", "F16", "F32"])
    parser.add_argument("--capture", action="store_true", help="keep graph capture (aclmdlRI replays) on")
    parser.add_argument("--cpy", metavar="SRC,DST",
                        help="time CPY of [576, n] SRC into DST (F32 / F16) instead, n from --ids")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    ids_list = [int(x) for x in args.ids.split(",")]
    if args.model is None:
        from cann_llm.model_store import default_model_path
        args.model = str(default_model_path(download=True))
    if args.child:
        if args.cpy:
            print(json.dumps(child_cpy(*args.cpy.split(","), ids_list, args.reps)))
        else:
            print(json.dumps(child(args.model, args.table, ids_list, args.reps)))
        return 0

    runs: dict[str, dict[int, list[float]]] = {"kernel": {}, "indexselect": {}}
    for r in range(args.rounds):
        order = ("kernel", "indexselect") if r % 2 == 0 else ("indexselect", "kernel")
        for path in order:
            env = {**os.environ, "CANN_LLM_ASCENDC": "1" if path == "kernel" else "0",
                   "GGML_CANN_ACL_GRAPH": "1" if args.capture else "0"}
            cmd = [sys.executable, __file__, args.model, "--child", "--ids", args.ids, "--reps",
                   str(args.reps), "--table", args.table] + (["--cpy", args.cpy] if args.cpy else [])
            res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            for n, us in json.loads(res.stdout).items():
                runs[path].setdefault(int(n), []).append(us)
    what = f"CPY {args.cpy} of [576, n]" if args.cpy else f"GET_ROWS from {args.table} token_embd"
    other = "aclnn/copy" if args.cpy else "IndexSelect"
    print(f"{what}, {NODES} nodes per graph, capture {'on' if args.capture else 'off'}, "
          f"{args.rounds} rounds (us per node, median)")
    print(f"{'n' if args.cpy else 'ids':>4} {'kernel':>9} {other:>12} {'ratio':>7}")
    for n in ids_list:
        k, i = statistics.median(runs["kernel"][n]), statistics.median(runs["indexselect"][n])
        print(f"{n:>4} {k:>9.2f} {i:>12.2f} {i / k:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
