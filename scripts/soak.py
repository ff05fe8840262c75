#!/usr/bin/env python3
"""Soak test for `cann-llm serve` (not in CI): N concurrent streams for M minutes (after a warm-up under the same load). Reports
requests, errors, generated tokens/s, and the server's RSS at the start and at the end.

    python scripts/soak.py [MODEL] --streams 8 --minutes 10 [-t 2] [--url URL --pid PID]

Without --url it starts its own server (--parallel = streams). Each stream loops: a chat
request with a varied prompt, streamed, sampled (temperature 0.8, a seed per request), up to
64 tokens; every third one is cancelled mid-stream, and every fifth re-sends the previous turn
(the prefix cache at work).
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import threading
import time

import httpx

sys.path.insert(0, __import__("os").path.dirname(__file__))
from bench_serve import start_server  # noqa: E402


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def worker(url, stop_at, stats, lock, seed):
    rng = random.Random(seed)
    history = []
    with httpx.Client(base_url=url, timeout=300) as client:
        i = 0
        while time.monotonic() < stop_at:
            i += 1
            if i % 5 == 0 and history:
                messages = history + [{"role": "user", "content": "Tell me more."}]
            else:
                messages = [{"role": "user", "content": f"Tell me about {rng.choice(TOPICS)} "
                                                        f"number {rng.randint(1, 10**6)}."}]
            body = {"messages": messages, "max_tokens": 64, "temperature": 0.8,
                    "seed": rng.randint(0, 2**31), "stream": True,
                    "stream_options": {"include_usage": True}}
            cancel = i % 3 == 0
            text, tokens, ok = "", 0, True
            try:
                with client.stream("POST", "/v1/chat/completions", json=body) as r:
                    if r.status_code != 200:
                        ok = False
                        r.read()
                    else:
                        for n, line in enumerate(r.iter_lines()):
                            if cancel and n > 4:
                                break
                            if not line.startswith("data: ") or line == "data: [DONE]":
                                continue
                            chunk = json.loads(line[6:])
                            if "error" in chunk:
                                ok = False
                            elif chunk.get("usage"):
                                tokens = chunk["usage"]["completion_tokens"]
                            elif chunk["choices"]:
                                text += chunk["choices"][0]["delta"].get("content") or ""
            except (httpx.HTTPError, ValueError):
                ok = False
            if not cancel and ok:
                history = messages + [{"role": "assistant", "content": text}]
                history = history[-6:]
            with lock:
                stats["requests"] += 1
                stats["cancelled"] += cancel
                stats["errors"] += not ok
                stats["tokens"] += tokens


TOPICS = ["the sea", "volcanoes", "a city", "music", "trains", "bees", "the moon", "bread"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=1.0, help="minutes of load before RSS "
                    "is first read (1)")
    ap.add_argument("-t", "--threads", type=int, default=None)
    ap.add_argument("--url", default=None)
    ap.add_argument("--pid", type=int, default=None, help="the server's pid (with --url)")
    args = ap.parse_args()
    proc = None
    if args.url:
        url, pid = args.url, args.pid
    else:
        import os
        proc, url = start_server(args.model, args.streams, args.threads or os.cpu_count(), 1024)
        pid = proc.pid
    stats = {"requests": 0, "cancelled": 0, "errors": 0, "tokens": 0}
    lock = threading.Lock()
    try:
        # settle: the same load for --warmup minutes first, so that the graphs, the compute
        # buffers and the KV pages a full load touches are in place before RSS is read
        warm = [threading.Thread(target=worker, args=(url, time.monotonic() + args.warmup * 60,
                                                      dict.fromkeys(stats, 0), lock, -1 - i))
                for i in range(args.streams)]
        for t in warm:
            t.start()
        for t in warm:
            t.join()
        rss0 = rss_kib(pid) if pid else 0
        t0 = time.monotonic()
        stop_at = t0 + args.minutes * 60
        threads = [threading.Thread(target=worker, args=(url, stop_at, stats, lock, i))
                   for i in range(args.streams)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
        rss1 = rss_kib(pid) if pid else 0
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    growth = (rss1 - rss0) / rss0 * 100 if rss0 else float("nan")
    print(f"{args.streams} streams, {wall / 60:.1f} min: {stats['requests']} requests "
          f"({stats['cancelled']} cancelled on purpose), {stats['errors']} errors, "
          f"{stats['tokens'] / wall:.1f} generated tokens/s; server RSS {rss0 / 1024:.1f} -> "
          f"{rss1 / 1024:.1f} MiB ({growth:+.1f}%)")
    if proc is not None:
        print(f"server exit code: {proc.returncode}")
    sys.exit(1 if stats["errors"] else 0)


if __name__ == "__main__":
    main()
