"""Tensor parallelism, Megatron style: how a model splits over N ranks and one rank's part.

Between the loader and the graph builder: plan_layout() splits the attention heads by KV-head
group (each rank keeps whole GQA groups, so attention stays local), the FFN columns in block-
aligned parts and the vocabulary in equal row shards (the last padded with zero rows); a Shard is
one rank's hparams, its weights (sliced from the GGUF while they upload) and the TPGraph that
makes arch/llama.py add the collectives. TPRank runs a shard on its process's one device with an
HCCL communicator; runner/tp_model.py drives the ranks as Ray actors.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from dataclasses import dataclass

import numpy as np

from .arch import TPGraph, get as get_arch
from .ggml_types import GGML_QUANT_SIZES, GGMLQuantizationType
from .loader import layer_index

__all__ = ["TPError", "Layout", "plan_layout", "Shard", "TPRank"]

T = GGMLQuantizationType
FF_ALIGN = 32           # FFN parts start at multiples of the device types' block (Q8_0, Q4_x)


class TPError(ValueError):
    """A model or a rank count tensor parallelism cannot split (the message says why)."""


@dataclass(frozen=True)
class Layout:
    """The split of a model over n_ranks: per rank, its KV heads [start, end) (and the query
    heads of their groups), its FFN columns [start, end) and its vocabulary rows."""
    n_ranks: int
    kv_heads: tuple         # ((start, end), ...) per rank
    q_per_kv: int           # query heads per KV head (GQA group size)
    ff: tuple               # ((start, end), ...) per rank
    vocab_rows: int         # rows of every rank's vocabulary shard (n_vocab / n_ranks, rounded up)
    n_vocab: int


def plan_layout(hp, n_ranks: int) -> Layout:
    """Split hp's model over n_ranks, or TPError naming what prevents it."""
    n = int(n_ranks)
    if n < 1:
        raise TPError(f"--tensor-parallel must be at least 1, got {n}")
    arch = get_arch(hp.arch)
    if arch.moe:
        raise TPError(f"tensor parallelism does not split mixture-of-experts FFNs ({hp.arch}); "
                      f"run it on one device or split its layers with --device CANN0,CANN1")
    if hp.n_head % hp.n_head_kv:
        raise TPError(f"{hp.n_head} attention heads do not form groups of {hp.n_head_kv} KV heads")
    if n > hp.n_head_kv:
        raise TPError(f"--tensor-parallel {n}: the model has {hp.n_head_kv} KV heads "
                      f"({hp.n_head} query heads); each rank needs whole KV-head groups, so at "
                      f"most {hp.n_head_kv} ranks")
    align = FF_ALIGN if hp.n_ff % FF_ALIGN == 0 else 1
    units = hp.n_ff // align
    if units < n:
        raise TPError(f"--tensor-parallel {n}: the FFN width {hp.n_ff} has fewer than {n} "
                      f"parts of {align} columns")
    if hp.n_vocab < n:
        raise TPError(f"--tensor-parallel {n}: the vocabulary has only {hp.n_vocab} tokens")
    kv = tuple((r * hp.n_head_kv // n, (r + 1) * hp.n_head_kv // n) for r in range(n))
    ff = tuple((r * units // n * align, (r + 1) * units // n * align) for r in range(n))
    return Layout(n, kv, hp.n_head // hp.n_head_kv, ff, -(-hp.n_vocab // n), hp.n_vocab)


@dataclass(frozen=True)
class _Slice:
    """How one GGUF tensor becomes a rank's tensor: rows (ne[1], or the elements of a 1-D tensor)
    taken as ranges in order, a column range of ne[0] (or None: all), zero rows appended."""
    rows: tuple = ()        # ((start, count), ...); () keeps every row
    cols: tuple | None = None
    pad_rows: int = 0


class Shard:
    """One rank's part of a model: its hparams (heads, KV heads, FFN width, vocabulary rows of
    the shard), the TPGraph for the graph builder and the weights of the shard."""

    def __init__(self, hp, layout: Layout, rank: int):
        if not 0 <= rank < layout.n_ranks:
            raise TPError(f"rank {rank} is not in 0..{layout.n_ranks - 1}")
        self.layout, self.rank, self.full = layout, rank, hp
        kv0, kv1 = layout.kv_heads[rank]
        self.kv_heads = (kv0, kv1)
        self.q_heads = (kv0 * layout.q_per_kv, kv1 * layout.q_per_kv)
        self.ff = layout.ff[rank]
        self.vocab_start = rank * layout.vocab_rows
        self.vocab_count = max(0, min(layout.vocab_rows, hp.n_vocab - self.vocab_start))
        self.hparams = dataclasses.replace(
            hp, n_head=self.q_heads[1] - self.q_heads[0], n_head_kv=kv1 - kv0,
            n_ff=self.ff[1] - self.ff[0], n_vocab=layout.vocab_rows)
        self.graph_info = TPGraph(layout.n_ranks, layout.vocab_rows)

    def __repr__(self):
        return (f"<shard {self.rank}/{self.layout.n_ranks}: heads {self.q_heads}, KV heads "
                f"{self.kv_heads}, FFN {self.ff}, vocabulary [{self.vocab_start}, "
                f"{self.vocab_start + self.vocab_count})>")

    # ---- which part of each tensor --------------------------------------------------------------
    def slice_of(self, name: str) -> _Slice:
        """The part of GGUF tensor `name` this rank holds (module doc: Megatron's split)."""
        hp, d = self.full, self.full.head_dim
        q = (self.q_heads[0] * d, (self.q_heads[1] - self.q_heads[0]) * d)
        kv = (self.kv_heads[0] * d, (self.kv_heads[1] - self.kv_heads[0]) * d)
        ff = (self.ff[0], self.ff[1] - self.ff[0])
        vocab = _Slice(rows=((self.vocab_start, self.vocab_count),),
                       pad_rows=self.layout.vocab_rows - self.vocab_count)
        arch = get_arch(hp.arch)
        role, suffix = self._role(arch, name)
        if role in ("token_embd", "output"):
            return vocab
        if role in ("attn_q", "attn_k", "attn_v"):
            return _Slice(rows=(q if role == "attn_q" else kv,))
        if role == "attn_qkv":              # rows [Q | K | V]
            n_q, n_kv = hp.n_head * d, hp.n_head_kv * d
            return _Slice(rows=(q, (n_q + kv[0], kv[1]), (n_q + n_kv + kv[0], kv[1])))
        if role == "attn_output" and suffix == "weight":
            return _Slice(cols=q)
        if role in ("ffn_gate", "ffn_up"):
            if role == "ffn_up" and arch.fused_gate_up:     # rows [gate | up]
                return _Slice(rows=(ff, (hp.n_ff + ff[0], ff[1])))
            return _Slice(rows=(ff,))
        if role == "ffn_down" and suffix == "weight":
            return _Slice(cols=ff)
        return _Slice()                     # norms, rope_freqs, output biases: every rank

    @staticmethod
    def _role(arch, name: str) -> tuple[str | None, str]:
        il = layer_index(name)
        for role, pattern in arch.tensor_names.items():
            stem = pattern.format(bid=il)
            if name.startswith(stem + "."):
                return role, name[len(stem) + 1:]
        return None, ""

    # ---- the weights ---------------------------------------------------------------------------
    def load_weights(self, gguf, buffer_type, convert=None, log=print, check=True):
        """The shard's weights on `buffer_type`, uploaded row chunk by row chunk from the map
        (converted as weights.load_weights converts: Q4_K onto Q4_1, other types to Q8_0, or
        every matrix to `convert`); a column slice not on a block boundary of the target type
        keeps F16. -> weights.WeightStore."""
        from . import backend
        from .weights import CHUNK_BYTES, WeightStore, parse_type, target_type
        if convert is not None:
            convert = parse_type(convert)
        ctx = backend.Context(max_tensors=len(gguf.tensors) + 8)
        tensors, plans, converted = {}, {}, Counter()
        try:
            for name, info in gguf.tensors.items():
                sl = self.slice_of(name)
                ne = _sliced_ne(info, sl)
                dst = target_type(dataclasses.replace(info, ne=ne), convert)
                if sl.cols is not None:
                    block = GGML_QUANT_SIZES[T(dst)][0]
                    if sl.cols[0] % block or sl.cols[1] % block:
                        dst = int(T.F16)
                tensors[name] = ctx.new_tensor(dst, ne, name)
                plans[name] = sl
            buffers = backend.alloc_tensors(list(tensors.values()), buffer_type,
                                            max_size=buffer_type.max_size,
                                            usage=backend.BufferUsage.WEIGHTS)
        except BaseException:
            ctx.close()
            raise
        store = WeightStore(ctx, tensors, buffers, {})
        try:
            for name, info in gguf.tensors.items():
                _upload_slice(tensors[name], info, plans[name], CHUNK_BYTES, check)
                if int(tensors[name].type) != info.type:
                    converted[(info.type, int(tensors[name].type))] += 1
        except BaseException:
            store.close()
            raise
        if converted and log is not None:
            what = ", ".join(f"{n} {T(s).name} -> {T(d).name}"
                             for (s, d), n in sorted(converted.items()))
            log(f"cann-llm: rank {self.rank}: converted {sum(converted.values())} tensors at "
                f"load ({what})")
        store.stats = {"bytes_device": store.nbytes, "converted": dict(converted)}
        return store


def _sliced_ne(info, sl: _Slice) -> tuple:
    ne = list(info.ne)
    axis = 0 if len(ne) == 1 else 1
    if sl.rows:
        ne[axis] = sum(count for _, count in sl.rows) + sl.pad_rows
    if sl.cols is not None:
        ne[0] = sl.cols[1]
    return tuple(ne)


def _upload_slice(tensor, info, sl: _Slice, chunk_bytes: int, check: bool) -> None:
    """Stream the rows of `sl` from info.data into tensor: each chunk of whole source rows is
    checked for non-finite values, converted to the tensor's type, cut to the column range and
    written after the previous one; the padding rows are zeros (0 in every kept type)."""
    from . import backend
    from .weights import _check_finite
    if len(info.ne) > 2:
        raise ValueError(f"{info.name}: tensor parallelism slices 1-D and 2-D tensors only")
    one_d = len(info.ne) == 1
    row_len = 1 if one_d else info.ne[0]          # a 1-D tensor: rows of one element
    n_rows = info.n_elements // row_len
    row_info = dataclasses.replace(info, ne=(row_len, n_rows))
    src_block, src_size = GGML_QUANT_SIZES[T(info.type)]
    dst_type = int(tensor.type)
    dst_block, dst_size = GGML_QUANT_SIZES[T(dst_type)]
    if row_len % src_block or row_len % dst_block:
        raise ValueError(f"{info.name}: rows of {row_len} elements are not whole blocks")
    src_row, dst_row = row_len // src_block * src_size, row_len // dst_block * dst_size
    c0, cn = sl.cols if sl.cols is not None else (0, row_len)
    b0, bn = c0 // dst_block * dst_size, cn // dst_block * dst_size
    rows = sl.rows or ((0, n_rows),)
    step = max(1, chunk_bytes // max(src_row, dst_row))
    offset = 0
    for start, count in rows:
        for r in range(start, start + count, step):
            n = min(step, start + count - r)
            chunk = info.data[r * src_row:(r + n) * src_row]
            if check:
                _check_finite(row_info, chunk, r, n)
            if dst_type != info.type:
                out = np.empty(n * dst_row, dtype=np.uint8)
                backend.convert(info.type, chunk, dst_type, out, n * row_len)
                chunk = out
            if bn != dst_row:
                chunk = np.ascontiguousarray(
                    np.frombuffer(chunk, dtype=np.uint8).reshape(n, dst_row)[:, b0:b0 + bn])
            tensor.write_bytes(chunk, offset)
            offset += n * bn
    if sl.pad_rows:
        tensor.write_bytes(np.zeros(sl.pad_rows * bn, dtype=np.uint8), offset)


class TPRank:
    """One rank in its own process: the shard of the model on the process's one device (CANN0:
    under Ray, ASCEND_RT_VISIBLE_DEVICES leaves it only its NPU) with an HCCL communicator.

    rank 0 makes the RootInfo (root_info), every rank joins with it (join, all at once: it
    returns when all have joined), then every rank runs the same forward() calls; rank 0 returns
    the logits (or embeddings), the others None."""

    def __init__(self, path, n_ranks: int, rank: int, **load_kwargs):
        from .loader import open_gguf
        from .model import Model
        hp = open_gguf(path).hparams
        self.rank, self.n_ranks = int(rank), int(n_ranks)
        self.shard = Shard(hp, plan_layout(hp, n_ranks), self.rank)
        self.model = Model(path, device="CANN0", shard=self.shard, **load_kwargs)
        self.backend = self.model.sched.slots[0].backend

    def root_info(self) -> bytes:
        return self.backend.comm_root_info()

    def visible_device(self) -> int:
        """The host's number of this rank's device (the first id of ASCEND_RT_VISIBLE_DEVICES,
        which Ray sets), 0 without the variable."""
        ids = os.environ.get("ASCEND_RT_VISIBLE_DEVICES", "").split(",")
        return int(ids[0]) if ids[0].strip().isdigit() else 0

    def join(self, root_info: bytes) -> int:
        self.backend.comm_init(self.n_ranks, self.rank, root_info)
        return self.rank

    def forward(self, request):
        """request = (n_tokens, n_kv, n_outputs, embeddings, values): one micro-batch the
        driver prepared (global token ids, positions, masks, cells, output rows). -> rank 0:
        float32 [n_outputs, n_vocab] logits or [n_outputs, n_embd] embeddings; others None."""
        n_tokens, n_kv, n_outputs, embeddings, values = request
        values = dict(values)
        tokens = np.asarray(values["inp_tokens"])
        sh = self.shard
        inside = (tokens >= sh.vocab_start) & (tokens < sh.vocab_start + sh.vocab_count)
        values["inp_tokens"] = np.where(inside, tokens - sh.vocab_start, 0).astype(np.int32)
        values["inp_embd_mask"] = inside.astype(np.float32).reshape(n_tokens, 1)
        _, plan = self.model._get_plan(n_tokens, n_kv, n_outputs, embeddings=embeddings)
        result = plan.run(values, read_outputs=self.rank == 0)
        if self.rank != 0:
            return None
        if embeddings:
            return result["embd"].reshape(-1, sh.full.n_embd).copy()
        width = sh.layout.vocab_rows * sh.layout.n_ranks
        return np.ascontiguousarray(result["logits"].reshape(-1, width)[:, :sh.full.n_vocab])

    def describe(self) -> str:
        return f"{self.shard!r}\n{self.model.describe()}"

    def close(self) -> None:
        self.model.close()
