"""The tensor diff tool behind `cann-llm diff`: which node of the forward pass goes wrong on a
backend, in the manner of llama-eval-callback plus a backend-vs-backend diff.

Everything rides on the eval callback (sched.Plan.run / Model.logits(ids, eval_callback=...)):
- isolated: A runs the prompt node by node; every node is recomputed on B from A's own input
  values (B = CPU: reference.compute_node; B = a device: a one-node graph there), so a row
  measures that op alone, against the op checker's per-op NMSE thresholds (tools.opcheck);
- chained: A and B run the prompt independently; tensors pair by (name, occurrence) and one
  threshold (NMSE 1e-3) shows how error grows through the layers;
- print: every tensor of one backend, llama-eval-callback style;
- dumps (tools.dump) and compare: the same table from two dump directories.
Shapes are ggml order (ne[0] first) in the table; arrays are numpy order.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from .. import backend as be
from .. import reference as ref
from . import opcheck
from .dump import Record, record

CHAINED_NMSE = 1e-3


@dataclass
class Row:
    index: int
    name: str
    op: str
    type: str
    ne: tuple
    nmse: float
    max_abs: float
    sum_a: float
    sum_b: float
    threshold: float
    error: str = ""          # '' when within threshold, else why not

    @property
    def over(self) -> bool:
        return bool(self.error)


def _sum(x) -> float:
    x = np.asarray(x, dtype=np.float64)
    return float(np.sum(x)) if x.size else 0.0


def measure(name, op, ttype, ne, index, a, b, threshold) -> Row:
    """Row for A's values `a` against B's `b` (B is the reference side of the NMSE)."""
    a = np.asarray(a, dtype=np.float64).reshape(-1)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    if a.shape != b.shape:
        return Row(index, name, op, ttype, ne, math.inf, math.inf, _sum(a), _sum(b), threshold,
                   f"shape mismatch: {a.size} vs {b.size} values")
    reason, nmse = opcheck.compare(b, a, threshold)
    with np.errstate(invalid="ignore"):
        d = np.abs(a - b)
    max_abs = float(np.nanmax(d)) if d.size and not np.all(np.isnan(d)) else 0.0
    return Row(index, name, op, ttype, ne, nmse, max_abs, _sum(a), _sum(b), threshold, reason)


def _node_meta(rec: Record):
    """What opcheck.nmse_threshold reads of a node, from a record."""
    op_name = rec.op if rec.op in be.Op.__members__ else (
        "UNARY" if rec.op in be.UnaryOp.__members__ else
        "GLU" if rec.op in be.GluOp.__members__ else "NONE")
    return SimpleNamespace(op=be.Op[op_name], op_desc=rec.op, type=be.TensorType[rec.type],
                           src=[SimpleNamespace(type=be.TensorType[t]) for t in rec.src_types
                                if t is not None])


def op_threshold(node, expected, override=None) -> float:
    """The op checker's NMSE bound for a node (a Tensor or a record's meta)."""
    return opcheck.nmse_threshold(SimpleNamespace(threshold=override), node, expected)


# ---- running a model with the callback ----------------------------------------------------------

def collect(model, ids, name_filter=None, stop=None) -> tuple[list, np.ndarray | None]:
    """Every computed node of `model` on `ids` (teacher forced, fresh sequence) as Records, and
    the logits. name_filter: a compiled regex searched in names; stop(info) -> True ends the run."""
    records = []

    def cb(name, op, ttype, ne, data, info):
        if name_filter is None or name_filter.search(name):
            records.append(record(info))
        return not (stop is not None and stop(info))

    logits = model.logits(ids, eval_callback=cb)
    return records, logits


class DeviceRecompute:
    """B = a device in isolated mode: each node rebuilt as a one-node graph over contiguous
    copies of A's inputs (same types and shapes, same op_params)."""

    def __init__(self, device: be.Device):
        self.device = device
        self.backend = device.init_backend()

    def __call__(self, info) -> np.ndarray:
        node = info.node
        stored = info.sources(stored=True)
        with be.Context(16) as ctx:
            leaves = []
            for s, arr in zip(info._srcs, stored):
                leaves.append(None if s is None else ctx.new_tensor(s.type, s.ne))
            if node.op == be.Op.SET_ROWS:
                out = ctx.set_rows(leaves[2], leaves[0], leaves[1])
            elif node.op == be.Op.CPY:
                out = ctx.cpy(leaves[0], leaves[1])
            else:
                params = node.op_params_bytes
                out = ctx.new_op(node.op, node.type, node.ne, [t for t in leaves if t], params)
            graph = ctx.new_graph(8).build_forward(out)
            buf = ctx.alloc_tensors(self.device.buffer_type)
            try:
                for t, arr in zip(leaves, stored):
                    if t is not None:
                        t.write_bytes(np.ascontiguousarray(arr).reshape(-1).view(np.uint8))
                self.backend.graph_compute(graph)
                self.backend.synchronize()
                root = out if not out.is_view else leaves[2 if node.op ==
                                                                       be.Op.SET_ROWS else 1]
                raw = root.read_bytes()
                return ref.read(raw, out)
            finally:
                buf.close()

    def close(self):
        self.backend.close()


