#!/usr/bin/env python3
"""acl_host's decode product kernels on one thread, as a share of this CPU's F32 FMA peak.

    python scripts/bench_gemm_kernel.py [--k 576] [--n 1536] [--rows 1,8] [--stream-mb 0] [--quick]

Builds scripts/gemm_kernel_bench.c with backend_cann/acl_host/src/gemm.c and f16.c (the compiler
in $CC, default cc, at -O3 as the Release build compiles them) and runs it once per row count. For
each weight type (Q4_1: INT4 + offsets, Q4_0: INT4, Q8_0: INT8, F16) it prints multiply-adds per
time-stamp-counter cycle with the weights in cache ("hot") and streamed from memory, the share of
the FMA peak that is, and the streamed weights' GB/s (what bounds one-row decode). The peak is
measured in the same run by a loop of independent fused multiply-adds, so turbo and the AVX-512
clock licence count on both sides. A kernel that also dequantizes cannot reach 100%: the 8-row
Q4_1 kernel spends 6 of its 22 vector instructions per 32-weight block on it, a ceiling of ~73%.

--stream-mb: megabytes the streamed copies of the weights span (default: twice the last-level
cache, at least 256). --quick: 2 ms batches instead of 20 (a smoke check; rough numbers).
x86-64 with AVX2 + FMA only.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
SRC = REPO / "backend_cann" / "acl_host" / "src"
HARNESS = REPO / "scripts" / "gemm_kernel_bench.c"
# bytes of the weights themselves per weight (the shared scales and offsets are not streamed)
WEIGHT_BYTES = {"Q4_1": 0.5, "Q4_0": 0.5, "Q8_0": 1.0, "F16": 2.0}


def last_level_cache_mb() -> float:
    """The largest cache sysfs lists for CPU 0, in MB (0 when unknown)."""
    best = 0.0
    for size in pathlib.Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = size.read_text().strip()
        scale = {"K": 1e-3, "M": 1.0, "G": 1e3}.get(text[-1:], None)
        try:
            value = float(text[:-1]) * scale if scale else float(text) / 1e6
        except ValueError:
            continue
        best = max(best, value)
    return best


def build(out_dir: str) -> str:
    exe = os.path.join(out_dir, "gemm_kernel_bench")
    cc = os.environ.get("CC", "cc")
    cmd = [cc, "-O3", "-DNDEBUG", "-std=gnu11", f"-I{SRC}", f"-I{SRC.parent / 'include'}",
           str(HARNESS), str(SRC / "gemm.c"), str(SRC / "f16.c"), "-lm", "-o", exe]
    subprocess.run(cmd, check=True)
    return exe


def run(exe: str, k: int, n: int, rows: int, stream_mb: float, batch_ms: float) -> dict:
    out = subprocess.run([exe, str(k), str(n), str(rows), str(stream_mb), str(batch_ms)],
                         check=True, capture_output=True, text=True).stdout
    result = {"cases": {}}
    for line in out.splitlines():
        parts = line.split()
        if parts[0] == "isa":
            result["isa"] = parts[1]
        elif parts[0] in ("peak", "tsc_ghz"):
            result[parts[0]] = float(parts[1])
        else:
            result["cases"][parts[0]] = (float(parts[2]), float(parts[4]))
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k", type=int, default=576, help="inner dimension (a multiple of 32)")
    ap.add_argument("--n", type=int, default=1536, help="output columns")
    ap.add_argument("--rows", default="1,8", help="comma list of row counts (1..16)")
    ap.add_argument("--stream-mb", type=float, default=0.0,
                    help="MB the streamed weight copies span (0: 2x the last-level cache, >= 256)")
    ap.add_argument("--quick", action="store_true", help="2 ms batches: a smoke check")
    args = ap.parse_args(argv)
    if args.k <= 0 or args.k % 32 or args.n <= 0:
        ap.error("--k must be a positive multiple of 32 and --n positive")
    try:
        rows = [int(r) for r in args.rows.split(",")]
    except ValueError:
        ap.error(f"--rows: a comma list of integers, not {args.rows!r}")
    if any(r < 1 or r > 16 for r in rows):
        ap.error("--rows: counts in 1..16 (more rows take the prefill panel kernel)")
    stream_mb = args.stream_mb or max(256.0, 2 * last_level_cache_mb())
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(tmp)
        print(f"k {args.k}, n {args.n}; streamed copies over {stream_mb:.0f} MB; one thread")
        print("| rows | weights | hot MAC/cycle | % of peak | streamed MAC/cycle | % of peak | "
              "streamed weights GB/s |")
        print("|---|---|---|---|---|---|---|")
        peaks = []
        for r in rows:
            res = run(exe, args.k, args.n, r, stream_mb, 2.0 if args.quick else 20.0)
            peaks.append(res["peak"])
            for kind, (hot, streamed) in res["cases"].items():
                gbs = streamed / r * WEIGHT_BYTES[kind] * res["tsc_ghz"]
                print(f"| {r} | {kind} | {hot:.1f} | {100 * hot / res['peak']:.0f}% | "
                      f"{streamed:.1f} | {100 * streamed / res['peak']:.0f}% | {gbs:.1f} |")
        print(f"F32 FMA peak ({res['isa']}): {', '.join(f'{p:.1f}' for p in peaks)} multiply-adds "
              f"per TSC cycle (the time-stamp counter, {res['tsc_ghz']:.2f} GHz, not the core clock)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
