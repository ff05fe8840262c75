"""The profiler: a Chrome trace (Perfetto / chrome://tracing JSON) of host stages and device ops.

Turned on by CANN_LLM_PROFILE=FILE, or `--profile FILE` on run, bench and serve, before the model
loads. It records:
- host spans on the thread that ran them: graph planning, input upload, each split's compute,
  output download, sampling, engine steps, and in `cann-llm serve` each HTTP request;
- one event per device node on a track per backend stream ("CANN0 stream"): the node's name, op,
  result type and shape, from the backend's timing events (clm_cann_profile). Profiled graphs run
  eagerly, not captured, so a profiled run is slower than a plain one; the ops' shares are what to
  read from it.
The file is written when the process exits (or at stop()). `top_ops` sums device time per op.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import json
import os
import threading
import time

ENV = "CANN_LLM_PROFILE"
MAX_EVENTS = 2_000_000      # a long server run stops recording here (the file says how many)


class Profiler:
    def __init__(self, path: str):
        self.path = path
        self.events: list[dict] = []
        self.dropped = 0
        self.pid = os.getpid()
        self._t0 = time.perf_counter()
        self._lock = threading.Lock()
        self._threads: dict[int, str] = {}     # tid -> name, for thread and device tracks
        self._tracks: dict[str, int] = {}      # device track name -> its small tid
        self._op_ms: collections.Counter = collections.Counter()
        self._op_count: collections.Counter = collections.Counter()

    def now_us(self) -> float:
        return (time.perf_counter() - self._t0) * 1e6

    def _add(self, event: dict) -> None:
        with self._lock:
            if len(self.events) >= MAX_EVENTS:
                self.dropped += 1
                return
            self.events.append(event)

    def _track_tid(self, name: str) -> int:
        """A small integer id for a device track (thread ids are large), named in the file."""
        with self._lock:
            tid = self._tracks.get(name)
            if tid is None:
                tid = self._tracks[name] = len(self._tracks) + 1
                self._threads[tid] = name
            return tid

    def _tid(self) -> int:
        tid = threading.get_ident()
        if tid not in self._threads:
            with self._lock:
                self._threads[tid] = threading.current_thread().name
        return tid

    @contextlib.contextmanager
    def span(self, name: str, cat: str = "host", **args):
        """A complete event around the body, on the calling thread's track."""
        start = self.now_us()
        try:
            yield
        finally:
            self._add({"name": name, "cat": cat, "ph": "X", "ts": start,
                       "dur": self.now_us() - start, "pid": self.pid, "tid": self._tid(),
                       **({"args": args} if args else {})})

    def add_span(self, name: str, start_us: float, dur_us: float, cat: str = "host", **args):
        """A span measured elsewhere (start on this profiler's clock), on the calling thread."""
        self._add({"name": name, "cat": cat, "ph": "X", "ts": start_us, "dur": dur_us,
                   "pid": self.pid, "tid": self._tid(), **({"args": args} if args else {})})

    def add_nodes(self, track: str, nodes: list[dict], graph_starts_us: list[float]) -> None:
        """Device nodes from Backend.take_node_times(): node i of graph g starts at
        graph_starts_us[g] + start_ms on `track`."""
        tid = self._track_tid(f"{track} stream")
        end = float("-inf")
        for n in nodes:
            g = n["graph"]
            base = graph_starts_us[g] if g < len(graph_starts_us) else graph_starts_us[-1]
            op = n["op"].name
            self._op_ms[op] += n["ms"]
            self._op_count[op] += 1
            # the times are F32 ms: keep each node from overlapping the previous one by rounding
            ts = max(base + n["start_ms"] * 1e3, end)
            end = ts + n["ms"] * 1e3
            self._add({"name": n["name"] or op, "cat": "op", "ph": "X",
                       "ts": ts, "dur": n["ms"] * 1e3,
                       "pid": self.pid, "tid": tid,
                       "args": {"op": op, "type": n["type"].name, "ne": list(n["ne"]),
                                "backend": track}})

    def top_ops(self, n: int = 10) -> list[tuple[str, int, float, float]]:
        """(op, nodes, total device ms, share of all device ms), largest first."""
        total = sum(self._op_ms.values()) or 1.0
        return [(op, self._op_count[op], ms, ms / total)
                for op, ms in self._op_ms.most_common(n)]

    def write(self) -> None:
        meta = [{"name": "process_name", "ph": "M", "pid": self.pid, "tid": 0,
                 "args": {"name": "cann-llm"}}]
        with self._lock:
            events = list(self.events)
            threads = dict(self._threads)
        meta += [{"name": "thread_name", "ph": "M", "pid": self.pid, "tid": tid,
                  "args": {"name": name}} for tid, name in threads.items()]
        doc = {"traceEvents": meta + events, "displayTimeUnit": "ms",
               "otherData": {"dropped_events": self.dropped}}
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, self.path)


_active: Profiler | None = None


def start(path: str) -> Profiler:
    """Start recording (once per process; a second call returns the running profiler)."""
    global _active
    if _active is None:
        _active = Profiler(path)
        atexit.register(stop)
    return _active


def from_env() -> Profiler | None:
    path = os.environ.get(ENV)
    return start(path) if path else _active


def active() -> Profiler | None:
    return _active


def stop() -> None:
    """Write the trace and stop recording."""
    global _active
    prof, _active = _active, None
    if prof is not None:
        prof.write()


def span(name: str, cat: str = "host", **args):
    """prof.span(...) when profiling, else a no-op context."""
    prof = _active
    return prof.span(name, cat, **args) if prof is not None else contextlib.nullcontext()
