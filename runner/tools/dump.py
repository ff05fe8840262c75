"""Tensor dumps of `cann-llm diff --dump DIR`: one directory per run, in one stable format.

    DIR/manifest.json   {"format": "cann-llm-tensor-dump", "format_version": 1, "cann_llm_version",
                         "model", "model_sha256", "device", "mode", "prompt", "tokens",
                         "flash_attn", "tensors": [{"key", "index", "name", "op", "type", "ne",
                         "shape", "srcs", "src_ne", "src_types", "sum"}, ...]}
    DIR/tensors.npz     key "t00000", ... -> the tensor's values in numpy order (shape), float32
                        for float and quantized types (decoded), the integer type for integers.

`ne` is ggml order (ne[0] fastest, 4 entries), `shape` numpy order (reversed ne, trailing unit
dims dropped), `index` the node's position in the graph, `type` the tensor's stored type.
A Record is one such tensor in memory: what diff collects from the eval callback (record(info))
and what a dump reads back.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

FORMAT = "cann-llm-tensor-dump"
FORMAT_VERSION = 1


class DumpError(ValueError):
    """A directory that is not a readable dump (the message names it)."""


@dataclass
class Record:
    """One computed node of one run: what the eval callback saw (data numpy order)."""
    index: int
    name: str
    op: str
    type: str
    ne: tuple
    data: np.ndarray
    srcs: list = field(default_factory=list)        # source names (None: absent)
    src_ne: list = field(default_factory=list)
    src_types: list = field(default_factory=list)


def record(info) -> Record:
    """A Record of the node an eval callback's `info` (sched.EvalNode) describes, its values
    copied."""
    return Record(info.index, info.name, info.op, info.type, tuple(info.ne),
                  np.array(info.data), list(info.src_names), list(info.src_ne),
                  list(info.src_types))


def write_dump(path, records: list, meta: dict) -> None:
    """Write `records` (Record) and the run's `meta` (model, device, tokens, ...)."""
    from .. import __version__
    os.makedirs(path, exist_ok=True)
    arrays, entries = {}, []
    for i, r in enumerate(records):
        key = f"t{i:05d}"
        data = np.asarray(r.data)
        if data.dtype.kind == "f":
            data = data.astype(np.float32)
        arrays[key] = data
        entries.append({"key": key, "index": r.index, "name": r.name, "op": r.op,
                        "type": r.type, "ne": list(r.ne), "shape": list(data.shape),
                        "srcs": list(r.srcs), "src_ne": [None if n is None else list(n)
                                                         for n in r.src_ne],
                        "src_types": list(r.src_types),
                        "sum": float(np.sum(data, dtype=np.float64)) if data.size else 0.0})
    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, "cann_llm_version": __version__,
                **meta, "tensors": entries}
    np.savez(os.path.join(path, "tensors.npz"), **arrays)
    with open(os.path.join(path, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


def read_dump(path) -> tuple[dict, list]:
    """(manifest without "tensors", records) of a dump directory."""
    man_path = os.path.join(path, "manifest.json")
    npz_path = os.path.join(path, "tensors.npz")
    if not os.path.isdir(path):
        raise DumpError(f"{path}: no such dump directory")
    try:
        with open(man_path) as f:
            manifest = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise DumpError(f"{path}: not a tensor dump (manifest.json: {exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DumpError(f"{path}: manifest.json is not a {FORMAT} manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise DumpError(f"{path}: dump format version {manifest.get('format_version')}, "
                        f"this cann-llm reads {FORMAT_VERSION}")
    try:
        arrays = np.load(npz_path)
        records = []
        for e in manifest["tensors"]:
            records.append(Record(e["index"], e["name"], e["op"], e["type"], tuple(e["ne"]),
                                  arrays[e["key"]], e["srcs"],
                                  [None if n is None else tuple(n) for n in e["src_ne"]],
                                  e["src_types"]))
    except (OSError, KeyError, ValueError) as exc:
        raise DumpError(f"{path}: broken dump ({type(exc).__name__}: {exc})") from None
    meta = {k: v for k, v in manifest.items() if k != "tensors"}
    return meta, records
