"""The op checker behind `cann-llm test-ops`, in the style of ggml's test-backend-ops.

Each case builds a small graph with the C core, runs it on a CANN device and on the numpy
reference (cann_llm.reference), and compares every computed node by NMSE against a per-op
threshold, with NaN/inf checks and guard bytes around every tensor. A case the device declines
(supports_op) is reported `not supported` and is no failure. Shapes are ggml order (ne0 first).
"""

import csv
import json
import re
import sys
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import reference as ref
from ..backend import (CannError, Context, Op, Registry, TensorType, layout_tensors,
                       place_tensors)

GUARD_BYTES = 256            # at least this many pattern bytes before and after every tensor

# ---- thresholds ---------------------------------------------------------------------------------
# NMSE = sum((device - reference)^2) / sum(reference^2). The reference computes in float64 and
# rounds once to the node's type; the device computes in float32 and, by DESIGN.md §2, casts
# some operands to F16 (matmul and attention activations) as the NPU's cube unit does.
DEFAULT_NMSE = 1e-7
OP_NMSE = {
    "SOFT_MAX": 1e-6,
    "MUL_MAT": 5e-4,          # F16 activations into the cube unit, F32 accumulation
    "MUL_MAT_ID": 5e-4,       # the same products, per selected expert
    "FLASH_ATTN_EXT": 5e-4,   # F16 Q/K/V and probabilities, F32 accumulation
}
EXACT_OPS = {"ARGMAX", "ARGSORT", "CLAMP"}        # and CPY/DUP/CONT between equal types
# One rounding to F16 leaves a relative error uniform in +-2^-11: NMSE 2^-22/3 ~ 8e-8 per
# rounding step; BF16 (2^-8): ~5e-6 per step. A device may round intermediate results to the
# half type (F16 inputs/outputs are computed through F16 aclTensors), so an op touching a half
# type gets room for a few such steps.
HALF_NMSE = {TensorType.F16: 1e-6, TensorType.BF16: 5e-5}
# Quantization steps per block, from a block's float values: the size of one level.
_QUANT_STEP = {
    TensorType.Q8_0: lambda b: np.max(np.abs(b), axis=-1) / 127.0,
    TensorType.Q4_0: lambda b: np.max(np.abs(b), axis=-1) / 8.0,
    TensorType.Q4_1: lambda b: (np.max(b, axis=-1) - np.min(b, axis=-1)) / 15.0,
}


def nmse_threshold(case: "Case", node, expected: np.ndarray) -> float:
    """The largest NMSE allowed for `node` of `case` (0 means bit-exact)."""
    if case.threshold is not None:
        return case.threshold
    desc = node.op_desc
    srcs = node.src
    if desc in EXACT_OPS:
        return 0.0
    if node.op in (Op.CPY, Op.DUP, Op.CONT) and srcs and srcs[0].type == node.type:
        return 0.0
    if node.op in (Op.CPY, Op.DUP) and node.type in (TensorType.Q8_0, TensorType.Q4_0):
        return 0.0   # quantizing copies: the reference is ggml's quantizer, matched bit for bit
    if node.type in _QUANT_STEP:
        # users.md §1.4: one quantization step off everywhere, over the signal energy
        blocks = np.asarray(expected, dtype=np.float64).reshape(-1, 32)
        steps = _QUANT_STEP[node.type](blocks)
        energy = float(np.sum(blocks * blocks))
        return float(np.sum(steps * steps) * 32 / energy) if energy > 0 else 0.0
    limit = OP_NMSE.get(desc, DEFAULT_NMSE)
    for t in [node, *srcs]:
        limit = max(limit, HALF_NMSE.get(t.type, 0.0))
    return limit


# ---- cases ------------------------------------------------------------------------------------------

def _fmt(value) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_fmt(v) for v in value) + "]"
    if isinstance(value, TensorType):
        return value.name.lower()
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


@dataclass
class Case:
    """One test: `build(b)` adds inputs through the Builder and returns the result tensor(s)."""
    op: str
    params: dict
    build: Callable
    threshold: float | None = None

    @property
    def vars(self) -> str:
        return ",".join(f"{k}={_fmt(v)}" for k, v in self.params.items())

    @property
    def name(self) -> str:
        return f"{self.op}({self.vars})"


@dataclass
class Input:
    tensor: object
    init: Callable   # rng -> values (numpy order) before encoding to the tensor's type