def isolated(model_a, ids, b="CPU", threshold=None, name_filter=None, stop_at_first=False,
             keep=False):
    """Isolated mode: rows (one per computed node of A that passes the filter), and with keep
    the A and B records (for dumps). b: "CPU" or a backend.Device."""
    rows, recs_a, recs_b = [], [], []
    recompute = None if b == "CPU" else DeviceRecompute(b)

    def cb(name, op, ttype, ne, data, info):
        if name_filter is not None and not name_filter.search(name):
            return True
        try:
            if recompute is None:
                expected = ref.compute_node(info.node, info.sources())
            else:
                expected = recompute(info)
            expected = np.asarray(expected).reshape(data.shape)
        except (ref.ReferenceError, be.CannError, ValueError) as exc:
            rows.append(Row(info.index, name, op, ttype, tuple(ne), math.nan, math.nan,
                            _sum(data), math.nan, math.nan, f"B cannot compute it: {exc}"))
            return not stop_at_first
        thr = op_threshold(info.node, expected, threshold)
        row = measure(name, op, ttype, tuple(ne), info.index, data, expected, thr)
        rows.append(row)
        if keep:
            rec = record(info)
            recs_a.append(rec)
            recs_b.append(Record(**{**rec.__dict__, "data": expected}))
        return not (stop_at_first and row.over)

    try:
        logits = model_a.logits(ids, eval_callback=cb)
    finally:
        if recompute is not None:
            recompute.close()
    return rows, recs_a, recs_b, logits


def compare_records(recs_a: list, recs_b: list, threshold=None, per_op=False) -> list:
    """Rows pairing A's and B's records by (name, occurrence of that name) in A's order.
    threshold: one NMSE bound for all (default CHAINED_NMSE), or the op checker's per op."""
    seen: dict = {}
    keyed_b = {}
    for r in recs_b:
        k = seen[r.name] = seen.get(r.name, -1) + 1
        keyed_b[(r.name, k)] = r
    seen.clear()
    rows = []
    for ra in recs_a:
        k = seen[ra.name] = seen.get(ra.name, -1) + 1
        rb = keyed_b.get((ra.name, k))
        if rb is None:
            rows.append(Row(ra.index, ra.name, ra.op, ra.type, ra.ne, math.nan, math.nan,
                            _sum(ra.data), math.nan, math.nan, "missing in B"))
            continue
        if per_op and threshold is None:
            thr = op_threshold(_node_meta(ra), rb.data)
        else:
            thr = CHAINED_NMSE if threshold is None else threshold
        rows.append(measure(ra.name, ra.op, ra.type, ra.ne, ra.index, ra.data, rb.data, thr))
    return rows


def chained(model_a, model_b, ids, threshold=None, name_filter=None):
    recs_a, logits_a = collect(model_a, ids, name_filter)
    recs_b, logits_b = collect(model_b, ids, name_filter)
    return compare_records(recs_a, recs_b, threshold), recs_a, recs_b, logits_a, logits_b


# ---- text ----------------------------------------------------------------------------------------

def _g(x: float) -> str:
    if isinstance(x, float) and math.isnan(x):
        return "-"
    if x == 0:
        return "0"
    return f"{x:.3e}" if abs(x) < 1e-2 or abs(x) >= 1e5 else f"{x:.4f}"


def ne_text(ne) -> str:
    ne = list(ne)
    while len(ne) > 1 and ne[-1] == 1:
        ne.pop()
    return "x".join(str(n) for n in ne)


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
                     for row in [header, *rows])


