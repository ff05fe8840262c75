"""The unified KV cache: n_ctx cells shared by every sequence, per-layer K/V tensors on the devices.

Sits between the model (runner/model.py) and the graph builder (runner/arch/): the model
asks for cells for a micro-batch (find_slots), records their positions and sequences (commit),
and fills the graph's inputs from here: the destination cells of SET_ROWS (an index tensor) and
the KQ mask over the first n_kv cells. n_kv is rounded up to N_KV_PAD cells so that decode keeps
one graph (same shapes, same addresses) for many tokens. Shapes in comments are ggml order.
"""

from __future__ import annotations

import numpy as np

from . import backend as be

N_KV_PAD = 512          # n_kv is a multiple of this (or n_ctx): decode reuses one graph (a rebuild
                        # costs ~50 ms, and attention skips the masked cells it adds)
MAX_SEQ = 64             # sequence ids 0..63 (one bit each per cell)

# cache types (llama.cpp's -ctk/-ctv names): SET_ROWS writes them on CANN, and FLASH_ATTN_EXT reads
# F16 there (F32 K/V run it on the CPU reference: runner/sched.py places it)
KV_TYPES = {"f16": be.TensorType.F16, "f32": be.TensorType.F32}
# llama.cpp types the ops here cannot hold, and why (a clear error rather than a silent fallback)
_UNSUPPORTED_KV = {
    "q8_0": "SET_ROWS on CANN writes F32/F16/BF16 rows only and FLASH_ATTN_EXT reads F16 K/V only",
    "q4_0": "SET_ROWS on CANN writes F32/F16/BF16 rows only and FLASH_ATTN_EXT reads F16 K/V only",
    "q4_1": "SET_ROWS on CANN writes F32/F16/BF16 rows only and FLASH_ATTN_EXT reads F16 K/V only",
    "bf16": "FLASH_ATTN_EXT on CANN reads F16 K/V only and the CPU reference has no BF16 attention",
}


def kv_type(value, which: str = "type_k") -> int:
    """A KV cache type from its llama.cpp name ("f16", "f32") or a TensorType; ValueError else."""
    if isinstance(value, str):
        name = value.strip().lower()
    else:
        names = {int(t): n for n, t in KV_TYPES.items()}
        name = names.get(int(value), be.type_name(int(value)) or str(value))
        name = name.lower()
    if name in KV_TYPES:
        return KV_TYPES[name]
    why = _UNSUPPORTED_KV.get(name)
    raise ValueError(f"{which}={value!r}: KV cache type {name} is not supported"
                     + (f" ({why})" if why else "") + f"; supported: {', '.join(KV_TYPES)}")


def ids_out_of_range(ids: np.ndarray, end: int) -> bool:
    """Whether an id of the (non-empty) integer array lies outside 0..end-1; a decode step's few
    ids are compared in Python (two numpy reductions cost more than the list)."""
    if ids.size <= 64:
        values = ids.tolist()
        return min(values) < 0 or max(values) >= end
    return int(ids.min()) < 0 or int(ids.max()) >= end


class ContextFullError(ValueError):
    """The prompt or the generation does not fit in the context (n_ctx cells)."""


