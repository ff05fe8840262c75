"""`cann-llm bench`: the command over cann_llm.bench (the measurement, which is also a library
and a standalone llama.cpp worker script, so it stays outside the CLI package): the model facts
of the table's first columns, the flags and the report."""

from __future__ import annotations

import os
import sys

from .common import RunError, resolve_model
from .run import add_model_arguments, load_model

__all__ = ["register", "add_bench_arguments", "cmd_bench"]


def register(commands) -> None:
    bench = commands.add_parser(
        "bench", help="prompt and generation tokens/s, llama-bench style (vs llama.cpp if found)")
    add_bench_arguments(bench)
    bench.set_defaults(handler=cmd_bench)


def _size(n_bytes):
    return f"{n_bytes / 2**30:.2f} GiB" if n_bytes >= 2**30 else f"{n_bytes / 2**20:.2f} MiB"


def _model_facts(path):
    from .. import loader
    g = loader.open_gguf(path)
    n_params = sum(_n_elements(t.ne) for t in g.tensors.values())
    n_bytes = sum(t.nbytes for t in g.tensors.values())
    types = {}
    for t in g.tensors.values():
        if len(t.ne) >= 2 and t.ne[1] > 1:
            name = loader.type_name(t.type)
            types[name] = types.get(name, 0) + t.nbytes
    main = max(types, key=types.get) if types else "?"
    params = f"{n_params / 1e9:.2f} B" if n_params >= 1e9 else f"{n_params / 1e6:.2f} M"
    label = f"{g.hparams.arch} {params.replace(' ', '')} {main}"
    return label, _size(n_bytes), params


def _n_elements(ne):
    n = 1
    for d in ne:
        n *= int(d)
    return n


def add_bench_arguments(p):
    p.add_argument("model", nargs="?", metavar="MODEL",
                   help="a .gguf file (default: the default model)")
    p.add_argument("-p", "--n-prompt", type=int, default=512, metavar="N",
                   help="prompt tokens of the pp test (0: skip; default 512)")
    p.add_argument("-n", "--n-gen", type=int, default=128, metavar="N",
                   help="generated tokens of the tg test (0: skip; default 128)")
    p.add_argument("-r", "--repetitions", type=int, default=5, metavar="N",
                   help="repetitions of each test (default 5)")
    p.add_argument("--batched", type=int, default=8, metavar="N",
                   help="also measure batched decode through the engine: N sequences stepping "
                        "together against one, aggregate tokens/s (0: skip; default 8)")
    p.add_argument("--llamacpp", default="auto", metavar="auto|off|PYTHON",
                   help="also measure llama.cpp (llama-cpp-python) on the same file: auto (when "
                        "this Python can import llama_cpp), off, or a Python that can")
    add_model_arguments(p, ctx_default=0, ctx_help="context size in tokens (default 0: what the "
                        "test needs, -p + -n + 16 and at least 1024)")


def _page_cache_before_open(path, fraction, use_cache: bool) -> list:
    """[(file, fraction in the page cache)] for what an open of `path` reads: the GGUF, and the
    weight cache's entry for it when there is one (use_cache: the open maps files)."""
    from ..weight_cache import cache_from_env
    out = [("GGUF", fraction(path))]
    try:
        cache = cache_from_env() if use_cache else None
    except ValueError:
        cache = None
    entry = cache.path_for(str(path)) if cache is not None else None
    if entry is not None and entry.exists():
        out.append(("weight cache entry", fraction(entry)))
    return [(what, frac) for what, frac in out if frac is not None]


def _timed_open(args, path, first_token_ms):
    """One open of `path`: (model, load ms, first token ms, the weight cache's state). A miss
    writes the weight cache after the first token, not during the measurements."""
    import time
    t_open = time.perf_counter()
    model = load_model(args, path)
    try:
        load_ms = 1e3 * (time.perf_counter() - t_open)
        weights = getattr(model, "weights", None)
        cache = weights.stats.get("cache", "off") if weights is not None else "off"
        first_ms = first_token_ms(model)
        if weights is not None:
            cache = weights.wait_cache() if cache != "hit" else cache
            if weights.stats.get("cache_error"):
                cache += f" ({weights.stats['cache_error']})"
    except BaseException:
        if hasattr(model, "close"):
            model.close()
        raise
    return model, load_ms, first_ms, cache