class Builder:
    """Creates a case's input tensors with the way each is initialised (users.md §1.5)."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.inputs: list[Input] = []

    def new(self, ttype, ne, init: Callable | None = None, lo: float = -1.0, hi: float = 1.0,
            name: str | None = None):
        ne = list(ne) + [1] * (4 - len(ne))
        tensor = self.ctx.new_tensor(ttype, ne, name=name or f"in{len(self.inputs)}")
        shape = tuple(reversed(ne))
        if init is None:
            def init(rng, shape=shape):
                return rng.uniform(lo, hi, size=shape).astype(np.float32)
        self.inputs.append(Input(tensor, init))
        return tensor

    def rows(self, ttype, ne, n_rows: int, unique: bool = False, name=None):
        """Row indices in [0, n_rows); unique along ne0 when the rows are written (SET_ROWS)."""
        ne = list(ne) + [1] * (4 - len(ne))

        def init(rng, shape=tuple(reversed(ne))):
            if not unique:
                return rng.integers(0, n_rows, size=shape)
            flat = [rng.permutation(n_rows)[: shape[-1]] for _ in range(int(np.prod(shape[:-1])))]
            return np.array(flat).reshape(shape)
        return self.new(ttype, ne, init, name=name)

    def positions(self, n_tokens: int, n_ctx: int = 512):
        return self.new(TensorType.I32, [n_tokens],
                        lambda rng, n=n_tokens: rng.integers(0, n_ctx, size=(1, 1, 1, n)))

    def mask(self, ttype, ne, additive: bool = True, p_inf: float = 0.25):
        """A KQ mask: -inf at random places (never a whole row); other entries uniform [-1, 1]
        (additive) or 0."""
        ne = list(ne) + [1] * (4 - len(ne))

        def init(rng, shape=tuple(reversed(ne))):
            values = (rng.uniform(-1, 1, size=shape) if additive else np.zeros(shape))
            blocked = rng.random(shape) < p_inf
            keep = rng.integers(0, shape[-1], size=shape[:-1])
            np.put_along_axis(blocked, keep[..., None], False, axis=-1)
            values[blocked] = -np.inf
            return values.astype(np.float32)
        return self.new(ttype, ne, init)


F32, F16, BF16 = TensorType.F32, TensorType.F16, TensorType.BF16
Q8_0, Q4_0, Q4_1 = TensorType.Q8_0, TensorType.Q4_0, TensorType.Q4_1
I32, I64 = TensorType.I32, TensorType.I64


def _permuted(b: Builder, ttype, ne, perm, lo=-1.0, hi=1.0):
    """A tensor whose logical shape is `ne`, stored permuted: a view with permuted strides."""
    stored = [0] * 4
    for i in range(4):
        stored[perm[i]] = ne[i]
    base = b.new(ttype, stored, lo=lo, hi=hi)
    inverse = [perm.index(i) for i in range(4)]
    return b.ctx.permute(base, *inverse)


def _binary_cases() -> list[Case]:
    cases = []
    shapes = [([10, 5, 4, 3], [1, 1, 1, 1]), ([10, 5, 4, 3], [2, 1, 1, 1]),
              ([10, 5, 4, 3], [1, 2, 1, 1]), ([10, 5, 4, 3], [1, 1, 2, 1]),
              ([10, 5, 4, 3], [1, 1, 1, 2]), ([10, 5, 4, 3], [2, 2, 2, 2]),
              ([16, 1, 1, 1], [1, 7, 3, 1]), ([576, 1, 1, 1], [1, 7, 1, 1]),
              ([896, 1, 1, 1], [1, 5, 1, 1]), ([4096, 1, 1, 1], [1, 3, 1, 1]),
              ([1, 1, 1, 1], [33, 3, 1, 1])]
    for op in ("ADD", "MUL"):
        for ttype in (F32, F16):
            for ne, nr in shapes:
                cases.append(_bin_case(op, ttype, ttype, ne, nr))
        for ta, tb in ((F16, F32), (F32, F16), (BF16, BF16)):
            cases.append(_bin_case(op, ta, tb, [10, 5, 4, 3], [2, 1, 1, 1]))
        cases.append(_bin_case(op, F32, F32, [16, 5, 4, 3], [1, 1, 1, 1], perm=True))
    return cases


def _bin_case(op, ta, tb, ne, nr, perm=False) -> Case:
    ne_a = [n * r for n, r in zip(ne, nr)]

    def build(b):
        a = (_permuted(b, ta, ne_a, [0, 2, 1, 3]) if perm else b.new(ta, ne_a))
        x = b.new(tb, ne)
        return (b.ctx.add if op == "ADD" else b.ctx.mul)(a, x)
    params = {"type_a": ta, "type_b": tb, "ne": ne, "nr": nr}
    if perm:
        params["perm_a"] = [0, 2, 1, 3]
    return Case(op, params, build)


def _scale_cases() -> list[Case]:
    cases = []
    for ttype, ne, s, bias in [(F32, [10, 10, 10, 10], 2.0, 0.0), (F32, [10, 10, 10, 10], 2.0, 1.0),
                               (F32, [64, 9, 7, 1], 0.125, 0.0), (F16, [64, 9, 7, 1], 0.125, 0.0),
                               (F32, [33, 5, 1, 1], -0.5, 0.25)]:
        cases.append(Case("SCALE", {"type": ttype, "ne": ne, "scale": s, "bias": bias},
                          lambda b, t=ttype, n=ne, s=s, c=bias: b.ctx.scale(b.new(t, n), s, c)))
    return cases


def _rms_norm_cases() -> list[Case]:
    cases = []
    for ttype in (F32, F16):
        for ne in ([64, 5, 4, 3], [576, 7, 1, 1], [896, 1, 1, 1], [4096, 3, 1, 1], [1025, 2, 1, 1],
                   [33, 3, 1, 1]):
            for eps in (1e-6, 1e-5) if ne[0] == 64 else (1e-5,):
                cases.append(Case("RMS_NORM", {"type": ttype, "ne": ne, "eps": eps},
                                  lambda b, t=ttype, n=ne, e=eps: b.ctx.rms_norm(
                                      b.new(t, n, lo=-10, hi=10), e)))
    # non-contiguous rows: a permuted source
    cases.append(Case("RMS_NORM", {"type": F32, "ne": [64, 5, 4, 3], "eps": 1e-6, "v": 1},
                      lambda b: b.ctx.rms_norm(_permuted(b, F32, [64, 5, 4, 3], [0, 2, 1, 3],
                                                         -10, 10), 1e-6)))
    return cases


def _mul_mat_case(type_a, type_b, m, n, k, bs=(1, 1), nr=(1, 1), per=None, lo=-1.0, hi=1.0,
                  x_range=None):
    """ggml's naming: a is [k, m] (weights), b is [k, n]; bs batches of a, nr repeats of them.
    lo / hi: the weights' range; x_range: (lo, hi) of b (default the builder's)."""
    def build(b):
        a = b.new(type_a, [k, m, bs[0], bs[1]], lo=lo, hi=hi)
        ne_b = [k, n, bs[0] * nr[0], bs[1] * nr[1]]
        if per:
            x = _permuted(b, type_b, ne_b, per)
        elif x_range:
            x = b.new(type_b, ne_b, lo=x_range[0], hi=x_range[1])
        else:
            x = b.new(type_b, ne_b)
        return b.ctx.mul_mat(a, x)
    params = {"type_a": type_a, "type_b": type_b, "m": m, "n": n, "k": k, "bs": list(bs),
              "nr": list(nr)}
    if per:
        params["per"] = list(per)
    if (lo, hi) != (-1.0, 1.0):
        params["range_a"] = [lo, hi]
    if x_range:
        params["range_b"] = list(x_range)
    return Case("MUL_MAT", params, build)


def _mul_mat_cases() -> list[Case]:
    cases = []
    weight_types = (F32, F16, BF16, Q8_0, Q4_0, Q4_1)
    for type_a in weight_types:
        for m, n, k in [(16, 1, 256), (16, 7, 256), (33, 1, 64), (64, 5, 32), (576, 1, 576),
                        (192, 3, 576), (64, 1, 1536)]:
            cases.append(_mul_mat_case(type_a, F32, m, n, k))
        if type_a == BF16:
            cases.append(_mul_mat_case(type_a, type_a, 16, 4, 256))
        cases.append(_mul_mat_case(type_a, F16, 16, 4, 256))
    for type_a in (F32, F16, Q8_0, Q4_0):
        for bs, nr in [((2, 1), (1, 1)), ((3, 2), (1, 1)), ((2, 1), (2, 1)), ((1, 1), (4, 1)),
                       ((2, 2), (1, 2))]:
            cases.append(_mul_mat_case(type_a, F32, 16, 5, 64, bs, nr))
        cases.append(_mul_mat_case(type_a, F32, 16, 5, 64, (3, 2), (1, 1), per=[0, 2, 1, 3]))
        cases.append(_mul_mat_case(type_a, F32, 16, 5, 64, (1, 1), (1, 1), per=[0, 1, 3, 2]))
    # attention-like float products: K^T Q and V softmax with GQA broadcast (nr)
    cases.append(_mul_mat_case(F16, F32, 113, 7, 64, (3, 1), (3, 1)))
    cases.append(_mul_mat_case(F16, F32, 64, 1, 113, (2, 1), (7, 1)))
    # model-shaped, kept small in k; n past 65535 rows in the output projection
    for type_a, m, n, k in [(Q4_0, 4096, 1, 128), (Q4_0, 4096, 3, 128), (Q4_1, 11008, 1, 64),
                            (Q8_0, 1536, 2, 576), (Q4_1, 576, 1, 1536), (Q8_0, 32000, 1, 64),
                            (Q4_1, 49152, 1, 32), (F16, 65600, 1, 64), (Q8_0, 151936, 1, 32),
                            (Q4_0, 70000, 2, 64)]:
        cases.append(_mul_mat_case(type_a, F32, m, n, k))
    # N past WeightQuantBatchMatmulV2's 65535 with several rows: each column chunk's y must be
    # contiguous (a (M, nc) view of the (M, N) output is not)
    for type_a in (Q8_0, Q4_0, Q4_1):
        for n in (1, 3, 64):
            cases.append(_mul_mat_case(type_a, F32, 70000, n, 64))
    # one weight row (N = 1) with several activation rows: an INT4 (K, 1) chunk is declined
    # (upstream test-backend-ops found WQBMM refusing it); Q8_0 runs
    for type_a in (Q8_0, Q4_0, Q4_1):
        cases.append(_mul_mat_case(type_a, F32, 1, 64, 256))
    # results beyond F16's 65504 with F16 weights (about 1024 * 0.75 * 150 = 115000)
    for n in (1, 5):
        cases.append(_mul_mat_case(F16, F32, 32, n, 1024, lo=100.0, hi=200.0, x_range=(0.5, 1.0)))
    cases.append(_mul_mat_case(F16, F32, 32, 5, 1024, (2, 1), (2, 1), lo=100.0, hi=200.0,
                               x_range=(0.5, 1.0)))
    return cases


def _mmid_case(type_a, type_b, n, k, n_as, n_ids, n_tokens, n_b1=None, ids="perm", ids_view=False,
               b_view=False) -> Case:
    """MUL_MAT_ID: experts a [k, n, n_as], b [k, n_b1, n_tokens] (n_b1 1 broadcasts, n_ids a row
    per slot), ids [n_ids, n_tokens]: "perm" distinct experts per token, "rep" repeats within a
    token and across tokens, "same" every token the same experts. ids_view: the ids are the
    first n_ids columns of a wider [n_as, n_tokens] tensor (argsort_top_k's view); b_view: b is
    a view of every other row of a wider tensor."""
    n_b1 = n_ids if n_b1 is None else n_b1

    def init_ids(rng, shape, width):
        if ids == "perm":
            rows = [rng.permutation(n_as)[:width] if width <= n_as else rng.integers(0, n_as, width)
                    for _ in range(shape[-2])]
        elif ids == "rep":
            rows = [rng.integers(0, min(n_as, 3), width) for _ in range(shape[-2])]
        else:
            first = rng.permutation(n_as)[:width]
            rows = [first for _ in range(shape[-2])]
        return np.array(rows).reshape(shape)

    def build(b):
        a = b.new(type_a, [k, n, n_as])
        if b_view:
            base = b.new(type_b, [k + 3, 2 * n_b1, n_tokens])
            x = b.ctx.view_4d(base, [k, n_b1, n_tokens, 1],
                              [2 * base.nb[1], base.nb[2], base.nb[2] * n_tokens], base.nb[0])
        else:
            x = b.new(type_b, [k, n_b1, n_tokens])
        if ids_view:
            wide = b.new(I32, [n_as, n_tokens], lambda rng: init_ids(rng, (1, 1, n_tokens, n_as), n_as))
            sel = b.ctx.view_4d(wide, [n_ids, n_tokens, 1, 1], [wide.nb[1], wide.nb[1] * n_tokens,
                                                                wide.nb[1] * n_tokens], 0)
        else:
            sel = b.new(I32, [n_ids, n_tokens], lambda rng: init_ids(rng, (1, 1, n_tokens, n_ids), n_ids))
        return b.ctx.mul_mat_id(a, x, sel)
    params = {"type_a": type_a, "type_b": type_b, "n": n, "k": k, "n_as": n_as, "n_ids": n_ids,
              "n_tokens": n_tokens, "n_b1": n_b1, "ids": ids}
    if ids_view:
        params["ids_view"] = 1
    if b_view:
        params["b_view"] = 1
    return Case("MUL_MAT_ID", params, build)


def _mul_mat_id_cases() -> list[Case]:
    cases = []
    for type_a in (F32, F16, BF16, Q8_0, Q4_0, Q4_1):
        for n, k, n_as, n_ids, n_tokens, n_b1 in [(16, 256, 4, 2, 1, 1), (16, 256, 8, 4, 3, None),
                                                  (33, 64, 16, 4, 5, 1), (64, 32, 4, 4, 2, None),
                                                  (96, 576, 6, 3, 7, 1)]:
            cases.append(_mmid_case(type_a, F32, n, k, n_as, n_ids, n_tokens, n_b1))
        cases.append(_mmid_case(type_a, F32, 16, 64, 8, 4, 6, None, ids="rep"))
        cases.append(_mmid_case(type_a, F32, 16, 64, 8, 4, 6, 1, ids="same"))
        cases.append(_mmid_case(type_a, F32, 16, 64, 16, 4, 3, 1, ids_view=True))
        cases.append(_mmid_case(type_a, F16, 16, 64, 8, 2, 3, None, b_view=True))
    # Qwen3-MoE's FFN shapes (scaled down): gate/up broadcast one row, down one row per slot
    for type_a in (F16, Q8_0, Q4_0):
        cases.append(_mmid_case(type_a, F32, 256, 256, 16, 4, 1, 1, ids_view=True))
        cases.append(_mmid_case(type_a, F32, 256, 256, 16, 4, 1, None))
        cases.append(_mmid_case(type_a, F32, 256, 256, 16, 4, 9, 1, ids_view=True))
    # more tokens than experts (a prompt): every expert has several tokens, some none; the INT4
    # experts are routed through the grouped product from n_ids * n_tokens >= n_as (Q4_1: 2 n_as)
    for type_a in (F32, F16, BF16, Q8_0, Q4_0, Q4_1):
        cases.append(_mmid_case(type_a, F32, 48, 128, 8, 2, 40, 1, ids_view=True))
        cases.append(_mmid_case(type_a, F32, 48, 128, 8, 2, 40, None, ids="rep"))
    for type_a in (F16, Q4_0, Q4_1):
        cases.append(_mmid_case(type_a, F32, 256, 256, 16, 4, 64, None, ids_view=True))
    # declined: b rows neither 1 nor n_ids (2 rows for 4 experts)
    cases.append(_mmid_case(F16, F32, 16, 64, 8, 4, 2, 2))
    # one weight row of INT4 experts (a (K, 1) weight view WQBMM refuses): declined; Q8_0 runs
    for type_a in (Q8_0, Q4_0):
        cases.append(_mmid_case(type_a, F32, 1, 64, 4, 2, 2, 1))
    return cases


def _get_rows_cases() -> list[Case]:
    cases = []
    for ttype in (F32, F16, BF16, Q8_0, Q4_0, Q4_1):
        for ne0, n_rows, n_idx, batch in [(256, 5, 4, 1), (256, 5, 4, 3), (576, 100, 7, 1),
                                          (64, 1000, 1, 1)]:
            cases.append(_get_rows_case(ttype, ne0, n_rows, n_idx, batch))
        cases.append(_get_rows_case(ttype, 64, 49152, 5, 1))
    cases.append(_get_rows_case(I32, 8, 10, 4, 2))
    # the AscendC kernel's tiling (clm_asc_get_rows_tiling): rows longer than one tile with a
    # tail (8192 + 37 elements; 131 groups = 128 + 3), rows not a multiple of 32 bytes, more rows
    # than blocks with repeated ids (300 ids of 7 rows), an F16 result, a strided table
    for ttype in (F32, F16, Q8_0, Q4_0, Q4_1):
        ne0 = 8229 if ttype in (F32, F16) else 32 * 131
        cases.append(_get_rows_case(ttype, ne0, 3, 2, 1))
        cases.append(_get_rows_case(ttype, 64 if ttype in _QUANT_STEP else 7, 7, 300, 1))
        for ne0, n_rows, n_idx, batch in [(576, 100, 7, 1), (256, 5, 4, 3)]:
            cases.append(_get_rows_case(ttype, ne0, n_rows, n_idx, batch, out_type=F16))
    for ttype in (F32, F16):
        cases.append(_get_rows_case(ttype, 33, 6, 9, 2, permuted=True))
        # short rows of whole 32-byte blocks, more than the blocks: several rows per unit
        cases.append(_get_rows_case(ttype, 64, 50, 300, 1))
        cases.append(_get_rows_case(ttype, 64, 50, 300, 1, out_type=F16))
    return cases


def _get_rows_case(ttype, ne0, n_rows, n_idx, batch, out_type=None, permuted=False) -> Case:
    """out_type: a result type other than ggml's F32 (a GET_ROWS node made directly);
    permuted: the table stored [ne0, batch, n_rows] and viewed as [ne0, n_rows, batch]."""
    def build(b):
        if permuted:
            table = _permuted(b, ttype, [ne0, n_rows, batch, 1], [0, 2, 1, 3])
        else:
            table = b.new(ttype, [ne0, n_rows, batch, 1])
        if ttype == I32:
            table_init = b.inputs[-1]
            table_init.init = lambda rng, s=tuple(reversed([ne0, n_rows, batch, 1])): \
                rng.integers(-1000, 1000, size=s)
        rows = b.rows(I32, [n_idx, batch], n_rows)
        if out_type is not None:
            return b.ctx.new_op(Op.GET_ROWS, out_type, [ne0, n_idx, batch, 1], [table, rows])
        return b.ctx.get_rows(table, rows)
    params = {"type": ttype, "n": ne0, "m": n_rows, "r": n_idx, "b": batch}
    if out_type is not None:
        params["type_dst"] = out_type
    if permuted:
        params["permute"] = [0, 2, 1, 3]
    return Case("GET_ROWS", params, build)


def _set_rows_cases() -> list[Case]:
    cases = []
    for dst_type in (F32, F16, BF16):
        for idx_type in (I32, I64):
            for ne, n_rows, ne11 in [([64, 4, 3, 1], 10, 3), ([64, 4, 3, 1], 10, 1),
                                     ([192, 7, 1, 1], 256, 1), ([128, 1, 1, 1], 64, 1)]:
                cases.append(_set_rows_case(dst_type, idx_type, ne, n_rows, ne11))
    cases.append(_set_rows_case(F16, I64, [64, 3, 2, 2], 20, 2, src_type=F16))
    return cases


def _set_rows_case(dst_type, idx_type, ne, n_rows, ne11, src_type=F32) -> Case:
    def build(b):
        dst = b.new(dst_type, [ne[0], n_rows, ne[2], ne[3]])
        src = b.new(src_type, ne)
        rows = b.rows(idx_type, [ne[1], ne11, ne[3]], n_rows, unique=True)
        return b.ctx.set_rows(dst, src, rows)
    return Case("SET_ROWS", {"type": dst_type, "type_src": src_type, "type_idx": idx_type,
                             "ne": ne, "n_rows": n_rows, "ne11": ne11}, build)


def _cpy_cases() -> list[Case]:
    cases = []
    pairs = [(F32, F32), (F32, F16), (F16, F32), (F16, F16), (F32, BF16), (BF16, F32),
             (BF16, BF16), (F16, BF16)]
    for src_type, dst_type in pairs:
        for ne, perm in [([256, 4, 4, 4], None), ([7, 13, 5, 1], None),
                         ([256, 4, 4, 4], [0, 2, 1, 3]), ([64, 9, 7, 1], [1, 0, 2, 3])]:
            cases.append(_cpy_case("CPY", src_type, dst_type, ne, perm))
    # into a non-contiguous destination: a transposed view of dst
    cases.append(_cpy_case("CPY", F32, F16, [16, 8, 1, 1], None, dst_perm=True))
    cases.append(_cpy_case("CPY", F32, F32, [16, 8, 3, 1], None, dst_perm=True))
    for ttype in (F32, F16, BF16):
        cases.append(_cpy_case("CONT", ttype, ttype, [64, 9, 7, 1], [0, 2, 1, 3]))
        cases.append(_cpy_case("CONT", ttype, ttype, [10, 10, 10, 1], [1, 0, 2, 3]))
        cases.append(_cpy_case("DUP", ttype, ttype, [10, 10, 10, 1], None))
    cases.append(_cpy_case("DUP", F32, F32, [64, 9, 7, 1], [0, 2, 1, 3]))
    # contiguous views at odd element offsets: device copies at addresses that are not
    # 64-byte aligned (aclrtMemcpyAsync refuses them; the backend copies with aclnnInplaceCopy)
    for ttype in (F32, F16, BF16):
        cases.append(_cpy_case("CPY", ttype, ttype, [33, 5, 2, 1], None, src_offset=3))
        cases.append(_cpy_case("CPY", ttype, ttype, [33, 5, 2, 1], None, dst_offset=5))
        cases.append(_cpy_case("CONT", ttype, ttype, [40, 3, 1, 1], None, src_offset=1))
        cases.append(_cpy_case("DUP", ttype, ttype, [7, 13, 5, 1], None, src_offset=7))
    cases.append(_cpy_case("CPY", F32, F32, [64, 4, 1, 1], None, src_offset=16, dst_offset=16))
    cases.append(_cpy_case("CPY", F32, F16, [33, 5, 2, 1], None, src_offset=3, dst_offset=1))
    # the AscendC kernel clm_dup's tiling: three tiles of 8192 and a tail of 5, seven tiles and
    # a tail; past CANN_ASC_CONVERT_KERNEL_MAX values the aclnn path (45 tiles' worth)
    for src_type, dst_type in ((F32, F16), (F16, F32), (F32, F32), (F16, F16)):
        cases.append(_cpy_case("CPY", src_type, dst_type, [24581, 1, 1, 1], None))
    cases.append(_cpy_case("CPY", F32, F16, [8195, 7, 1, 1], None))
    cases.append(_cpy_case("CPY", F32, F16, [8195, 45, 1, 1], None))
    # quantizing copies (the AscendC kernel clm_quantize, bit for bit ggml's quantizer): one
    # group, tiles of 128 groups with a tail of 3, more tiles than blocks, CPY into a block-aligned
    # view of a larger tensor (a KV cache's rows), groups with ties and zero groups
    for src_type in (F32, F16):
        for dst_type in (Q8_0, Q4_0):
            for ne in ([32, 1, 1, 1], [256, 4, 4, 4], [32 * 131, 3, 1, 1], [4096, 90, 1, 1]):
                cases.append(_cpy_case("CPY", src_type, dst_type, ne, None))
            cases.append(_cpy_case("CPY", src_type, dst_type, [64, 3, 1, 1], None, dst_offset=2))
            cases.append(_cpy_case("CPY", src_type, dst_type, [96, 7, 1, 1], None, values="ties"))
    return cases


def _offset_view(b: Builder, ttype, ne, offset: int, lo=-1.0, hi=1.0):
    """A contiguous tensor of shape `ne` that starts `offset` elements (of a quantized type:
    rows of ne0) into a larger tensor."""
    if ttype in _QUANT_STEP:
        base = b.new(ttype, [ne[0], ne[1] + offset + 1, ne[2], ne[3]], lo=lo, hi=hi)
        return b.ctx.view_4d(base, ne, base.nb[1:], offset * base.nb[1])
    n = ne[0] * ne[1] * ne[2] * ne[3]
    base = b.new(ttype, [n + offset + 1, 1, 1, 1], lo=lo, hi=hi)
    size = base.nb[0]
    nb123 = [size * ne[0], size * ne[0] * ne[1], size * ne[0] * ne[1] * ne[2]]
    return b.ctx.view_4d(base, ne, nb123, offset * size)


def _tie_values(rng, shape):
    """Small integers (groups of 32 whose largest and smallest have the same magnitude, which
    ggml's Q4_0 quantizer resolves by position) with every third group all zero."""
    values = rng.integers(-3, 4, size=shape).astype(np.float32)
    groups = values.reshape(-1, 32)
    groups[::3] = 0.0
    return groups.reshape(shape)


def _cpy_case(op, src_type, dst_type, ne, perm, dst_perm=False, src_offset=0,
              dst_offset=0, values=None) -> Case:
    lo, hi = -150.0, 150.0

    def build(b):
        if perm:
            src = _permuted(b, src_type, ne, perm, lo, hi)
        elif src_offset:
            src = _offset_view(b, src_type, ne, src_offset, lo, hi)
        elif values == "ties":
            src = b.new(src_type, ne, lambda rng, shape=tuple(reversed(ne)): _tie_values(rng, shape))
        else:
            src = b.new(src_type, ne, lo=lo, hi=hi)
        if op == "CONT":
            return b.ctx.cont(src)
        if op == "DUP":
            return b.ctx.new_op(Op.DUP, dst_type, src.ne, [src])
        if dst_perm:
            dst = b.ctx.transpose(b.new(dst_type, [ne[1], ne[0], ne[2], ne[3]]))
        elif dst_offset:
            dst = _offset_view(b, dst_type, ne, dst_offset)
        else:
            dst = b.new(dst_type, ne)
        return b.ctx.cpy(src, dst)
    params = {"type_src": src_type, "type_dst": dst_type, "ne": ne}
    if perm:
        params["permute"] = perm
    if dst_perm:
        params["dst_permute"] = [1, 0, 2, 3]
    if src_offset:
        params["src_offset"] = src_offset
    if dst_offset:
        params["dst_offset"] = dst_offset
    if values:
        params["values"] = values
    return Case(op, params, build)


def _rope_cases() -> list[Case]:
    cases = []
    shapes = [([128, 32, 2, 1], 128), ([64, 9, 7, 1], 64), ([64, 3, 7, 1], 64),
              ([64, 14, 5, 1], 64), ([80, 32, 2, 1], 32), ([64, 2, 1, 1], 64)]
    for mode in (0, ref.ROPE_TYPE_NEOX):
        for ttype in (F32, F16):
            for ne, n_dims in shapes:
                cases.append(_rope_case(ttype, ne, n_dims, mode))
        # frequency base/scale, YaRN (ext_factor, attn_factor, beta), freq_factors
        for fb, fs, ef, af in [(1000000.0, 1.0, 0.0, 1.0), (10000.0, 0.5, 0.0, 1.0),
                               (10000.0, 0.25, 1.0, 1.0), (500000.0, 0.125, 1.0, 0.9),
                               (10000.0, 1.0, 0.0, 2.0)]:
            cases.append(_rope_case(F32, [64, 9, 7, 1], 64, mode, fb, fs, ef, af))
        cases.append(_rope_case(F32, [128, 4, 5, 1], 128, mode, ff=True))
        cases.append(_rope_case(F32, [128, 4, 5, 1], 64, mode, 10000.0, 0.25, 1.0, 1.0, ff=True))
        cases.append(_rope_case(F32, [64, 9, 7, 1], 64, mode, view=True))
    return cases


def _rope_case(ttype, ne, n_dims, mode, freq_base=10000.0, freq_scale=1.0, ext_factor=0.0,
               attn_factor=1.0, ff=False, view=False) -> Case:
    n_ctx_orig = 4096

    def build(b):
        if view:   # a head slice of a wider fused tensor (non-contiguous rows)
            wide = b.new(ttype, [ne[0] * 2, ne[1], ne[2], ne[3]])
            x = b.ctx.view_4d(wide, ne, list(wide.nb[1:]), 0)
        else:
            x = b.new(ttype, ne)
        pos = b.positions(ne[2])
        factors = (b.new(F32, [n_dims // 2], lo=0.9, hi=1.1) if ff else None)
        return b.ctx.rope_ext(x, pos, factors, n_dims, mode, n_ctx_orig, freq_base, freq_scale,
                              ext_factor, attn_factor, 32.0, 1.0)
    params = {"type": ttype, "ne": ne, "n_dims": n_dims, "mode": mode, "freq_base": freq_base,
              "freq_scale": freq_scale, "ext_factor": ext_factor, "attn_factor": attn_factor,
              "ff": int(ff), "v": int(view)}
    return Case("ROPE", params, build)


def _soft_max_cases() -> list[Case]:
    cases = []
    for ne in ([16, 16, 1, 1], [32, 7, 9, 1], [113, 1, 14, 1], [1025, 3, 2, 1], [77, 5, 4, 2]):
        for mask_type in (None, F16, F32):
            for scale, max_bias in ((1.0, 0.0), (0.125, 0.0), (0.1, 8.0)):
                if mask_type is None and max_bias > 0:
                    continue
                cases.append(_soft_max_case(ne, mask_type, scale, max_bias))
    cases.append(_soft_max_case([32, 7, 9, 1], F16, 0.125, 0.0, mask_rows=16))
    cases.append(_soft_max_case([32, 7, 4, 3], F32, 1.0, 0.0, mask_heads=True))
    return cases


def _soft_max_case(ne, mask_type, scale, max_bias, mask_rows=None, mask_heads=False) -> Case:
    def build(b):
        x = b.new(F32, ne)
        mask = None
        if mask_type is not None:
            m_ne = [ne[0], mask_rows or ne[1], ne[2] if mask_heads else 1,
                    ne[3] if mask_heads else 1]
            mask = b.mask(mask_type, m_ne)
        return b.ctx.soft_max_ext(x, mask, scale, max_bias)
    params = {"ne": ne, "mask": "none" if mask_type is None else mask_type, "scale": scale, "max_bias": max_bias}
    if mask_rows:
        params["mask_rows"] = mask_rows
    if mask_heads:
        params["mask_heads"] = 1
    return Case("SOFT_MAX", params, build)


def _flash_attn_cases() -> list[Case]:
    cases = []
    for hs in (64, 128):
        for n_head, n_head_kv in ((4, 4), (9, 3), (8, 2), (14, 2)):
            for n_q in (1, 7):
                cases.append(_fa_case(hs, n_head, n_head_kv, 113, n_q))
    cases.append(_fa_case(128, 32, 32, 64, 1))                  # Llama-7B decode shape
    cases.append(_fa_case(64, 9, 3, 256, 32))                   # SmolLM2 prefill chunk
    cases.append(_fa_case(64, 14, 2, 256, 1, mask=False))
    cases.append(_fa_case(64, 8, 2, 113, 7, max_bias=8.0))      # ALiBi
    cases.append(_fa_case(64, 12, 4, 113, 1, max_bias=8.0))     # ALiBi, n_head not a power of 2
    cases.append(_fa_case(128, 8, 8, 64, 3, max_bias=2.0, n_seq=2))
    cases.append(_fa_case(64, 8, 2, 113, 7, mask_pad=64))
    cases.append(_fa_case(64, 8, 2, 113, 3, n_seq=2))
    cases.append(_fa_case(64, 4, 4, 113, 7, kv_type=F32))
    cases.append(_fa_case(64, 4, 4, 113, 7, softcap=30.0))     # no softcap in FIA: declined
    cases.append(_fa_case(64, 4, 2, 4096, 8))                   # prefill over 4096 keys (attenMask)
    cases.append(_fa_case(64, 9, 3, 1000, 1))                   # decode past 512 keys (full-head pse)
    cases.append(_fa_case(64, 8, 2, 600, 1, n_seq=2))           # decode, two sequences, > 512 keys
    cases.append(_fa_case(64, 8, 2, 700, 1, max_bias=8.0))      # ALiBi decode past 512 keys
    # masks with finite biases in [-1, 1] besides -inf (ggml's semantics; upstream
    # test-backend-ops found prefill dropping them): prefill, a K/V cache view, decode
    for n_q in (1, 7, 32):
        cases.append(_fa_case(64, 8, 2, 113, n_q, additive=True))
    cases.append(_fa_case(64, 4, 4, 113, 3, additive=True, kv_view=True))
    return cases


def _fa_case(hs, n_head, n_head_kv, n_kv, n_q, mask=True, max_bias=0.0, softcap=0.0,
             mask_pad=0, n_seq=1, kv_type=F16, additive=False, kv_view=False) -> Case:
    """A 0 / -inf mask is promised to the backend as binary (as the runner does); an additive
    one is not. kv_view: K and V are the first n_kv rows of twice as many, like a KV cache."""
    def build(b):
        q = b.new(F32, [hs, n_q, n_head, n_seq])
        kv_rows = 2 * n_kv if kv_view else n_kv
        k = b.new(kv_type, [hs, kv_rows, n_head_kv, n_seq])
        v = b.new(kv_type, [hs, kv_rows, n_head_kv, n_seq])
        if kv_view:
            k, v = (b.ctx.view_4d(t, [hs, n_kv, n_head_kv, n_seq], [t.nb[1], t.nb[2], t.nb[3]])
                    for t in (k, v))
        m = (b.mask(F16, [n_kv, max(n_q, mask_pad), 1, 1], additive=additive) if mask else None)
        return b.ctx.flash_attn_ext(q, k, v, m, 1.0 / np.sqrt(hs), max_bias, softcap,
                                    mask_binary=mask and not additive)
    params = {"hs": hs, "nh": n_head, "nh_kv": n_head_kv, "kv": n_kv, "nb": n_q,
              "mask": int(mask), "max_bias": max_bias, "softcap": softcap, "type_kv": kv_type}
    if additive:
        params["additive"] = 1
    if kv_view:
        params["kv_view"] = 1
    if mask_pad:
        params["mask_pad"] = mask_pad
    if n_seq != 1:
        params["n_seq"] = n_seq
    return Case("FLASH_ATTN_EXT", params, build)


def _glu_cases() -> list[Case]:
    cases = []
    for ttype in (F32, F16):
        for ne in ([128, 2, 2, 2], [10, 7, 11, 3], [3072, 3, 1, 1], [9728, 1, 1, 1]):
            for swapped in (0, 1):
                cases.append(Case("SWIGLU", {"type": ttype, "ne": ne, "swapped": swapped},
                                  lambda b, t=ttype, n=ne, s=swapped: b.ctx.swiglu(
                                      b.new(t, n, lo=-150, hi=150), bool(s))))
        for ne in ([128, 2, 2, 2], [5, 7, 11, 13], [1536, 3, 1, 1]):
            cases.append(Case("SWIGLU", {"type": ttype, "ne": ne, "split": 1},
                              lambda b, t=ttype, n=ne: b.ctx.swiglu_split(
                                  b.new(t, n, lo=-150, hi=150), b.new(t, n, lo=-150, hi=150))))
        # the halves of a fused gate/up result as two views (split with strided sources)
        cases.append(Case("SWIGLU", {"type": ttype, "ne": [64, 5, 1, 1], "split": 1, "v": 1},
                          lambda b, t=ttype: _swiglu_views(b, t)))
        for ne in ([128, 2, 2, 2], [5, 7, 11, 13], [1536, 3, 1, 1]):
            cases.append(Case("SILU", {"type": ttype, "ne": ne},
                              lambda b, t=ttype, n=ne: b.ctx.silu(b.new(t, n, lo=-10, hi=10))))
    return cases


def _swiglu_views(b: Builder, ttype):
    fused = b.new(ttype, [128, 5, 1, 1], lo=-150, hi=150)
    size = fused.nb[0]
    gate = b.ctx.view_4d(fused, [64, 5, 1, 1], list(fused.nb[1:]), 0)
    up = b.ctx.view_4d(fused, [64, 5, 1, 1], list(fused.nb[1:]), 64 * size)
    return b.ctx.swiglu_split(gate, up)


# GELU / GELU_ERF / TANH (UNARY) and GEGLU / GEGLU_ERF (GLU): Gemma 3's FFN is geglu_split of two
# [n_ff, n_tokens] matmul results (n_ff 6912 for Gemma 3 1B, 10240 for 4B); inputs in [-10, 10]
# reach both tails of each function.
_UNARY_BUILDERS = {"GELU": "gelu", "GELU_ERF": "gelu_erf", "TANH": "tanh"}
_GLU_BUILDERS = {"GEGLU": ("geglu", "geglu_split"), "GEGLU_ERF": ("geglu_erf", "geglu_erf_split")}


def _gelu_tanh_cases() -> list[Case]:
    cases = []
    for ttype in (F32, F16):
        for name, fn in _UNARY_BUILDERS.items():
            for ne in ([128, 2, 2, 2], [5, 7, 11, 13], [6912, 3, 1, 1], [1152, 1, 1, 1]):
                cases.append(Case(name, {"type": ttype, "ne": ne},
                                  lambda b, t=ttype, n=ne, f=fn: getattr(b.ctx, f)(
                                      b.new(t, n, lo=-10, hi=10))))
            # a strided view at an offset (rows 2 apart, odd length, starting at element 3)
            cases.append(Case(name, {"type": ttype, "ne": [33, 5, 1, 1], "v": 1},
                              lambda b, t=ttype, f=fn: getattr(b.ctx, f)(
                                  _row_view(b, t, [33, 5, 1, 1]))))
            # a permuted source (non-contiguous along ne0)
            cases.append(Case(name, {"type": ttype, "ne": [9, 4, 3, 1], "per": [1, 0, 2, 3]},
                              lambda b, t=ttype, f=fn: getattr(b.ctx, f)(
                                  _permuted(b, t, [9, 4, 3, 1], [1, 0, 2, 3], -10, 10))))
        for name, (fused, split) in _GLU_BUILDERS.items():
            for ne in ([128, 2, 2, 2], [10, 7, 11, 3], [13824, 2, 1, 1]):
                for swapped in (0, 1):
                    cases.append(Case(name, {"type": ttype, "ne": ne, "swapped": swapped},
                                      lambda b, t=ttype, n=ne, s=swapped, f=fused: getattr(b.ctx, f)(
                                          b.new(t, n, lo=-10, hi=10), bool(s))))
            for ne in ([128, 2, 2, 2], [5, 7, 11, 13], [6912, 3, 1, 1]):
                cases.append(Case(name, {"type": ttype, "ne": ne, "split": 1},
                                  lambda b, t=ttype, n=ne, f=split: getattr(b.ctx, f)(
                                      b.new(t, n, lo=-10, hi=10), b.new(t, n, lo=-10, hi=10))))
            # the halves of one tensor as two strided views (split), and a fused row view
            cases.append(Case(name, {"type": ttype, "ne": [64, 5, 1, 1], "split": 1, "v": 1},
                              lambda b, t=ttype, f=split: _glu_views(b, t, f)))
            cases.append(Case(name, {"type": ttype, "ne": [34, 5, 1, 1], "swapped": 1, "v": 1},
                              lambda b, t=ttype, f=fused: getattr(b.ctx, f)(
                                  _row_view(b, t, [34, 5, 1, 1]), True)))
    for name, fn in _UNARY_BUILDERS.items():
        cases.append(Case(name, {"type": BF16, "ne": [5, 7, 11, 13]},
                          lambda b, f=fn: getattr(b.ctx, f)(b.new(BF16, [5, 7, 11, 13], lo=-10, hi=10))))
    for name, (fused, split) in _GLU_BUILDERS.items():
        cases.append(Case(name, {"type": BF16, "ne": [10, 7, 11, 3], "swapped": 0},
                          lambda b, f=fused: getattr(b.ctx, f)(b.new(BF16, [10, 7, 11, 3], lo=-10, hi=10))))
    return cases


def _row_view(b: Builder, ttype, ne, lo=-10.0, hi=10.0):
    """`ne` ([ne0, ne1, 1, 1]) as a view of every other row of a wider tensor, 3 elements in."""
    base = b.new(ttype, [ne[0] + 5, 2 * ne[1], 1, 1], lo=lo, hi=hi)
    return b.ctx.view_4d(base, ne, [2 * base.nb[1], 2 * base.nb[1] * ne[1], 2 * base.nb[1] * ne[1]],
                         3 * base.nb[0])


def _glu_views(b: Builder, ttype, split: str):
    fused = b.new(ttype, [128, 5, 1, 1], lo=-10, hi=10)
    size = fused.nb[0]
    gate = b.ctx.view_4d(fused, [64, 5, 1, 1], list(fused.nb[1:]), 0)
    up = b.ctx.view_4d(fused, [64, 5, 1, 1], list(fused.nb[1:]), 64 * size)
    return getattr(b.ctx, split)(gate, up)


def _argmax_cases() -> list[Case]:
    cases = []
    for ttype, ne in [(F32, [32000, 1]), (F32, [49152, 3]), (F32, [151936, 1]), (F32, [10, 7]),
                      (F32, [1025, 4]), (F16, [4096, 2])]:
        cases.append(Case("ARGMAX", {"type": ttype, "ne": ne},
                          lambda b, t=ttype, n=ne: b.ctx.argmax(b.new(t, n))))
    return cases


def _div_cases() -> list[Case]:
    """DIV: b kept away from 0 (|b| in [0.5, 1.5]); broadcasts and mixed types as ADD / MUL."""
    cases = []

    def away_from_zero(rng, shape):
        return (rng.uniform(0.5, 1.5, size=shape) * rng.choice([-1.0, 1.0], size=shape)).astype(np.float32)

    def case(ta, tb, ne, nr, perm=False):
        ne_a = [n * r for n, r in zip(ne, nr)]

        def build(b):
            a = (_permuted(b, ta, ne_a, [0, 2, 1, 3]) if perm else b.new(ta, ne_a))
            x = b.new(tb, ne, lambda rng, shape=tuple(reversed(ne)): away_from_zero(rng, shape))
            return b.ctx.div(a, x)
        params = {"type_a": ta, "type_b": tb, "ne": ne, "nr": nr}
        if perm:
            params["perm_a"] = [0, 2, 1, 3]
        return Case("DIV", params, build)
    for ttype in (F32, F16):
        for ne, nr in [([10, 5, 4, 3], [1, 1, 1, 1]), ([10, 5, 4, 3], [2, 1, 1, 1]),
                       ([10, 5, 4, 3], [1, 2, 3, 1]), ([1, 5, 4, 3], [7, 1, 1, 1]),
                       ([1, 9, 1, 1], [128, 1, 1, 1]), ([33, 3, 1, 1], [1, 1, 1, 1])]:
            cases.append(case(ttype, ttype, ne, nr))
    for ta, tb in ((F16, F32), (F32, F16), (BF16, BF16)):
        cases.append(case(ta, tb, [10, 5, 4, 3], [2, 1, 1, 1]))
    cases.append(case(F32, F32, [16, 5, 4, 3], [1, 1, 1, 1], perm=True))
    return cases


def _clamp_cases() -> list[Case]:
    cases = []
    for ttype, ne, lo, hi in [(F32, [10, 5, 4, 3], -0.5, 0.5), (F16, [10, 5, 4, 3], -0.5, 0.5),
                              (BF16, [33, 7, 1, 1], -0.25, 0.75), (F32, [1, 9, 1, 1], 6.103515625e-5, 1e30),
                              (F32, [128, 3, 1, 1], 0.0, 0.0), (F32, [7, 5, 1, 1], -1e30, -0.5)]:
        cases.append(Case("CLAMP", {"type": ttype, "ne": ne, "min": lo, "max": hi},
                          lambda b, t=ttype, n=ne, lo=lo, hi=hi: b.ctx.clamp(b.new(t, n), lo, hi)))
    cases.append(Case("CLAMP", {"type": F32, "ne": [34, 5, 1, 1], "min": -3.0, "max": 4.0, "v": 1},
                      lambda b: b.ctx.clamp(_row_view(b, F32, [34, 5, 1, 1]), -3.0, 4.0)))
    # min > max: ggml gives min everywhere, aclnnClamp would give max: declined
    cases.append(Case("CLAMP", {"type": F32, "ne": [10, 5, 1, 1], "min": 1.0, "max": -1.0},
                      lambda b: b.ctx.clamp(b.new(F32, [10, 5, 1, 1]), 1.0, -1.0)))
    return cases


def _sum_rows_cases() -> list[Case]:
    cases = []
    for ttype, ne in [(F32, [10, 5, 4, 3]), (F16, [10, 5, 4, 3]), (BF16, [33, 7, 1, 1]),
                      (F32, [1, 9, 1, 1]), (F32, [16, 1, 1, 1]), (F32, [4096, 3, 1, 1]),
                      (F16, [1025, 2, 1, 1]), (F32, [128, 13, 1, 1])]:
        cases.append(Case("SUM_ROWS", {"type": ttype, "ne": ne},
                          lambda b, t=ttype, n=ne: b.ctx.sum_rows(b.new(t, n, lo=0.0, hi=1.0))))
    cases.append(Case("SUM_ROWS", {"type": F32, "ne": [16, 5, 4, 3], "perm": [0, 2, 1, 3]},
                      lambda b: b.ctx.sum_rows(_permuted(b, F32, [16, 5, 4, 3], [0, 2, 1, 3], 0.0, 1.0))))
    cases.append(Case("SUM_ROWS", {"type": F32, "ne": [34, 5, 1, 1], "v": 1},
                      lambda b: b.ctx.sum_rows(_row_view(b, F32, [34, 5, 1, 1], 0.0, 1.0))))
    return cases


def _argsort_cases() -> list[Case]:
    """ARGSORT with distinct keys (a shuffled arithmetic sequence, exact in every type: at most
    2048 values in F16, 256 in BF16): the device and ggml's CPU order ties differently (see
    ops_reduce.c)."""
    cases = []

    def distinct(rng, shape):   # distinct over the whole tensor, so any permuted row is too
        n = int(np.prod(shape))
        return ((rng.permutation(n).astype(np.float64) - n / 2) / 4.0).reshape(shape).astype(np.float32)

    def new(b, ttype, ne):
        ne4 = list(ne) + [1] * (4 - len(ne))
        return b.new(ttype, ne4, lambda rng, shape=tuple(reversed(ne4)): distinct(rng, shape))
    for ttype, ne in [(F32, [16, 10, 10, 10]), (F32, [60, 10, 10, 10]), (F16, [16, 10, 3, 1]),
                      (BF16, [64, 3, 1, 1]), (F32, [1, 5, 1, 1]), (F32, [1023, 2, 1, 1]),
                      (F16, [128, 7, 1, 1]), (F32, [151, 4, 1, 1])]:
        for order in (0, 1):
            cases.append(Case("ARGSORT", {"type": ttype, "ne": ne, "order": order},
                              lambda b, t=ttype, n=ne, o=order: b.ctx.argsort(new(b, t, n), o)))
    # argsort_top_k (ggml_argsort_top_k): the first k columns of the descending order
    for n_expert, k, n_tokens in [(16, 4, 1), (128, 8, 5), (60, 4, 3)]:
        cases.append(Case("ARGSORT", {"type": F32, "ne": [n_expert, n_tokens], "top_k": k},
                          lambda b, n=n_expert, k=k, t=n_tokens: b.ctx.argsort_top_k(new(b, F32, [n, t]), k)))
    # a permuted source (rows not contiguous)
    def perm_build(b):
        base = new(b, F32, [5, 32, 3, 1])
        return b.ctx.argsort(b.ctx.permute(base, 1, 0, 2, 3), 1)
    cases.append(Case("ARGSORT", {"type": F32, "ne": [32, 5, 3, 1], "order": 1, "perm": [1, 0, 2, 3]},
                      perm_build))
    return cases


def make_cases() -> list[Case]:
    """Every case, in a stable order (the default `test` list)."""
    return [*_binary_cases(), *_scale_cases(), *_rms_norm_cases(), *_mul_mat_cases(), *_mul_mat_id_cases(),
            *_get_rows_cases(), *_set_rows_cases(), *_cpy_cases(), *_rope_cases(),
            *_soft_max_cases(), *_flash_attn_cases(), *_glu_cases(), *_gelu_tanh_cases(),
            *_argmax_cases(), *_div_cases(), *_clamp_cases(), *_sum_rows_cases(),
            *_argsort_cases()]


def select_cases(cases: list[Case], ops: list[str] | None, pattern: str | None) -> list[Case]:
    """-o: op names (ADD, MUL_MAT, ...) or exact case strings; -p: a regex over the params."""
    regex = re.compile(pattern) if pattern else None
    chosen = []
    for case in cases:
        if ops and not any(entry == case.name if "(" in entry else entry == case.op
                           for entry in ops):
            continue
        if regex and not regex.search(case.vars):
            continue
        chosen.append(case)
    return chosen


# ---- running a case -----------------------------------------------------------------------------------

@dataclass
class Result:
    backend: str
    mode: str
    op: str
    case: str
    types: str
    supported: bool
    passed: bool | None = None       # None when not run (support mode or not supported)
    error: str = ""
    time_ms: float = 0.0
    nmse: float | None = None
    threshold: float | None = None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _compute_nodes(graph) -> list:
    return [n for n in graph.nodes if n.op not in (Op.VIEW, Op.RESHAPE, Op.PERMUTE,
                                                   Op.TRANSPOSE)]


def _types(nodes) -> str:
    parts = []
    for node in nodes:
        srcs = ",".join(s.type.name.lower() for s in node.src)
        parts.append(f"{node.op_desc}:{srcs}->{node.type.name.lower()}")
    return " ".join(parts)


def compare(expected: np.ndarray, actual: np.ndarray, threshold: float) -> tuple[str, float]:
    """'' if actual matches expected (NaN, inf and NMSE rules), else the reason; and the NMSE."""
    expected = np.asarray(expected, dtype=np.float64).reshape(-1)
    actual = np.asarray(actual, dtype=np.float64).reshape(-1)
    if expected.shape != actual.shape:
        return f"shape mismatch: {actual.shape} vs {expected.shape}", float("inf")
    nan_a, nan_e = np.isnan(actual), np.isnan(expected)
    bad = np.flatnonzero(nan_a & ~nan_e)
    if bad.size:
        i = int(bad[0])
        return f"NaN at index {i} (device={actual[i]}, reference={expected[i]})", float("nan")
    bad = np.flatnonzero(nan_e & ~nan_a)
    if bad.size:
        i = int(bad[0])
        return f"reference NaN at index {i} (device={actual[i]})", float("nan")
    big = np.finfo(np.float32).max
    inf_a = np.where(np.abs(actual) >= big, np.sign(actual), 0)
    inf_e = np.where(np.abs(expected) >= big, np.sign(expected), 0)
    bad = np.flatnonzero(inf_a != inf_e)
    if bad.size:
        i = int(bad[0])
        return (f"inf mismatch at index {i} (device={actual[i]}, reference={expected[i]})",
                float("inf"))
    finite = ~nan_a & (inf_a == 0)
    a, e = actual[finite], expected[finite]
    if threshold == 0.0:
        diff = np.flatnonzero(a != e)
        if diff.size:
            i = int(diff[0])
            return (f"not bit-exact: {diff.size} of {a.size} values differ (first: device "
                    f"{a[i]}, reference {e[i]})", float("inf"))
        return "", 0.0
    err = float(np.sum((a - e) ** 2))
    energy = float(np.sum(e * e))
    nmse = err / energy if energy > 0 else (0.0 if err == 0 else float("inf"))
    if not nmse <= threshold:
        return f"NMSE = {nmse:.6g} > {threshold:.6g}", nmse
    return "", nmse


class Checker:
    """Runs cases on one device against the reference."""

    def __init__(self, device, seed: int = 0, outputs_hook: Callable | None = None):
        self.device = device
        self.seed = seed
        self.backend = device.init_backend()
        # Test hook: outputs_hook(case, node, device_values) -> values replaces what the device
        # returned before comparison (tests perturb outputs to prove failures are detected).
        self.outputs_hook = outputs_hook
        self.after_compute_hook = None   # test hook: (case, canvas, layout) after compute

    def close(self):
        self.backend.close()

    def _reset_backend(self):
        try:
            self.backend.close()
        except CannError:
            pass
        self.backend = self.device.init_backend()

    def support(self, case: Case) -> Result:
        with Context(256) as ctx:
            builder = Builder(ctx)
            graph = self._graph(ctx, case, builder)
            nodes = _compute_nodes(graph)
            ok = all(self.device.supports_op(n) for n in nodes)
            return Result(self.device.name, "support", case.op, case.name, _types(nodes), ok)

    @staticmethod
    def _graph(ctx, case, builder):
        out = case.build(builder)
        graph = ctx.new_graph(256)
        for tensor in out if isinstance(out, (list, tuple)) else [out]:
            graph.build_forward(tensor)
        return graph

    def run(self, case: Case, index: int = 0) -> Result:
        start = time.perf_counter()
        with Context(256) as ctx:
            builder = Builder(ctx)
            graph = self._graph(ctx, case, builder)
            nodes = _compute_nodes(graph)
            result = Result(self.device.name, "test", case.op, case.name, _types(nodes), True)
            declined = [n for n in nodes if not self.device.supports_op(n)]
            if declined:
                result.supported = False
                result.error = "not supported: " + ", ".join(n.op_desc for n in declined)
            else:
                rng = np.random.default_rng([self.seed, index])
                try:
                    self._run(case, ctx, graph, builder, nodes, rng, result)
                except CannError as exc:
                    result.passed = False
                    result.error = f"device error: {exc}"
                    self._reset_backend()
                except ref.ReferenceError as exc:
                    result.passed = False
                    result.error = f"reference error: {exc}"
        result.time_ms = (time.perf_counter() - start) * 1e3
        return result

    def _layout(self, ctx, buffer_type):
        """Offsets of every base tensor with GUARD_BYTES (or more) of guard before and after."""
        [(layout, total)] = layout_tensors(ctx.tensors, buffer_type, guard=GUARD_BYTES)
        return layout, total

    def _run(self, case, ctx, graph, builder, nodes, rng, result):
        buffer_type = self.device.buffer_type
        layout, total = self._layout(ctx, buffer_type)
        # one byte canvas over the whole buffer writes and checks the guards
        canvas = ctx.new_tensor(TensorType.I8, [total], name="canvas")
        with buffer_type.alloc_buffer(total) as buffer:
            place_tensors(ctx.tensors, layout, buffer)
            canvas.alloc(buffer, 0)
            pattern = rng.integers(0, 256, size=total, dtype=np.uint8)
            canvas.set(pattern.view(np.int8))
            in_tensor = np.zeros(total, dtype=bool)
            for _, offset, size in layout:
                in_tensor[offset:offset + size] = True

            stored = {}
            for item in builder.inputs:
                tensor = item.tensor
                tensor.set(ref.encode(tensor.type, item.init(rng)).reshape(tensor.shape))
                stored[tensor] = tensor.get()     # what the device holds, for the reference
            self.backend.graph_compute(graph)
            self.backend.synchronize()
            if self.after_compute_hook:
                self.after_compute_hook(case, canvas, layout)

            expected = ref.evaluate(graph, {t: v for t, v in stored.items()})
            raw = {}
            worst = None
            for node in nodes:
                base = ref.storage_of(node)
                if base.address not in raw:
                    raw[base.address] = np.ascontiguousarray(base.get()).reshape(-1).view(np.uint8)
                actual = ref.read(raw[base.address], node)
                if self.outputs_hook:
                    actual = self.outputs_hook(case, node, actual)
                threshold = nmse_threshold(case, node, expected[node])
                reason, nmse = compare(expected[node], actual, threshold)
                if worst is None or not nmse <= worst:
                    worst, result.nmse, result.threshold = nmse, nmse, threshold
                if reason:
                    result.passed = False
                    result.error = f"[{node.op_desc}] {reason}"
                    break
            else:
                after = canvas.get().view(np.uint8)
                touched = np.flatnonzero((after != pattern) & ~in_tensor)
                if touched.size:
                    result.passed = False
                    result.error = (f"guard bytes overwritten: {touched.size} bytes, first at "
                                    f"buffer offset {int(touched[0])}")
                else:
                    result.passed = True


# ---- the command ---------------------------------------------------------------------------------------

def _find_devices(names: str | None) -> list:
    devices = Registry().devices
    if not names:
        return devices[:1]
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    found = [d for d in devices if d.name in wanted]
    missing = set(wanted) - {d.name for d in found}
    if missing:
        raise ValueError(f"no device named {', '.join(sorted(missing))} (have "
                         f"{', '.join(d.name for d in devices) or 'none'})")
    return found


def run(mode: str = "test", ops: list[str] | None = None, backends: str | None = None,
        pattern: str | None = None, seed: int = 0, output: str = "console", out=None,
        cases: list[Case] | None = None, checker_factory=Checker) -> int:
    """Run the checker; prints to `out` (stdout) and returns the exit status (1 on a failure)."""
    out = out or sys.stdout
    selected = select_cases(make_cases() if cases is None else cases, ops, pattern)
    if ops and not selected:
        raise ValueError(f"no case matches -o {','.join(ops)}"
                         + (f" -p {pattern}" if pattern else ""))
    devices = _find_devices(backends)
    console = output == "console"
    results: list[Result] = []
    n_ok_backends = 0
    if console:
        print(f"Testing {len(devices)} device(s)\n", file=out)
    for number, device in enumerate(devices, 1):
        if console:
            print(f"Backend {number}/{len(devices)}: {device.name}", file=out)
            print(f"  Device description: {device.description}", file=out)
        checker = checker_factory(device, seed=seed)
        backend_results = []
        try:
            for index, case in enumerate(selected):
                res = checker.support(case) if mode == "support" else checker.run(case, index)
                backend_results.append(res)
                if console:
                    print(_console_line(res), file=out, flush=True)
        finally:
            checker.close()
        results += backend_results
        if mode == "support":
            n_yes = sum(r.supported for r in backend_results)
            if console:
                print(f"  {n_yes}/{len(backend_results)} cases supported\n", file=out)
            n_ok_backends += 1
            continue
        ran = [r for r in backend_results if r.supported]
        n_passed = sum(bool(r.passed) for r in ran)
        ok = n_passed == len(ran)
        n_ok_backends += ok
        if console:
            print(f"  {n_passed}/{len(ran)} tests passed", file=out)
            failing = [r.case for r in ran if not r.passed]
            if failing:
                print("  Failing tests:", file=out)
                for name in failing:
                    print(f"    {name}", file=out)
            print(f"  Backend {device.name}: {'OK' if ok else 'FAIL'}\n", file=out)
    all_ok = n_ok_backends == len(devices)
    if console:
        print(f"{n_ok_backends}/{len(devices)} backends passed", file=out)
        print("OK" if all_ok else "FAIL", file=out)
    elif output == "json":
        json.dump({"mode": mode, "seed": seed, "ok": all_ok,
                   "results": [r.as_dict() for r in results]}, out, indent=1)
        print(file=out)
    else:
        fields = list(Result.__dataclass_fields__)
        writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        for r in results:
            writer.writerow(r.as_dict())
    return 0 if all_ok else 1


def _console_line(res: Result) -> str:
    if res.mode == "support":
        return f"  {res.case}: {'yes' if res.supported else 'no'} [{res.types}]"
    if not res.supported:
        return f"  {res.case}: not supported [{res.backend}]"
    if res.passed:
        return f"  {res.case}: OK"
    return f"  {res.case}: FAIL {res.error}"


def split_ops(value: str | None) -> list[str] | None:
    """'-o' value -> entries; commas inside a case string's parentheses do not split."""
    if not value:
        return None
    entries, depth, current = [], 0, ""
    for ch in value:
        depth += ch in "(["
        depth -= ch in ")]"
        if ch == "," and depth == 0:
            entries.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        entries.append(current.strip())
    return entries
