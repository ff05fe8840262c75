#!/usr/bin/env python3
"""Server throughput on one machine: time to first token and aggregate tokens/s for 1, 4 and 8
concurrent streams against `cann-llm serve`, the batching speed-up (4 streams over 1), and our
own pp512 (prompt tokens/s) in the same run, since batched decode cannot beat prefill.

    python scripts/bench_serve.py [MODEL] [--streams 1,4,8] [-n 128] [-t 2] [--reps 2]

Starts its own server (--parallel = the largest stream count). Every stream asks for n tokens
with the end-of-generation tokens banned, greedy, so each request generates exactly n tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model, parallel, threads, ctx):
    port = free_port()
    cmd = [sys.executable, "-m", "cann_llm.cli", "serve", "--port", str(port), "-t",
           str(threads), "--parallel", str(parallel), "-c", str(ctx)]
    if model:
        cmd.insert(4, model)
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            sys.exit(f"server exited: {proc.stderr.read()}")
        time.sleep(0.1)
    proc.kill()
    sys.exit("server did not become ready")


def one_stream(url, prompt, n, ban, out, i):
    """One streamed request. The load generator shares the machine's cores with the server, so
    it stays cheap: raw bytes, split on event boundaries, JSON parsed only for the first content
    event (time to first token) and the usage event."""
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": n,
            "temperature": 0, "stream": True, "logit_bias": ban,
            "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    first = None
    tokens = 0
    buf = b""
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=600) as r:
        for data in r.iter_raw():
            buf += data
            *events, buf = buf.split(b"\n\n")
            for ev in events:
                if first is None and b'"content":"' in ev and b'"content":""' not in ev:
                    first = time.perf_counter()
                if b'"choices":[]' in ev:
                    tokens = json.loads(ev[6:])["usage"]["completion_tokens"]
    out[i] = (first - t0 if first else float("nan"), tokens, time.perf_counter() - t0)


def run_streams(url, k, n, ban):
    out = [None] * k
    prompts = [f"Write a long essay about topic number {i}." for i in range(k)]
    threads = [threading.Thread(target=one_stream, args=(url, prompts[i], n, ban, out, i))
               for i in range(k)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"ttft_s": statistics.mean(o[0] for o in out),
            "tokens": sum(o[1] for o in out), "tokens_per_s": sum(o[1] for o in out) / wall}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument("--streams", default="1,4,8")
    ap.add_argument("-n", type=int, default=128, help="tokens per stream (128)")
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    counts = [int(x) for x in args.streams.split(",")]

    import cann_llm
    from cann_llm.bench import bench_ours
    model = cann_llm.load(args.model, n_ctx=1024, n_threads=args.threads)
    pp = statistics.median(bench_ours(model, n_prompt=512, n_gen=0, reps=3)["pp"])
    ban = {str(t): -100 for t in model.tokenizer.eog_ids}
    model.close()
    del model

    proc, url = start_server(args.model, max(counts), args.threads, 512)
    results = {"cpu": _cpu(), "threads": args.threads, "pp512_tokens_per_s": pp, "streams": {}}
    try:
        run_streams(url, 1, 8, ban)              # warm-up
        for k in counts:
            reps = [run_streams(url, k, args.n, ban) for _ in range(args.reps)]
            best = max(reps, key=lambda r: r["tokens_per_s"])
            results["streams"][k] = {**best, "all_tokens_per_s": [r["tokens_per_s"]
                                                                   for r in reps]}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    one = results["streams"].get(1, {}).get("tokens_per_s")
    four = results["streams"].get(4, {}).get("tokens_per_s")
    if one and four:
        results["speedup_4_over_1"] = four / one
        results["floor"] = min(2.5, 0.7 * pp / one)
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"CPU: {results['cpu']}, {args.threads} threads; pp512 {pp:.1f} tokens/s")
    print("| streams | TTFT (s) | aggregate tokens/s |")
    print("|---|---|---|")
    for k, r in results["streams"].items():
        print(f"| {k} | {r['ttft_s']:.3f} | {r['tokens_per_s']:.1f} "
              f"({', '.join(f'{x:.1f}' for x in r['all_tokens_per_s'])}) |")
    if "speedup_4_over_1" in results:
        print(f"4 streams / 1: {results['speedup_4_over_1']:.2f}x (floor "
              f"{results['floor']:.2f}x: 2.5, or 70% of pp512 / 1-stream if lower)")


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    main()