class KVCache:
    """Cells with positions and sequence sets; K and V of layer il are [n_embd_gqa, n_ctx] tensors
    of type_k / type_v (F16 by default, or F32: KV_TYPES) with one row per cell, in the buffer type
    `buffer_type_for_layer(il)` returns. buffer_type_for_layer None: the cells only, no tensors
    (the driver of tensor-parallel ranks, whose K and V live in the ranks)."""

    def __init__(self, n_layer: int, n_embd_k_gqa: int, n_embd_v_gqa: int, n_ctx: int,
                 buffer_type_for_layer, type_k=be.TensorType.F16, type_v=be.TensorType.F16):
        type_k, type_v = kv_type(type_k, "type_k"), kv_type(type_v, "type_v")
        self.type_k, self.type_v = type_k, type_v
        self.n_layer, self.n_ctx = n_layer, n_ctx
        self.n_embd_k_gqa, self.n_embd_v_gqa = n_embd_k_gqa, n_embd_v_gqa
        self.ctx = be.Context(max_tensors=2 * n_layer + 4)
        self.k, self.v = [], []
        groups: dict = {}
        for il in range(n_layer if buffer_type_for_layer is not None else 0):
            k = self.ctx.new_tensor(type_k, [n_embd_k_gqa, n_ctx], name=f"cache_k_l{il}")
            v = self.ctx.new_tensor(type_v, [n_embd_v_gqa, n_ctx], name=f"cache_v_l{il}")
            self.k.append(k)
            self.v.append(v)
            groups.setdefault(buffer_type_for_layer(il), []).extend([k, v])
        self.buffers = []
        for buft, tensors in groups.items():
            self.buffers.append(_alloc_group(buft, tensors))
        for buf in self.buffers:       # empty cells must hold finite values (masked, but 0 * NaN)
            buf.clear(0)
        self.pos = np.full(n_ctx, -1, dtype=np.int64)      # -1: empty cell
        self.seq = np.zeros(n_ctx, dtype=np.uint64)        # bit s: the cell belongs to sequence s
        # pointers to both (written in place, never replaced): the C scans take them as they are
        self._pos_c = be.array_pointer(self.pos, "int64_t[]")
        self._seq_c = be.array_pointer(self.seq, "uint64_t[]")
        self._step_bufs = None          # decode_cells' kept arrays and their pointers

    @property
    def nbytes(self) -> int:
        return sum(b.size for b in self.buffers)

    def close(self):
        for b in self.buffers:
            b.close()
        self.buffers = []
        self.ctx.close()

    # ---- cells ---------------------------------------------------------------------------------
    def cells_used(self) -> tuple[int, int, int]:
        """(cells in use, the last used cell, the first empty cell; -1 where there is none): one
        scan in C."""
        return be.kv_cells_used(self._pos_c, self.n_ctx)

    def n_used(self) -> int:
        return self.cells_used()[0]

    def n_kv(self, extra_cells: np.ndarray | None = None) -> int:
        """Cells the attention looks at: past the last used cell, rounded up to N_KV_PAD."""
        last = self.cells_used()[1]
        if extra_cells is not None and len(extra_cells):
            last = max(last, int(np.max(extra_cells)))
        return self._n_kv_upto(last)

    def _n_kv_upto(self, last: int) -> int:
        n = max((last + 1 + N_KV_PAD - 1) // N_KV_PAD * N_KV_PAD, N_KV_PAD)
        return min(n, self.n_ctx)

    def find_slot(self) -> tuple[np.ndarray, int]:
        """A decode step's cell, as find_slots(1), and n_kv() as it is once that cell holds the
        token: one scan of the cells instead of two."""
        _, last, first = self.cells_used()
        if first < 0:
            return self.find_slots(1), self.n_kv()      # ContextFullError
        return np.array([first], dtype=np.int64), self._n_kv_upto(max(last, first))

    def find_slots(self, n_tokens: int) -> np.ndarray:
        """The first n_tokens empty cells (int64), or ContextFullError."""
        if n_tokens == 1:                  # a decode step
            first = self.cells_used()[2]
            if first >= 0:
                return np.array([first], dtype=np.int64)
        free = np.flatnonzero(self.pos < 0)
        if free.size < n_tokens:
            raise ContextFullError(
                f"the context is full: {n_tokens} more tokens do not fit in n_ctx={self.n_ctx} "
                f"({self.n_used()} cells in use); use a larger n_ctx or a shorter prompt")
        return free[:n_tokens].astype(np.int64)

    def decode_cells(self, pos: list[int], seq_ids: list[int]):
        """A decode step's bookkeeping in one C pass, for tokens at positions `pos` of sequences
        `seq_ids` (Python ints, one token per sequence): (cells in use before the step, the
        tokens' cells (int64), n_kv once they hold the tokens, the step's KQ mask as mask()
        gives it). The cells are committed; when fewer are empty than there are tokens nothing
        is, and the cells, n_kv and mask are None. The cells and mask lie in arrays this cache
        keeps (sized for the most tokens a step has had), valid until its next decode_cells."""
        if min(seq_ids) < 0 or max(seq_ids) >= MAX_SEQ:
            raise ValueError(f"sequence ids must be in 0..{MAX_SEQ - 1}")
        n = len(pos)
        bufs = self._step_bufs
        if bufs is None or bufs[0].size < n:
            cells, mask = np.empty(n, dtype=np.int64), np.empty(n * self.n_ctx, dtype=np.float16)
            bufs = self._step_bufs = (cells, mask, be.array_pointer(cells, "int64_t[]"),
                                      be.array_pointer(mask, "uint16_t[]"), {})
        cells, mask, cells_c, mask_c, views = bufs
        used, n_kv = be.kv_decode_step(self._pos_c, self._seq_c, self.n_ctx, pos, seq_ids,
                                       N_KV_PAD, cells_c, mask_c)
        if n_kv < 0:
            return used, None, None, None
        view = views.get((n, n_kv))        # (cells, mask) of this shape, made once
        if view is None:
            view = views[n, n_kv] = (cells[:n], mask[:n * n_kv].reshape(n, n_kv))
        return used, view[0], n_kv, view[1]

    def commit(self, cells: np.ndarray, pos, seq_ids) -> None:
        """Record that `cells` now hold tokens at positions `pos` of sequences `seq_ids`."""
        if len(cells) == 1:                # a decode step's one cell, with Python ints
            seq_id = int(seq_ids[0])
            if not 0 <= seq_id < MAX_SEQ:
                raise ValueError(f"sequence ids must be in 0..{MAX_SEQ - 1}")
            cell = int(cells[0])
            self.pos[cell] = int(pos[0])
            self.seq[cell] = 1 << seq_id
            return
        pos = np.asarray(pos, dtype=np.int64)
        seq_ids = np.asarray(seq_ids, dtype=np.int64)
        if seq_ids.size and ids_out_of_range(seq_ids, MAX_SEQ):
            raise ValueError(f"sequence ids must be in 0..{MAX_SEQ - 1}")
        self.pos[cells] = pos
        self.seq[cells] = np.left_shift(np.uint64(1), seq_ids.astype(np.uint64))

    def release(self, cells: np.ndarray) -> None:
        """Undo commit() (a failed compute must not leave half-written cells visible)."""
        self.pos[cells] = -1
        self.seq[cells] = 0

    def mask(self, n_kv: int, pos, seq_ids, n_swa: int = 0) -> np.ndarray:
        """KQ mask F16 [n_kv, n_tokens] (numpy [n_tokens, n_kv]): 0 where token t may attend to
        cell j (same sequence, cell position <= the token's), -inf elsewhere (other sequences,
        future positions, empty cells). n_swa > 0: the sliding window of local attention layers
        also hides cells n_swa or more positions behind the token (llama.cpp's standard SWA)."""
        if type(pos) is not list or type(seq_ids) is not list:    # a decode step's Python ints
            pos = np.ascontiguousarray(pos, dtype=np.int64)          # go as they are
            seq_ids = np.ascontiguousarray(seq_ids, dtype=np.int64)
        if not 0 <= n_kv <= self.n_ctx:
            raise ValueError(f"n_kv={n_kv} is not in 0..{self.n_ctx}")
        return be.kv_mask(self._pos_c, self._seq_c, n_kv, pos, seq_ids, n_swa)

    # ---- sequence operations (llama_memory_seq_*) ------------------------------------------------
    def clear(self) -> None:
        self.pos[:] = -1
        self.seq[:] = 0

    def _range(self, seq_id: int, p0, p1) -> np.ndarray:
        p0 = 0 if p0 is None or p0 < 0 else p0
        p1 = np.iinfo(np.int64).max if p1 is None or p1 < 0 else p1
        sel = (self.pos >= p0) & (self.pos < p1)
        if seq_id is not None and seq_id >= 0:
            sel &= (self.seq & np.uint64(1 << seq_id)) != 0
        return sel

    def seq_rm(self, seq_id: int, p0: int | None = None, p1: int | None = None) -> None:
        """Remove positions [p0, p1) of seq_id (seq_id < 0: of every sequence; None/-1 bounds are
        open). Cells no sequence uses any more become empty."""
        sel = self._range(seq_id, p0, p1)
        if seq_id is None or seq_id < 0:
            self.seq[sel] = 0
        else:
            self.seq[sel] &= ~np.uint64(1 << seq_id)
        self.pos[self.seq == 0] = -1

    def seq_cp(self, src: int, dst: int, p0: int | None = None, p1: int | None = None) -> None:
        """Positions [p0, p1) of src also belong to dst (shared cells: a common prompt prefix)."""
        sel = self._range(src, p0, p1)
        self.seq[sel] |= np.uint64(1 << dst)

    def seq_keep(self, seq_id: int) -> None:
        """Drop every sequence but seq_id."""
        bit = np.uint64(1 << seq_id)
        self.seq &= bit
        self.pos[self.seq == 0] = -1

    def seq_pos_max(self, seq_id: int) -> int:
        """The largest position of seq_id in the cache, -1 if it has none."""
        sel = (self.seq & np.uint64(1 << seq_id)) != 0
        return int(self.pos[sel].max()) if sel.any() else -1


def _alloc_group(buft: be.BufferType, tensors) -> be.Buffer:
    try:
        return be.alloc_tensors(tensors, buft)[0]
    except be.CannError as exc:
        total = sum(t for _, t in be.layout_tensors(tensors, buft))
        raise MemoryError(f"cannot allocate the KV cache ({total / 2**20:.1f} MiB on "
                          f"{buft.name}): {exc}; use a smaller n_ctx") from None
