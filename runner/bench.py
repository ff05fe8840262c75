"""The measurement behind `cann-llm bench` (its command is cli/bench.py): llama-bench-style
prompt (ppN) and generation (tgN) speed, and the same measurement through llama.cpp
(llama-cpp-python) on the same file for comparison.

Both sides are timed the same way, by wall clock around the public API: pp = prompt tokens /
time to the first generated token (one forward pass over the prompt, in n_batch chunks); tg =
generated tokens after the first / the time they took (one single-token forward pass each,
greedy, end-of-generation tokens banned so every run generates N tokens). Random token ids
(fixed seed) so no prompt cache helps. This file also runs standalone under another Python
(`python bench.py --llamacpp-worker JSON`) where only llama_cpp is installed: top-level imports
stay in the standard library.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

__all__ = ["bench_ours", "bench_batched", "host_time_per_token", "first_token_ms", "peak_rss_mib", "bench_llamacpp",
           "llamacpp_python", "format_rows", "mean_std", "page_cache_fraction"]


def peak_rss_mib() -> float:
    """This process's peak resident set in MiB: VmHWM of /proc/self/status (getrusage's ru_maxrss
    would carry the parent's peak over fork + exec into the llama.cpp worker)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def page_cache_fraction(path) -> float | None:
    """The fraction of `path`'s pages in the page cache now (mincore over a map that is never
    read), or None where it cannot be told. An open reads the missing pages from disk, so open to
    first token means little without it: a host may evict idle page cache within a minute
    (docs/performance.md, "Cold opens")."""
    import ctypes
    import mmap
    try:
        size = os.path.getsize(path)
        if size == 0:
            return None
        with open(path, "rb") as f:
            mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)  # private: addressable
    except (OSError, ValueError):
        return None
    try:
        n_pages = -(-size // mmap.PAGESIZE)
        vec = (ctypes.c_ubyte * n_pages)()
        anchor = ctypes.c_char.from_buffer(mapping)
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
            ok = libc.mincore(ctypes.addressof(anchor), size, vec) == 0
        finally:
            del anchor
        return sum(b & 1 for b in vec) / n_pages if ok else None
    except (OSError, AttributeError):
        return None
    finally:
        mapping.close()


def mean_std(values):
    if not values:
        return 0.0, 0.0
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def _random_ids(rng, n_vocab, n, avoid):
    ids = []
    while len(ids) < n:
        t = rng.randrange(n_vocab)
        if t not in avoid:
            ids.append(t)
    return ids


# -- ours ---------------------------------------------------------------------------------------

def bench_ours(model, n_prompt=512, n_gen=128, reps=5, seed=0, warmup=True, log=None):
    """{"pp": [tokens/s per rep], "tg": [...]} on a loaded cann_llm Model."""
    import random
    rng = random.Random(seed)
    tok = model.tokenizer
    eog = set(getattr(tok, "eog_ids", ()) or ())
    n_vocab = model.hparams.n_vocab
    ban = {t: float("-inf") for t in eog}
    greedy = dict(temperature=0.0, logit_bias=ban)
    results = {"pp": [], "tg": []}

    def run_pp(ids):
        t0 = time.perf_counter()
        for _ in model.generate(ids, max_tokens=1, **greedy):
            break
        return time.perf_counter() - t0

    def run_tg(n):
        ids = _random_ids(rng, n_vocab, 1, eog)
        t_first = None
        count = 0
        t0 = time.perf_counter()
        for _ in model.generate(ids, max_tokens=n + 1, **greedy):
            count += 1
            if t_first is None:
                t_first = time.perf_counter()
        t_end = time.perf_counter()
        return (count - 1), t_end - (t_first if t_first is not None else t0)

    if warmup:
        if n_prompt:
            run_pp(_random_ids(rng, n_vocab, min(n_prompt, 32), eog))
        if n_gen:
            run_tg(4)
    for _ in range(reps):
        if n_prompt:
            dt = run_pp(_random_ids(rng, n_vocab, n_prompt, eog))
            results["pp"].append(n_prompt / dt)
        if n_gen:
            n, dt = run_tg(n_gen)
            results["tg"].append(n / dt if dt > 0 else 0.0)
        if log:
            log(f"rep done: pp {results['pp'][-1:]} tg {results['tg'][-1:]}")
    return results


def bench_batched(model, n_seq=8, n_gen=64, reps=3, seed=3):
    """Aggregate decode tokens/s through the engine: n_seq sequences (one random prompt token
    each, greedy, end-of-generation banned) step together for n_gen tokens; the clock runs from
    the step after the prompts are in the cache to the last token. Returns the tokens/s per
    repetition."""
    import random

    from .engine import Engine
    from .sampling_params import SamplingParams
    rng = random.Random(seed)
    eog = set(getattr(model.tokenizer, "eog_ids", ()) or ())
    params = SamplingParams(temperature=0.0, logit_bias={t: float("-inf") for t in eog})
    out = []
    for rep in range(reps + 1):               # the first run warms up (graphs, captures)
        engine = Engine(model)
        seqs = [engine.add(_random_ids(rng, model.hparams.n_vocab, 1, eog), params,
                           max_tokens=n_gen + 1) for _ in range(n_seq)]
        while any(s.next_token is None and not s.finished for s in seqs):
            engine.step()                     # prefill: every sequence gets its first token
        count, t0 = 0, time.perf_counter()
        while not all(s.finished for s in seqs):
            count += sum(tok is not None for _, tok in engine.step())
        dt = time.perf_counter() - t0
        for s in seqs:
            engine.release(s)
        if rep:
            out.append(count / dt if dt > 0 else 0.0)
    return out


def first_token_ms(model, seed=2) -> float:
    """Milliseconds to the first generated token of a one-token prompt (greedy): with the load
    time before it, a model's "open to first token"."""
    import random
    rng = random.Random(seed)
    eog = set(getattr(model.tokenizer, "eog_ids", ()) or ())
    t0 = time.perf_counter()
    for _ in model.generate(_random_ids(rng, model.hparams.n_vocab, 1, eog), max_tokens=1,
                            temperature=0.0):
        break
    return 1e3 * (time.perf_counter() - t0)


def host_time_per_token(model, n_gen=32, seed=1):
    """Where a decode token's time goes, over a greedy run of n_gen tokens (wrapped methods on a
    separate run, so the tokens/s figures are not affected); each figure is the median over the
    tokens (robust to the odd token on which another process took the CPU), in ms:
      wait_ms    blocked until the device is done (synchronize, and the logits download, which
                 waits for the graph): the kernels, or on an NPU the device;
      launch_ms  inside graph_compute (queueing the graph or its replay: dispatch);
      upload_ms  inside the input uploads (set_tensor_async, cpy_tensor_async);
      python_ms  the rest: Python (inputs, scheduling, sampling; sampler_ms of it sampling);
      host_ms    everything but wait_ms: the host's cost of a token (on an NPU, the whole cost
                 of a replayed token when the device is faster);
      host_cpu_ms  the calling thread's CPU time outside the waits: host_ms without the time
                 the thread was off the CPU. On acl_host the device's threads share the cores,
                 and the stream thread woken by a launch can take the caller's core while the
                 graph already runs: the launch's wall time then grows, the token's does not;
      total_ms, and backend_ms = wait + launch + upload (the time inside backend calls)."""
    import random

    from . import backend as be
    from . import sampler as sampler_mod
    keys = ("wait", "launch", "upload", "sampler")
    acc = dict.fromkeys(keys, 0.0)
    wait_cpu = [0.0]                 # the thread's CPU time inside the waits
    saved = []

    def wrap(cls, name, key):
        fn = getattr(cls, name, None)
        if fn is None:
            return

        def timed(*a, **k):
            t0 = time.perf_counter()
            c0 = time.thread_time() if key == "wait" else 0.0
            try:
                return fn(*a, **k)
            finally:
                acc[key] += time.perf_counter() - t0
                if key == "wait":
                    wait_cpu[0] += time.thread_time() - c0
        saved.append((cls, name, fn))
        setattr(cls, name, timed)

    for name, key in (("graph_compute", "launch"), ("synchronize", "wait"),
                      ("set_tensor_async", "upload"), ("set_tensors_async", "upload"),
                      ("get_tensor_async", "wait"),
                      ("cpy_tensor_async", "upload")):
        wrap(be.Backend, name, key)
    wrap(sampler_mod.Sampler, "sample", "sampler")
    rng = random.Random(seed)
    eog = set(getattr(model.tokenizer, "eog_ids", ()) or ())
    greedy = dict(temperature=0.0, logit_bias={t: float("-inf") for t in eog})
    rows, cpu_rows = [], []       # per token: total, then the keys' times (s); host CPU (s)
    try:
        t_last = c_last = None
        for _ in model.generate(_random_ids(rng, model.hparams.n_vocab, 1, eog),
                                max_tokens=n_gen + 1, **greedy):
            t, c = time.perf_counter(), time.thread_time()
            if t_last is not None:
                rows.append((t - t_last, *(acc[k] for k in keys)))
                cpu_rows.append(c - c_last - wait_cpu[0])
            t_last, c_last = t, c
            for key in keys:
                acc[key] = 0.0
            wait_cpu[0] = 0.0
    finally:
        for cls, name, fn in saved:
            setattr(cls, name, fn)
    if not rows:
        rows, cpu_rows = [(0.0,) * (len(keys) + 1)], [0.0]

    def median(f):
        return 1e3 * statistics.median(f(*r) for r in rows)
    return {"total_ms": median(lambda t, w, l, u, s: t), "wait_ms": median(lambda t, w, l, u, s: w),
            "launch_ms": median(lambda t, w, l, u, s: l), "upload_ms": median(lambda t, w, l, u, s: u),
            "python_ms": median(lambda t, w, l, u, s: t - w - l - u),
            "host_ms": median(lambda t, w, l, u, s: t - w), "sampler_ms": median(lambda t, w, l, u, s: s),
            "backend_ms": median(lambda t, w, l, u, s: w + l + u),
            "host_cpu_ms": 1e3 * statistics.median(cpu_rows)}


# -- llama.cpp ----------------------------------------------------------------------------------

def _llamacpp_worker(cfg: dict) -> dict:
    """Runs under a Python with llama_cpp: the same measurement through llama-cpp-python."""
    import random

    import llama_cpp
    kwargs = dict(model_path=cfg["path"], n_ctx=cfg["n_ctx"], n_batch=cfg["n_batch"],
                  n_ubatch=cfg["n_batch"], n_gpu_layers=0, verbose=False, logits_all=False)
    if cfg.get("threads"):
        kwargs["n_threads"] = kwargs["n_threads_batch"] = cfg["threads"]
    params = llama_cpp.llama_model_default_params
    extra = "use_extra_bufts" in dict(getattr(params().__class__, "_fields_", []))
    if extra:
        # the AMX/extra buffer types crash on quantized models on this kind of CPU: keep them off
        orig = llama_cpp.llama_model_default_params

        def no_extra():
            p = orig()
            p.use_extra_bufts = False
            return p
        llama_cpp.llama_model_default_params = no_extra
        llama_cpp.llama_cpp.llama_model_default_params = no_extra
        import llama_cpp.llama as _ll
        if hasattr(_ll, "llama_cpp"):
            _ll.llama_cpp.llama_model_default_params = no_extra

    def timed_open():
        t = time.perf_counter()
        return llama_cpp.Llama(**kwargs), 1e3 * (time.perf_counter() - t)

    cached = page_cache_fraction(cfg["path"])
    llm, load_ms = timed_open()
    n_vocab = llm.n_vocab()
    eog = {t for t in range(n_vocab) if llama_cpp.llama_vocab_is_eog(llm._model.vocab, t)} \
        if hasattr(llama_cpp, "llama_vocab_is_eog") else {llm.token_eos()}
    rng = random.Random(cfg["seed"])
    n_prompt, n_gen = cfg["n_prompt"], cfg["n_gen"]

    def argmax_not_eog():
        scores = llm.scores[llm.n_tokens - 1]
        order = scores.argsort()[::-1]
        for t in order[:16]:
            if int(t) not in eog:
                return int(t)
        return int(order[0])

    def first_token_ms():
        t0 = time.perf_counter()
        llm.eval(_random_ids(random.Random(2), n_vocab, 1, eog))
        argmax_not_eog()
        return 1e3 * (time.perf_counter() - t0)

    opens = [(load_ms, first_token_ms())]
    if hasattr(llm, "close"):
        llm.close()
    del llm
    import gc
    gc.collect()        # the first model's memory, before the second open (and its peak RSS)
    llm, load_ms = timed_open()         # the second open, as cann-llm's
    opens.append((load_ms, first_token_ms()))

    def run_pp(ids):
        llm.reset()
        llm._ctx.kv_cache_clear() if hasattr(llm._ctx, "kv_cache_clear") else None
        t0 = time.perf_counter()
        llm.eval(ids)
        argmax_not_eog()
        return time.perf_counter() - t0

    def run_tg(n):
        llm.reset()
        llm._ctx.kv_cache_clear() if hasattr(llm._ctx, "kv_cache_clear") else None
        llm.eval(_random_ids(rng, n_vocab, 1, eog))
        tok = argmax_not_eog()
        t0 = time.perf_counter()
        for _ in range(n):
            llm.eval([tok])
            tok = argmax_not_eog()
        return n, time.perf_counter() - t0

    if n_prompt:
        run_pp(_random_ids(rng, n_vocab, min(n_prompt, 32), eog))
    if n_gen:
        run_tg(4)
    out = {"pp": [], "tg": [], "version": getattr(llama_cpp, "__version__", "?"),
           "opens": opens, "page_cache": cached,
           "use_extra_bufts": (False if extra else None), "n_threads": llm.n_threads if hasattr(
               llm, "n_threads") else cfg.get("threads")}
    for _ in range(cfg["reps"]):
        if n_prompt:
            out["pp"].append(n_prompt / run_pp(_random_ids(rng, n_vocab, n_prompt, eog)))
        if n_gen:
            n, dt = run_tg(n_gen)
            out["tg"].append(n / dt)
    if n_gen:
        out["host_ms"] = _llamacpp_host_ms(llm, llama_cpp, rng, n_vocab, eog, min(n_gen, 32))
    out["peak_rss_mib"] = peak_rss_mib()
    return out


def _llamacpp_host_ms(llm, llama_cpp, rng, n_vocab, eog, n):
    """llama.cpp's host time per decode token, split as ours is: wall time per token minus the
    time inside llama_decode (graph build, scheduling and compute), over n greedy tokens. What
    is left is llama-cpp-python's Python (eval bookkeeping, logits copy, argmax)."""
    decode = llama_cpp.llama_decode
    inside = [0.0]

    def timed(*a, **k):
        t0 = time.perf_counter()
        try:
            return decode(*a, **k)
        finally:
            inside[0] += time.perf_counter() - t0
    import llama_cpp._internals as internals
    saved = getattr(internals.llama_cpp, "llama_decode", None)
    internals.llama_cpp.llama_decode = timed
    try:
        llm.reset()
        llm.eval(_random_ids(rng, n_vocab, 1, eog))
        tok = int(llm.scores[llm.n_tokens - 1].argmax())
        inside[0] = 0.0
        t0 = time.perf_counter()
        for _ in range(n):
            llm.eval([tok])
            scores = llm.scores[llm.n_tokens - 1]
            tok = int(scores.argmax())
            if tok in eog:
                tok = int(scores.argsort()[-2])
        total = time.perf_counter() - t0
    finally:
        if saved is not None:
            internals.llama_cpp.llama_decode = saved
    return 1e3 * (total - inside[0]) / n


def bench_llamacpp(path, n_prompt=512, n_gen=128, reps=5, threads=None, n_ctx=None,
                   n_batch=512, seed=0, python=None, timeout=3600):
    """The llama.cpp side, in a subprocess (under `python`, default this interpreter)."""
    cfg = dict(path=str(path), n_prompt=n_prompt, n_gen=n_gen, reps=reps, threads=threads,
               n_ctx=n_ctx or max(n_prompt + n_gen + 16, 1024), n_batch=n_batch, seed=seed)
    cmd = [python or sys.executable, os.path.abspath(__file__), "--llamacpp-worker",
           json.dumps(cfg)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"llama.cpp benchmark failed (exit {proc.returncode}): {tail}")
    return json.loads(lines[-1])


def llamacpp_python(explicit=None):
    """A Python that can import llama_cpp: `explicit`, this one, or None."""
    if explicit:
        return explicit
    try:
        import importlib.util
        if importlib.util.find_spec("llama_cpp") is not None:
            return sys.executable
    except (ImportError, ValueError):
        pass
    return None


# -- report ---------------------------------------------------------------------------------------

def format_rows(rows) -> str:
    """A llama-bench markdown table from dicts with model/size/params/backend/threads/test/tps."""
    header = ["model", "size", "params", "backend", "threads", "test", "t/s"]
    body = []
    for r in rows:
        mean, std = mean_std(r["tps"])
        body.append([r["model"], r["size"], r["params"], r["backend"], str(r["threads"]),
                     r["test"], f"{mean:.2f} ± {std:.2f}"])
    widths = [max(len(x[i]) for x in [header, *body]) for i in range(len(header))]
    right = {4, 6}

    def line(cells):
        return "| " + " | ".join(c.rjust(w) if i in right else c.ljust(w)
                                 for i, (c, w) in enumerate(zip(cells, widths))) + " |"
    sep = "| " + " | ".join(("-" * (w - 1) + ":") if i in right else "-" * w
                            for i, w in enumerate(widths)) + " |"
    return "\n".join([line(header), sep, *map(line, body)])


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--llamacpp-worker":
        print(json.dumps(_llamacpp_worker(json.loads(sys.argv[2]))))
        sys.exit(0)
    print("usage: bench.py --llamacpp-worker JSON (use `cann-llm bench`)", file=sys.stderr)
    sys.exit(2)