def _open_lines(opens, theirs, cached) -> list[str]:
    """bench's open-to-first-token lines: each open on both sides, and what was in the page
    cache before the first."""
    lines = []
    their_opens = (theirs or {}).get("opens") or []
    for i, (load_ms, first_ms, cache) in enumerate(opens):
        what = "first open" if i == 0 else "second open"
        line = (f"open to first token, {what}: cann-llm {load_ms + first_ms:.0f} ms (load "
                f"{load_ms:.0f} + first token {first_ms:.0f}; weight cache {cache})")
        if i < len(their_opens):
            t_load, t_first = their_opens[i]
            line += (f", llama.cpp {t_load + t_first:.0f} ms (load {t_load:.0f} + first token "
                     f"{t_first:.0f}), ratio {(load_ms + first_ms) / (t_load + t_first):.2f}x")
        lines.append(line)
    line = "in the page cache before the first open: cann-llm " + (
        ", ".join(f"{what} {frac:.0%}" for what, frac in cached) or "unknown")
    if their_opens:
        frac = theirs.get("page_cache")
        line += f"; llama.cpp GGUF {'unknown' if frac is None else f'{frac:.0%}'}"
    lines.append(line)
    return lines


def cmd_bench(args) -> int:
    from ..bench import bench_batched, bench_llamacpp, bench_ours, first_token_ms, format_rows, \
        host_time_per_token, llamacpp_python, mean_std, page_cache_fraction, peak_rss_mib
    for flag, v, lo in (("-p", args.n_prompt, 0), ("-n", args.n_gen, 0),
                        ("-r", args.repetitions, 1), ("--batched", args.batched, 0)):
        if v < lo:
            raise RunError(f"{flag} must be >= {lo}, got {v}")
    if not args.n_prompt and not args.n_gen:
        raise RunError("nothing to measure: -p 0 and -n 0")
    path = resolve_model(args.model)
    if not args.ctx_size:
        args.ctx_size = max(args.n_prompt + args.n_gen + 16, 1024)
    label, size, params = _model_facts(path)
    from .. import chat_template, engine, model, tokenizer, weights  # noqa: F401  (before the
    # clock, as the llama.cpp side imports llama_cpp first)
    cached = _page_cache_before_open(path, page_cache_fraction,
                                     not getattr(args, "no_mmap", False))
    model, *first_open = _timed_open(args, path, first_token_ms)
    opens = [tuple(first_open)]
    if args.tensor_parallel == 1 and hasattr(model, "close"):
        # again, as a re-open of the file finds it: its pages cached, the weight cache written
        model.close()
        model, *second_open = _timed_open(args, path, first_token_ms)
        opens.append(tuple(second_open))
    from .. import backend
    runtime = backend.runtime_name()
    threads = args.threads or os.environ.get("CANN_LLM_THREADS") or os.cpu_count()
    try:
        ours = bench_ours(model, args.n_prompt, args.n_gen, args.repetitions)
        # the driver of tensor-parallel ranks makes no backend calls of its own
        host = host_time_per_token(model, min(args.n_gen, 32)) \
            if args.n_gen and args.tensor_parallel == 1 else None
        rss = peak_rss_mib()        # the llama.cpp side's workload: load, pp and tg
        batched = None
        if args.batched > 1 and args.n_gen:
            n = min(args.n_gen, 64)
            batched = (bench_batched(model, 1, n, args.repetitions),
                       bench_batched(model, args.batched, n, args.repetitions))
    finally:
        if hasattr(model, "close"):
            model.close()
    backend_name = f"CANN ({runtime})" if args.device.upper().startswith("CANN") else "CPU ref"
    if args.tensor_parallel > 1:
        backend_name += f" TP{args.tensor_parallel}"
    rows = []
    for test, n in (("pp", args.n_prompt), ("tg", args.n_gen)):
        if n:
            rows.append(dict(model=label, size=size, params=params, backend=backend_name,
                             threads=threads, test=f"{test}{n}", tps=ours[test]))
    theirs = None
    py = None if args.llamacpp == "off" else llamacpp_python(
        None if args.llamacpp == "auto" else args.llamacpp)
    if py:
        print(f"cann-llm: measuring llama.cpp through {py}", file=sys.stderr, flush=True)
        theirs = bench_llamacpp(path, args.n_prompt, args.n_gen, args.repetitions,
                                threads=args.threads, n_ctx=args.ctx_size,
                                n_batch=args.batch_size, python=py)
        for test, n in (("pp", args.n_prompt), ("tg", args.n_gen)):
            if n:
                rows.append(dict(model=label, size=size, params=params,
                                 backend=f"llama.cpp {theirs.get('version', '')} CPU".strip(),
                                 threads=theirs.get("n_threads") or threads,
                                 test=f"{test}{n}", tps=theirs[test]))
    elif args.llamacpp not in ("auto", "off"):
        raise RunError(f"--llamacpp {args.llamacpp}: not a Python that can import llama_cpp")
    print(format_rows(rows))
    print(f"\ndevice {args.device.upper()}, runtime {runtime}")
    for line in _open_lines(opens, theirs, cached):
        print(line)
    line = f"peak RSS (load, pp, tg): cann-llm {rss:.0f} MiB"
    if theirs and "peak_rss_mib" in theirs:
        line += f", llama.cpp {theirs['peak_rss_mib']:.0f} MiB, ratio {rss / theirs['peak_rss_mib']:.2f}x"
    print(line)
    for test, n in (("pp", args.n_prompt), ("tg", args.n_gen)):
        if not n:
            continue
        m, _ = mean_std(ours[test])
        line = f"{test}{n}: cann-llm {m:.2f} t/s ({1e3 / m if m else 0:.2f} ms/token)"
        if theirs:
            t, _ = mean_std(theirs[test])
            line += (f", llama.cpp {t:.2f} t/s ({1e3 / t if t else 0:.2f} ms/token), "
                     f"ratio {m / t if t else 0:.2f}x")
        print(line)
    if host:
        print(f"decode token on cann-llm: {host['total_ms']:.2f} ms = waiting for the device "
              f"{host['wait_ms']:.2f} ms + host {host['host_ms']:.2f} ms (launch "
              f"{host['launch_ms']:.2f}, uploads {host['upload_ms']:.2f}, Python "
              f"{host['python_ms']:.2f}, of which sampling {host['sampler_ms']:.3f}; the "
              f"thread's CPU time {host['host_cpu_ms']:.2f})"
              + (f"; llama.cpp outside llama_decode {theirs['host_ms']:.2f} ms"
                 if theirs and theirs.get("host_ms") is not None else ""))
    if batched:
        one, many = (mean_std(b)[0] for b in batched)
        line = (f"batched decode (engine, {min(args.n_gen, 64)} tokens each): {args.batched} "
                f"sequences {many:.2f} t/s, 1 sequence {one:.2f} t/s, ratio {many / one if one else 0:.2f}x")
        if args.n_prompt:
            pp = mean_std(ours["pp"])[0]
            line += f" ({100 * many / pp if pp else 0:.0f}% of pp{args.n_prompt})"
        print(line)
    from .. import profiler
    prof = profiler.active()
    if prof is not None:
        print(f"\nprofiled (graphs ran uncaptured; trace: {prof.path}), top ops by device time:")
        print("| op | nodes | device ms | share |\n|---|---|---|---|")
        for op, count, ms, share in prof.top_ops(10):
            print(f"| {op} | {count} | {ms:.1f} | {100 * share:.1f}% |")
    return 0