def format_rows(rows: list) -> str:
    first = next((i for i, r in enumerate(rows) if r.over), None)
    body = []
    for i, r in enumerate(rows):
        mark = "<< first" if i == first else ("!" if r.over else "")
        body.append([str(r.index), r.name, r.op, r.type.lower(), ne_text(r.ne), _g(r.nmse),
                     _g(r.max_abs), f"{r.sum_a:.6g}", f"{r.sum_b:.6g}", _g(r.threshold), mark])
    return _table(["#", "name", "op", "type", "ne", "nmse", "max_abs", "sum_a", "sum_b",
                         "limit", ""], body)


def summary(rows: list, what: str) -> str:
    bad = [r for r in rows if r.over]
    line = f"{what}: {len(rows)} tensors, {len(bad)} over threshold"
    if bad:
        r = bad[0]
        line += f"; first: {r.name} ({r.op}) #{r.index}: {r.error}"
    return line


def logits_summary(la, lb) -> str:
    if la is None or lb is None or la.shape != lb.shape:
        return ""
    a, b = la.astype(np.float64), lb.astype(np.float64)
    nmse = float(np.sum((a - b) ** 2) / max(np.sum(b * b), 1e-300))
    agree = int(np.sum(np.argmax(la, axis=-1) == np.argmax(lb, axis=-1)))
    return f"logits: NMSE {nmse:.3e}, same top-1 token on {agree}/{la.shape[0]} positions"


def print_values(data: np.ndarray, n: int = 3, indent: str = "    ") -> list[str]:
    """Nested brackets over the 3 inner dims (ne0..ne2), the first and last n entries of each
    with '...' between, as llama-eval-callback prints a tensor."""
    x = np.asarray(data)
    x = x.reshape((1,) * (4 - x.ndim) + x.shape)
    out = []

    def pick(size):
        return list(range(size)) if size <= 2 * n else [*range(n), None, *range(size - n, size)]

    for i3 in pick(x.shape[0]):
        if i3 is None:
            out.append(indent + "...")
            continue
        out.append(indent + "[")
        for i2 in pick(x.shape[1]):
            if i2 is None:
                out.append(indent + "  ...")
                continue
            out.append(indent + " [")
            for i1 in pick(x.shape[2]):
                if i1 is None:
                    out.append(indent + "   ...")
                    continue
                vals = ", ".join("..." if i0 is None else f"{float(x[i3, i2, i1, i0]):12.4f}"
                                 for i0 in pick(x.shape[3]))
                out.append(indent + f"  [{vals}]")
            out.append(indent + " ]")
        out.append(indent + "]")
    return out


def print_record(rec: Record, backend: str = "") -> str:
    srcs = ", ".join(f"{s}{{{', '.join(str(v) for v in ne)}}}"
                     for s, ne in zip(rec.srcs, rec.src_ne) if s is not None)
    data = np.asarray(rec.data)
    head = (f"{rec.index:4d} {rec.name} = ({rec.type.lower()}) {rec.op}({srcs}) = "
            f"{{{', '.join(str(v) for v in rec.ne)}}}" + (f" [{backend}]" if backend else ""))
    lines = [head]
    if not ref.is_quantized(be.TensorType[rec.type]):
        lines += print_values(data)
        bad = int(np.sum(~np.isfinite(data.astype(np.float64)))) if data.size else 0
        lines.append(f"    sum = {_sum(data):.6f}" + (f"  ({bad} NaN/inf)" if bad else ""))
    return "\n".join(lines)


# ---- fault injection (self-test of the tool, tests) ----------------------------------------------

class InjectFault:
    """A model whose nodes matching `pattern` (regex searched in the name, or in the op with
    by_op) compute wrong: right after such a node runs, its result in the backend's memory is
    replaced by corrupt(values) (default: scaled by 1.1), so every later node reads the wrong
    values, as from a broken kernel. Everything else is the wrapped model's."""

    def __init__(self, model, pattern: str, corrupt=None, by_op: bool = False):
        self.model = model
        self.pattern = re.compile(pattern)
        self.corrupt = corrupt or (lambda x: np.asarray(x, dtype=np.float64) * 1.1)
        self.by_op = by_op

    def __getattr__(self, name):
        return getattr(self.model, name)

    def logits(self, ids, eval_callback=None):
        from ..sched import _wants_info
        full = eval_callback is not None and _wants_info(eval_callback)

        def cb(name, op, ttype, ne, data, info):
            if self.pattern.search(op if self.by_op else name):
                info.write(self.corrupt(data))
                data = info.data
            if eval_callback is None:
                return True
            return eval_callback(name, op, ttype, ne, data, *((info,) if full else ()))

        return self.model.logits(ids, eval_callback=cb)
