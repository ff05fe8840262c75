"""cann_llm.load(...) -> Model: a GGUF model on CANN devices (or the CPU reference), ready to
tokenize, score (logits), embed, generate and chat.

The top of the runner: the loader opens the file, weights.py uploads the weights (layers spread
over the devices given), kv_cache.py holds the context, arch/ builds the forward graph of a
micro-batch and sched.py splits, allocates and runs it. Built graphs are kept by shape and kind
(n_tokens, n_kv, n_outputs, logits or embeddings): decode reuses one graph (and its addresses)
for N_KV_PAD tokens.
"""

from __future__ import annotations

import gc
import math
import os
import re
import time
from collections import OrderedDict
from typing import Iterator

import numpy as np

from . import backend as be
from . import profiler
from .arch import build_graph, get as get_arch
from .kv_cache import MAX_SEQ, ContextFullError, KVCache, ids_out_of_range, kv_type
from .loader import POOLING_TYPES, open_gguf
from .sampler import SamplingParams
from .text_stream import TextStream
from .sched import DeviceSlot, Scheduler

__all__ = ["load", "Model", "ContextFullError", "NonFiniteLogitsError", "Batch", "parse_devices"]

_MAX_GRAPHS = 32       # decode graphs for each batch size a server runs (1..slots) x n_kv steps
_SP = SamplingParams()           # the sampling defaults generate() shows in its signature


def parse_devices(device) -> list[str]:
    """Device names from "CANN0", "CANN0,CANN1", "CPU" or a list of them (load's device=; the
    CLI's --device goes through it too): upper case, CPU alone, each device once."""
    if isinstance(device, str):
        names = [d.strip().upper() for d in device.split(",") if d.strip()]
    else:
        names = [str(d).upper() for d in device]
    if not names:
        raise ValueError("no device given (expected CANN0, CANNn, CPU or a list of CANN devices)")
    if "CPU" in names and len(names) > 1:
        raise ValueError(f"device {device!r}: CPU cannot be combined with other devices")
    for n in names:
        if n != "CPU" and not (n.startswith("CANN") and n[4:].isdigit()):
            raise ValueError(f"unknown device {n!r} (expected CANN0, CANNn or CPU)")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"device {device!r}: {', '.join(repeated)} is listed more than once")
    return names


_pool_threads: int | None = None     # acl_host's pool size, fixed by the first Model


def _env_threads() -> int:
    """The pool size acl_host takes from CANN_LLM_THREADS (threadpool.c: else the online cores,
    clamped to 1..1024)."""
    m = re.match(r"\s*([+-]?\d+)", os.environ.get("CANN_LLM_THREADS", ""))   # as strtol
    n = int(m.group(1)) if m else 0
    if n <= 0:
        n = os.cpu_count() or 1
    return max(1, min(n, 1024))


def _claim_threads(n_threads) -> None:
    """acl_host runs its kernels on one pool per process, sized once at its first job (from
    CANN_LLM_THREADS). The first Model sets its size (n_threads, else the variable or the cores);
    a later Model asking for another size is a ValueError rather than silently ignored."""
    global _pool_threads
    if n_threads is not None and int(n_threads) < 1:
        raise ValueError(f"n_threads must be >= 1, got {n_threads}")
    if be.runtime_name() != "acl_host":      # the real CANN runtime has no host thread pool
        return
    if _pool_threads is None:
        if n_threads is not None:
            os.environ["CANN_LLM_THREADS"] = str(int(n_threads))
        _pool_threads = _env_threads()
    elif n_threads is not None and int(n_threads) != _pool_threads:
        raise ValueError(f"n_threads={int(n_threads)}, but this process's acl_host thread pool "
                         f"already has {_pool_threads} threads: the pool is per process, sized "
                         f"once by the first model loaded (or CANN_LLM_THREADS); load with "
                         f"n_threads={_pool_threads} (or None), or use another process")


class Batch:
    """Tokens of one or more sequences for one forward pass (llama_batch): token ids, their
    positions, their sequence ids, and which rows want logits."""

    def __init__(self, tokens, pos, seq_ids, logits):
        self.tokens = np.asarray(tokens, dtype=np.int32)
        self.pos = np.asarray(pos, dtype=np.int32)
        self.seq_ids = np.asarray(seq_ids, dtype=np.int64)
        self.logits = np.asarray(logits, dtype=bool)
        n = len(self.tokens)
        if not (len(self.pos) == len(self.seq_ids) == len(self.logits) == n):
            raise ValueError("batch fields must have the same length")

    def __len__(self):
        return len(self.tokens)

    @classmethod
    def sequence(cls, tokens, start_pos: int = 0, seq_id: int = 0, all_logits=False):
        n = len(tokens)
        out = np.zeros(n, dtype=bool)
        if all_logits:
            out[:] = True
        elif n:
            out[-1] = True
        return cls(tokens, np.arange(start_pos, start_pos + n), np.full(n, seq_id), out)


class NonFiniteLogitsError(RuntimeError):
    """A forward pass produced NaN or inf logits: never sampled as a token."""


def load(path=None, device="CANN0", n_ctx=4096, n_threads=None, n_batch=512, flash_attn=True,
         convert=None, verbose=False, log=None, check_weights=True,
         chat_template=None, type_k="f16", type_v="f16", n_cells=None,
         tensor_parallel=1, use_mmap=True, fuse_weights=True) -> "Model":
    """Load a GGUF model (path None: the default model, fetched on first use); check_weights:
    refuse weights with NaN/inf values or scales (a corrupt file) at load; chat_template: a
    Jinja template source that replaces the GGUF's tokenizer.chat_template; type_k / type_v:
    the KV cache types, "f16" or "f32" (llama.cpp's -ctk / -ctv); n_ctx: one sequence's
    context; n_cells: the KV cells all sequences share (default n_ctx; a server holds several
    sequences); tensor_parallel N > 1: the model split over N ranks, Ray actors with one device
    each (cann_llm.tp_model.TPModel; needs the `scale` extra); use_mmap: where the device's
    memory is the host's (acl_host), weights kept as the file holds them are read from its map
    rather than copied (llama.cpp's --no-mmap is use_mmap=False; tensor-parallel ranks always
    copy their slices, so there use_mmap changes nothing); fuse_weights: load each layer's Q, K
    and V, and its FFN gate and up, as one tensor where they share a type (Arch.weight_fusions:
    fewer, larger products; off, the graph's nodes are llama.cpp's, as `cann-llm diff` wants
    them; tensor-parallel ranks never fuse)."""
    if path is None:
        from .model_store import default_model_path
        path = default_model_path(download=True)
    if int(tensor_parallel) != 1:
        from .tp_model import TPModel
        return TPModel(path, int(tensor_parallel), device=device, n_ctx=n_ctx,
                       n_threads=n_threads, n_batch=n_batch, flash_attn=flash_attn,
                       convert=convert, verbose=verbose, log=log, check_weights=check_weights,
                       chat_template=chat_template, type_k=type_k, type_v=type_v,
                       n_cells=n_cells)
    return Model(path, device=device, n_ctx=n_ctx, n_threads=n_threads, n_batch=n_batch,
                 flash_attn=flash_attn, convert=convert, verbose=verbose, log=log,
                 check_weights=check_weights, chat_template=chat_template, type_k=type_k,
                 type_v=type_v, n_cells=n_cells, use_mmap=use_mmap, fuse_weights=fuse_weights)


_ONE_ROW = np.zeros(1, dtype=np.int32)     # a one-token micro-batch's output row (read-only)
_ONE_ROW.flags.writeable = False


def _check_logits(logits: np.ndarray, pos, seq_ids, path, what="logits", out_ids=None) -> None:
    """NonFiniteLogitsError naming the first row (position, sequence) with a NaN or inf; row r
    of `logits` is token out_ids[r] of (pos, seq_ids) (None: token r), looked up only then."""
    first = be.first_nonfinite_f32(logits)     # one pass in C, no temporaries
    if first >= 0:
        raise _nonfinite_error(logits, first // logits.shape[1], pos, seq_ids, path, what, out_ids)


def _scan_logits(logits: np.ndarray, pos, seq_ids, path, banned, data=None) -> list:
    """_check_logits for a decode step whose rows are its tokens, one backend.logits_scan pass
    per row that also gives the row's greedy pick without the ids banned[r] (None: no pick
    wanted, the row is only checked); returns the picks (None where none was wanted). data:
    backend.array_pointer(logits), when the caller keeps one."""
    picks = []
    n_rows, width = logits.shape
    for r in range(n_rows):
        bans = banned[r]
        first, best = be.logits_scan(logits[r], bans) if data is None else \
            be.logits_scan_at(data, r * width, width, bans)
        if first >= 0:
            raise _nonfinite_error(logits, r, pos, seq_ids, path, "logits", None)
        picks.append(None if bans is None else best)
    return picks


_PICK_OUTPUTS = ("pick", "verdict")     # what a greedy decode step reads when the picks stand
_PICK_CHUNK = 16384                     # most logits per partial sum of the verdict


def _add_pick(fg, n_vocab: int) -> dict:
    """The greedy decode graph's extra outputs, after the logits F32 [n_vocab, n_outputs]:
    "pick", ARGMAX of each row (I32 [n_outputs]: the first largest value, the lowest id, as
    backend.logits_scan picks), and "verdict", SUM_ROWS of the rows cut into `parts` equal
    pieces (F32 [1, parts * n_outputs]; parts: the least divisor of n_vocab with pieces of at
    most _PICK_CHUNK values, else 1): NaN and inf carry into a sum, so all of them finite
    proves every logit finite (a piece that overflows only sends the step to the host's scan).
    The pieces are independent reductions the device can run in parallel."""
    ctx, graph, logits = fg.ctx, fg.graph, fg.logits
    n_out = logits.ne[1]
    parts = next((d for d in range(-(-n_vocab // _PICK_CHUNK), 65) if n_vocab % d == 0), 1)
    pick = ctx.argmax(logits)
    pick.name = "result_pick"
    verdict = ctx.sum_rows(ctx.reshape(logits, [n_vocab // parts, parts * n_out]))
    verdict.name = "result_verdict"
    for t in (pick, verdict):
        t.mark_output()
        graph.build_forward(t)
    return {"pick": pick, "verdict": verdict}


def _device_picks(picks: list, verdict: list, banned: list) -> list | None:
    """The device's greedy picks (a Python int per row) when they are the ones
    backend.logits_scan would give: the verdict's partial sums (Python floats) are all finite
    (so is every logit) and no row's pick is one of its banned ids (a pick outside them is
    also the best among the ids left: the lowest id of the same largest value). None: the
    host decides. Python numbers, no numpy: right after a decode step the caches hold the
    kernels' data, and each numpy call then costs several microseconds (a ufunc tens)."""
    if not all(map(math.isfinite, verdict)):
        return None
    for p, bans in zip(picks, banned):
        if bans.size and p in bans.tolist():
            return None
    return picks


def _nonfinite_error(logits: np.ndarray, row: int, pos, seq_ids, path, what, out_ids):
    n_bad = int((~np.isfinite(logits[row])).sum())
    token = row if out_ids is None else int(out_ids[row])
    return NonFiniteLogitsError(
        f"the {what} at position {int(pos[token])} (sequence {int(seq_ids[token])}) hold {n_bad} "
        f"NaN/inf values: a weight or an op went bad; `cann-llm diff {path} -p PROMPT` finds "
        f"the first tensor that did")


class Model:
    """A loaded model. Not thread-safe: one forward pass at a time."""

    def __init__(self, path, device="CANN0", n_ctx=4096, n_threads=None, n_batch=512,
                 flash_attn=True, convert=None, verbose=False, log=None, decline=(),
                 check_weights=True, chat_template=None, type_k="f16", type_v="f16",
                 n_cells=None, shard=None, use_mmap=True, fuse_weights=True):
        """shard: one tensor-parallel rank's part of the model (tensor_parallel.Shard): its
        heads, FFN columns and vocabulary rows on its one device, its graphs with collectives;
        driven by tensor_parallel.TPRank, not by decode()."""
        # The load makes many objects that all live on (the graphs, the weights' records): the
        # cyclic collector would scan them again and again; it runs again once the load is
        # done.
        collecting = gc.isenabled()
        gc.disable()
        try:
            self._load(path, device, n_ctx, n_threads, n_batch, flash_attn, convert, verbose, log,
                       decline, check_weights, chat_template, type_k, type_v, n_cells, shard,
                       use_mmap, fuse_weights)
        finally:
            if collecting:
                gc.enable()

    def _load(self, path, device, n_ctx, n_threads, n_batch, flash_attn, convert, verbose, log,
              decline, check_weights, chat_template, type_k, type_v, n_cells, shard, use_mmap,
              fuse_weights):
        t0 = time.perf_counter()
        prof = profiler.from_env()          # CANN_LLM_PROFILE: its clock starts before the load
        load_start_us = prof.now_us() if prof is not None else 0.0
        type_k, type_v = kv_type(type_k, "type_k"), kv_type(type_v, "type_v")   # before the load
        _claim_threads(n_threads)
        self._init_front(path, n_ctx, n_batch, n_cells, flash_attn, chat_template, log, verbose)
        hp, n_cells = self.hparams, self.n_cells
        self._shard = shard
        self._graph_hp = hp if shard is None else shard.hparams   # what the graphs are built of
        self._tp_graph = None if shard is None else shard.graph_info

        names = parse_devices(device)
        if shard is not None and (len(names) != 1 or names == ["CPU"]):
            raise ValueError(f"a tensor-parallel rank runs on one CANN device, not {device!r}")
        self.devices = names
        registry = be.Registry()
        by_name = {d.name: d for d in registry.devices}
        if names == ["CPU"]:
            host = by_name["CANN0"].host_buffer_type if "CANN0" in by_name else None
            if host is None:
                raise ValueError("device CPU needs a host buffer type (unset GGML_CANN_NO_PINNED)")
            slots = []
            layer_buft = [host] * hp.n_layer
            out_buft = host
        else:
            missing = [n for n in names if n not in by_name]
            if missing:
                raise ValueError(f"no device {missing[0]} (available: "
                                 f"{', '.join(sorted(by_name)) or 'none'}, CPU)")
            slots = [DeviceSlot(by_name[n], decline=decline) for n in names]
            n_dev = len(slots)
            layer_buft = [slots[il * n_dev // hp.n_layer].buffer_type for il in range(hp.n_layer)]
            out_buft = slots[-1].buffer_type
        self.sched = Scheduler(slots)
        # greedy decode steps take their picks on the device (decode_step) where the decode graph
        # runs on one device alone; False: every step reads its logits and scans them on the host
        self.pick_on_device = len(slots) == 1 and shard is None

        from .loader import layer_index
        from .weights import load_weights

        def buffer_type_for(name):
            il = layer_index(name)
            return out_buft if il is None else layer_buft[il]

        try:
            if shard is None:
                from .weight_cache import cache_from_env
                self.weights = load_weights(self.gguf, buffer_type_for, convert=convert,
                                            log=self._log, check=check_weights,
                                            threads=_pool_threads or n_threads,
                                            use_mmap=use_mmap,
                                            cache=cache_from_env() if use_mmap else None,
                                            fusions=get_arch(hp.arch).weight_fusions(hp)
                                            if fuse_weights else ())
            else:
                self.weights = shard.load_weights(self.gguf, out_buft, convert=convert,
                                                  log=self._log, check=check_weights)
        except BaseException as exc:
            self.sched.close()
            if isinstance(exc, be.CannError) and exc.status == be.Status.ERR_OUT_OF_MEMORY:
                raise MemoryError(f"{path}: the weights do not fit in device memory: "
                                  f"{exc.message}") from None
            raise
        ghp = self._graph_hp
        self.kv = KVCache(hp.n_layer, ghp.head_dim * ghp.n_head_kv, ghp.head_dim * ghp.n_head_kv,
                          n_cells, lambda il: layer_buft[il], type_k=type_k, type_v=type_v)
        self._graphs: OrderedDict = OrderedDict()
        self._warm_up_op_caches()
        # reserve the worst case (a full micro-batch over the whole context) so later graphs fit
        n_kv = self.kv.n_kv(np.array([n_cells - 1]))
        with profiler.span("reserve compute", n_tokens=self.n_batch, n_kv=n_kv):
            fg = self._build_graph(self.n_batch, n_kv, self.n_batch)
            self.sched.reserve_for(fg.graph, fg.inputs, {"logits": fg.logits})
        self._timings["load_ms"] = (time.perf_counter() - t0) * 1e3
        if prof is not None:        # device nodes are timed from here on
            for slot in self.sched.slots[:-1]:
                slot.backend.set_profiling(True)
            prof.add_span("load model", load_start_us, prof.now_us() - load_start_us,
                          path=str(path))
        if verbose:
            self._log(self.describe())

    def _init_front(self, path, n_ctx, n_batch, n_cells, flash_attn, chat_template, log,
                    verbose) -> None:
        """What every model has whatever runs its forward pass (tp_model.TPModel shares
        it): the GGUF's hyperparameters, the context and batch limits, the tokenizer and chat
        template, the timings."""
        import sys
        self._log = log or (lambda msg: print(msg, file=sys.stderr))
        self.verbose = verbose
        self.gguf = open_gguf(path)
        hp = self.hparams = self.gguf.hparams
        n_ctx = int(n_ctx)
        if n_ctx <= 0:
            n_ctx = hp.n_ctx_train
        if n_ctx > hp.n_ctx_train:
            raise ValueError(f"n_ctx={n_ctx} is beyond the model's training context "
                             f"({hp.n_ctx_train} tokens); use -c {hp.n_ctx_train} or less")
        if int(n_batch) < 1:
            raise ValueError(f"n_batch must be >= 1, got {n_batch}")
        n_cells = n_ctx if n_cells is None else int(n_cells)
        if n_cells < n_ctx:
            raise ValueError(f"n_cells={n_cells}: the KV cache must hold at least one whole "
                             f"context (n_ctx={n_ctx})")
        self.n_ctx, self.n_batch = n_ctx, min(int(n_batch), n_ctx)
        self.n_cells = n_cells          # KV cells shared by all sequences (n_ctx: one's limit)
        self.flash_attn = bool(flash_attn)
        arch = get_arch(hp.arch)
        self._swa = any(arch.is_swa(hp, il) for il in range(hp.n_layer))   # kq_mask_swa input

        from .tokenizer import Tokenizer
        from .chat_template import ChatTemplate
        self.tokenizer = Tokenizer(self._tokenizer_metadata(), name=os.path.basename(str(path)))
        # the header is parsed and its string arrays copied: its pages (5.7 MiB of a 150k-token
        # vocabulary) leave this process's resident set
        self.gguf.release_range(0, self.gguf.data_offset)
        self.chat_template = ChatTemplate.from_tokenizer(self.tokenizer, source=chat_template)
        self._seq_tokens: list[int] = []        # what seq 0 holds (prefix reuse in generate)
        self._timings = {"load_ms": 0.0, "prompt_tokens": 0, "prompt_ms": 0.0,
                         "gen_tokens": 0, "gen_ms": 0.0}

    def _warm_up_op_caches(self):
        """Run one ROPE over n_batch positions on every device: the backend's per-stream sin/cos
        tables reach their largest size now. A later, longer prompt would otherwise regrow them,
        and regrowing a table drops every graph captured so far (GGML_CANN_ACL_GRAPH), so decode
        would capture again."""
        hp = self._graph_hp
        for slot in self.sched.slots[:-1]:
            with be.Context(8) as ctx:
                x = ctx.new_tensor(be.TensorType.F32, [hp.head_dim, 1, self.n_batch])
                pos = ctx.new_tensor(be.TensorType.I32, [self.n_batch])
                y = ctx.rope_ext(x, pos, None, hp.rope_n_dims, hp.rope_type,
                                 freq_base=hp.rope_freq_base, freq_scale=hp.rope_freq_scale)
                g = ctx.new_graph(8).build_forward(y)
                buf = ctx.alloc_tensors(slot.buffer_type)
                x.memset(0)
                pos.set(np.arange(self.n_batch, dtype=np.int32))
                slot.backend.graph_compute(g)
                slot.backend.synchronize()
                buf.close()

    def _tokenizer_metadata(self) -> dict:
        """The tokenizer.* keys and general.name, from the loader's parse of the header (its
        skipped string arrays, the tokens and merges, copied from the same map as blobs)."""
        return {k: self.gguf.string_array(k) for k in self.gguf.metadata
                if k.startswith("tokenizer.") or k == "general.name"}

    # ---- text ------------------------------------------------------------------------------
    def tokenize(self, text: str, special: bool = True) -> list[int]:
        """Token ids; BOS only when the model's add_bos_token says so."""
        return self.tokenizer.tokenize(text, add_special=True, special=special)

    def detokenize(self, ids) -> str:
        return self.tokenizer.detokenize(list(ids))

    # ---- forward -------------------------------------------------------------------------------
    def _build_graph(self, n_tokens: int, n_kv: int, n_outputs: int, embeddings: bool = False):
        """This model's forward graph (a ForwardGraph) of one shape."""
        return build_graph(self._graph_hp, self.weights.tensors, self.kv, n_tokens, n_kv,
                           n_outputs, flash_attn=self.flash_attn, embeddings=embeddings,
                           tp=self._tp_graph)

    def _get_plan(self, n_tokens: int, n_kv: int, n_outputs: int, each_node: bool = False,
                  embeddings: bool = False, pick: bool = False):
        """The (ForwardGraph, Plan) of this shape and kind; embeddings: the graph that stops at
        result_norm (its output "embd") instead of the logits (output "logits"); pick: the
        logits graph with the greedy picks and their finiteness verdict as outputs too
        (_add_pick)."""
        key = (n_tokens, n_kv, n_outputs, each_node, embeddings, pick)
        entry = self._graphs.get(key)
        if entry is not None and entry[1].generation != self.sched.generation:
            entry = None
        if entry is None:
            with profiler.span("plan graph", n_tokens=n_tokens, n_kv=n_kv, n_outputs=n_outputs):
                fg = self._build_graph(n_tokens, n_kv, n_outputs, embeddings)
                outputs = {"embd": fg.embd} if embeddings else {"logits": fg.logits}
                if pick:
                    outputs.update(_add_pick(fg, self.hparams.n_vocab))
                plan = self.sched.plan(fg.graph, fg.inputs, outputs, split_each_node=each_node)
            entry = (fg, plan)
            if self.sched.generation != plan.generation:    # buffers grew: drop stale plans
                self._graphs.clear()
            self._graphs[key] = entry
            while len(self._graphs) > _MAX_GRAPHS:
                self._graphs.popitem(last=False)
            if self.verbose and not each_node:
                self._log(plan.describe())
        else:
            self._graphs.move_to_end(key)
        return entry

    def decode(self, batch: Batch, eval_callback=None, embeddings=False) -> np.ndarray | None:
        """Run a batch (micro-batches of n_batch tokens): its K/V enter the cache, the rows
        flagged in batch.logits come back as float32 [n_outputs, n_vocab] (None when an
        eval_callback stopped the run); embeddings=True: their final-norm hidden states
        (result_norm) float32 [n_outputs, n_embd] instead, without the output projection.
        NaN/inf values raise NonFiniteLogitsError, except under an eval_callback, which sees the
        raw values."""
        n = len(batch)
        width = self.hparams.n_embd if embeddings else self.hparams.n_vocab
        if n == 0:
            return np.zeros((0, width), dtype=np.float32)
        if ids_out_of_range(batch.tokens, self.hparams.n_vocab):
            raise ValueError(f"token ids must be in 0..{self.hparams.n_vocab - 1}")
        if n > self.n_cells - self.kv.n_used():
            raise ContextFullError(
                f"{n} tokens do not fit in the context: {self.n_cells} cells, "
                f"{self.kv.n_used()} cells in use; load the model with a larger n_ctx or use a shorter "
                f"prompt")
        if n <= self.n_batch:       # one micro-batch (every decode step): no slicing
            return self._decode_ubatch(batch.tokens, batch.pos, batch.seq_ids, batch.logits,
                                       eval_callback, embeddings)
        outs = []
        for start in range(0, n, self.n_batch):
            sl = slice(start, min(start + self.n_batch, n))
            out = self._decode_ubatch(batch.tokens[sl], batch.pos[sl], batch.seq_ids[sl],
                                      batch.logits[sl], eval_callback, embeddings)
            if out is None:
                return None
            outs.append(out)
        return outs[0] if len(outs) == 1 else np.concatenate(outs)

    def decode_step(self, tokens: list[int], pos: list[int], seq_ids: list[int],
                    banned: list | None = None,
                    logits: bool = True) -> tuple[np.ndarray | None, list]:
        """decode() of one token per sequence (lists of Python ints), every row wanting logits:
        the engine's steps without a prefill chunk, with no Batch and one scan of the cells.
        banned: per row None, or the ascending ids (Sampler.greedy_bans) its greedy pick skips.
        Returns the logits float32 [n, n_vocab], checked as decode() checks them (valid until the
        next decode_step: they may be read into an array the graph's plan keeps), and per row
        that pick (backend.logits_scan: -1 when every id is banned), None where banned is.
        logits=False (the caller reads only the picks, every row has one): when the device's
        picks stand (pick_on_device; all logits finite, no pick banned) the logits are not read
        and None comes back in their place; otherwise as above."""
        n = len(tokens)
        if banned is None:
            banned = [None] * n
        pick = not logits and self.pick_on_device and all(b is not None for b in banned)
        if n == 0 or n > self.n_batch:
            return self.decode(Batch(tokens, pos, seq_ids, [True] * n)), [None] * n
        n_vocab = self.hparams.n_vocab
        if min(tokens) < 0 or max(tokens) >= n_vocab:
            raise ValueError(f"token ids must be in 0..{n_vocab - 1}")
        kv = self.kv
        used, cells, n_kv, mask = kv.decode_cells(pos, seq_ids)   # committed, one C pass
        if cells is None or n > self.n_cells - used:
            if cells is not None:
                kv.release(cells)
            raise ContextFullError(
                f"{n} tokens do not fit in the context: {self.n_cells} cells, "
                f"{used} cells in use; load the model with a larger n_ctx or use a shorter "
                f"prompt")
        try:
            values = {"inp_tokens": np.array(tokens, dtype=np.int32),
                      "inp_pos": np.array(pos, dtype=np.int32),
                      "kq_mask": mask, "kv_idxs": cells,
                      "inp_out_ids": _ONE_ROW if n == 1 else np.arange(n, dtype=np.int32)}
            if self._swa:
                values["kq_mask_swa"] = kv.mask(n_kv, pos, seq_ids, n_swa=self.hparams.extra["n_swa"])
            if pick:
                picks, out, data = self._pick_step(n, n_kv, values, banned)
                if picks is not None:
                    return None, picks
            else:
                out, data = self._forward_step(n, n_kv, values)
        except BaseException:
            kv.release(cells)
            raise
        rows = out.reshape(-1, n_vocab)
        return rows, _scan_logits(rows, pos, seq_ids, self.gguf.path, banned, data)

    def _forward_step(self, n_tokens: int, n_kv: int, values: dict):
        """A decode step's graph run: (logits float32 [n_tokens, n_vocab], a pointer to them or
        None); the logits may be the plan's kept array (Plan.run_kept), valid until its next run."""
        fg, plan = self._get_plan(n_tokens, n_kv, n_tokens)
        kept = plan.run_kept(values)
        if kept is not None:
            return kept["logits"]
        return plan.run(values)["logits"], None

    def _pick_step(self, n_tokens: int, n_kv: int, values: dict, banned: list):
        """A greedy decode step's graph run with the picks taken on the device: (picks, None,
        None) when they stand (_device_picks), else (None, logits, pointer or None) as
        _forward_step gives them, read only now (the device still holds them)."""
        fg, plan = self._get_plan(n_tokens, n_kv, n_tokens, pick=True)
        kept = plan.run_kept(values, _PICK_OUTPUTS)
        if kept is None:                   # a CPU split, or a profile: every output is read
            out = plan.run(values)
            picks = _device_picks(out["pick"].reshape(-1).tolist(),
                                  out["verdict"].reshape(-1).tolist(), banned)
            return (picks, None, None) if picks is not None else (None, out["logits"], None)
        verdict = kept["verdict"]
        picks = _device_picks(kept["pick"][1][0:n_tokens], verdict[1][0:verdict[0].size], banned)
        if picks is not None:
            return picks, None, None
        return (None, *plan.read_kept("logits"))

    def _decode_ubatch(self, tokens, pos, seq_ids, want, eval_callback, embeddings=False):
        n = len(tokens)
        kv = self.kv
        if n == 1:              # a decode step: one scan of the cells, no numpy bookkeeping
            cells, n_kv = kv.find_slot()
        else:
            cells = kv.find_slots(n)
        kv.commit(cells, pos, seq_ids)
        try:
            if n == 1:
                n_want = 1 if want[0] else 0
                out_ids = _ONE_ROW
            else:
                out_ids = np.flatnonzero(want).astype(np.int32)
                n_want = len(out_ids)
                if n_want == 0:
                    out_ids = np.array([n - 1], dtype=np.int32)
                n_kv = kv.n_kv()
            n_out = len(out_ids)
            values = {"inp_tokens": tokens, "inp_pos": pos.astype(np.int32),
                      "kq_mask": self.kv.mask(n_kv, pos, seq_ids), "kv_idxs": cells,
                      "inp_out_ids": out_ids}
            if self._swa:       # local attention layers (sliding window)
                values["kq_mask_swa"] = self.kv.mask(n_kv, pos, seq_ids,
                                                     n_swa=self.hparams.extra["n_swa"])
            result = self._forward(n, n_kv, n_out, values, eval_callback, embeddings)
        except BaseException:
            self.kv.release(cells)
            raise
        if result is None:
            return None
        what = "embd" if embeddings else "logits"
        width = self.hparams.n_embd if embeddings else self.hparams.n_vocab
        rows = result[what].reshape(-1, width)
        if not n_want:
            return np.zeros((0, width), dtype=np.float32)
        if len(rows) != n_want:
            rows = rows[:n_want]               # Plan.run's arrays are this call's own
        if eval_callback is None:   # an eval callback (the diff tool) inspects the raw values
            _check_logits(rows, pos, seq_ids, self.gguf.path,
                          "embeddings" if embeddings else "logits", out_ids)
        return rows

    def _forward(self, n_tokens: int, n_kv: int, n_outputs: int, values: dict, eval_callback,
                 embeddings: bool) -> dict | None:
        """One micro-batch's graph run on the inputs `values` (name -> numpy array): {"logits":
        F32 [n_outputs, n_vocab]} or {"embd": ...} (reshaped by the caller), None when an
        eval_callback stopped it. tensor_parallel.TPModel runs it on its ranks instead."""
        fg, plan = self._get_plan(n_tokens, n_kv, n_outputs, each_node=eval_callback is not None,
                                  embeddings=embeddings)
        return plan.run(values, eval_callback)

    def logits(self, ids, eval_callback=None) -> np.ndarray | None:
        """Teacher-forced logits float32 [len(ids), n_vocab] of `ids` on a fresh sequence.
        eval_callback(name, op, type, ne, data[, node]) sees every computed node (ne ggml order,
        data numpy order; node a sched.EvalNode) and stops the run (None) by returning False.
        `ids` may be a text (Model.tokenize)."""
        if isinstance(ids, str):
            ids = self.tokenize(ids)
        ids = [int(i) for i in ids]
        if len(ids) > self.n_ctx:
            raise ContextFullError(f"{len(ids)} tokens do not fit in the context "
                                   f"(n_ctx={self.n_ctx}); load the model with a larger n_ctx")
        self.kv.clear()
        self._seq_tokens = []
        t0 = time.perf_counter()
        out = self.decode(Batch.sequence(ids, all_logits=True), eval_callback)
        self.kv.clear()
        self._timings.update(prompt_tokens=len(ids), prompt_ms=(time.perf_counter() - t0) * 1e3,
                             gen_tokens=0, gen_ms=0.0)
        return out

    # ---- embeddings ----------------------------------------------------------------------------
    @property
    def pooling(self) -> str:
        """How embed() pools the rows by default: the GGUF's {arch}.pooling_type ("none",
        "mean", "cls", "last" or "rank"), "mean" when the file does not say."""
        pt = self.hparams.pooling_type
        return "mean" if pt is None else POOLING_TYPES[pt]

    def embed(self, ids, pooling: str | None = None, normalize: bool = True,
              seq_id: int | None = None) -> np.ndarray:
        """One sentence embedding, float32 [n_embd]: the final-norm hidden states (result_norm)
        of `ids` (token ids, or a text tokenized as Model.tokenize) pooled by `pooling` ("mean",
        "cls": the first row, "last"; None: Model.pooling) and, with normalize, scaled to unit
        L2 norm (llama-server's /v1/embeddings default).

        The ids run as sequence `seq_id` (None: a free id no cell of the cache holds) from
        position 0, and its cells are removed afterwards, also on error: an Engine's sequences
        in the cache are not disturbed, so this may run between its steps."""
        pooling = self.pooling if pooling is None else str(pooling).lower()
        if pooling in ("none", "rank"):
            raise ValueError(f"pooling {pooling!r} gives no single vector (embed() pools with "
                             f"'mean', 'cls' or 'last'; pass pooling= to choose one)")
        if pooling not in ("mean", "cls", "last"):
            raise ValueError(f"unknown pooling {pooling!r} (expected 'mean', 'cls' or 'last')")
        if isinstance(ids, str):
            ids = self.tokenize(ids)
        ids = [int(i) for i in ids]
        n = len(ids)
        if n == 0:
            raise ValueError("embed() needs at least one token (the input is empty)")
        kv = self.kv
        in_use = np.bitwise_or.reduce(kv.seq) if len(kv.seq) else np.uint64(0)
        if seq_id is None:
            free = [s for s in range(MAX_SEQ - 1, -1, -1) if not int(in_use) >> s & 1]
            if not free:
                raise RuntimeError(f"all {MAX_SEQ} sequence ids hold cells in the KV cache")
            seq_id = free[0]
        elif not 0 <= int(seq_id) < MAX_SEQ:
            raise ValueError(f"sequence ids must be in 0..{MAX_SEQ - 1}, got {seq_id}")
        elif int(in_use) >> int(seq_id) & 1:
            raise ValueError(f"sequence {seq_id} holds cells in the KV cache; embed() needs a "
                             f"sequence of its own (seq_id=None picks a free one)")
        seq_id = int(seq_id)
        if n > self.n_ctx:
            raise ContextFullError(f"the input has {n} tokens, the context holds {self.n_ctx}; "
                                   f"load the model with a larger n_ctx or embed a shorter text")
        n_free = self.n_cells - kv.n_used()
        if n > n_free:
            others = f", {kv.n_used()} cells are in use by other sequences" if kv.n_used() else ""
            raise ContextFullError(f"the input has {n} tokens, {n_free} fit in the KV cache "
                                   f"({self.n_cells} cells{others}); load the model with more "
                                   f"cells or embed a shorter text")
        want = np.zeros(n, dtype=bool)
        if pooling == "mean":
            want[:] = True
        else:
            want[0 if pooling == "cls" else n - 1] = True
        try:
            rows = self.decode(Batch(ids, np.arange(n), np.full(n, seq_id), want),
                               embeddings=True)
        finally:
            kv.seq_rm(seq_id, None, None)
        vec = rows.astype(np.float64).mean(axis=0) if pooling == "mean" else rows[0]
        if normalize:       # llama.cpp's common_embd_normalize with the Euclidean norm
            norm = float(np.sqrt(np.sum(np.square(vec, dtype=np.float64))))
            vec = vec * (1.0 / norm if norm > 0 else 0.0)
        return np.asarray(vec, dtype=np.float32)

    # ---- generation ----------------------------------------------------------------------------
    @property
    def engine(self):
        """The Engine over this model's cache (generate uses its sequence 0)."""
        if getattr(self, "_engine", None) is None:
            from .engine import Engine
            self._engine = Engine(self)
        return self._engine

    def generate(self, ids, max_tokens=128, temperature=_SP.temperature, top_k=_SP.top_k,
                 top_p=_SP.top_p, min_p=_SP.min_p, repeat_penalty=_SP.repeat_penalty,
                 repeat_last_n=_SP.repeat_last_n, presence_penalty=_SP.presence_penalty,
                 frequency_penalty=_SP.frequency_penalty, logit_bias=None, seed=None,
                 stop=None, response_format=None, grammar=None) -> Iterator[int]:
        """Yield generated token ids as they come. Stops at an end-of-generation token (not
        yielded), after max_tokens, at a token id listed in `stop` (not yielded) or once the
        generated text contains a string listed in `stop` (its last token is yielded). `ids` are
        token ids, or a text, tokenized as a raw completion prompt (Model.tokenize).
        response_format: OpenAI's {"type": "json_object"} or {"type": "json_schema",
        "json_schema": {"name", "schema"}}; grammar: GBNF text or a cann_llm.grammar.Grammar.
        Either constrains the output (cann_llm.grammar).
        Runs as sequence 0 of self.engine; the cells it leaves are reused by the next call
        whose prompt shares a prefix with this one's tokens."""
        if isinstance(ids, str):
            ids = self.tokenize(ids)
        ids = [int(i) for i in ids]
        if not ids:
            raise ValueError("generate() needs at least one prompt token")
        params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                                repeat_penalty=repeat_penalty, repeat_last_n=repeat_last_n,
                                presence_penalty=presence_penalty,
                                frequency_penalty=frequency_penalty,
                                logit_bias=dict(logit_bias or {}),
                                seed=-1 if seed is None else seed,
                                grammar=self._grammar(response_format, grammar))
        engine = self.engine
        old = engine.seqs.get(0)
        if old is not None:                 # an earlier generate() left unfinished
            engine.release(old, keep=True)
        self._timings.update(prompt_tokens=0, prompt_ms=0.0, gen_tokens=0, gen_ms=0.0)
        t0 = time.perf_counter()
        seq = engine.add(ids, params, max_tokens=max_tokens, stop=stop, seq_id=0,
                         cached=self._seq_tokens)
        self._seq_tokens = seq.tokens       # what seq 0 holds, kept up to date by the engine
        n_gen = 0
        try:
            while not seq.finished:
                for s, token in engine.step():
                    if s is not seq:
                        continue
                    if seq.t_prompt_done is not None and not self._timings["prompt_tokens"]:
                        self._timings.update(prompt_tokens=len(ids),
                                             prompt_ms=(seq.t_prompt_done - t0) * 1e3)
                    if token is not None:
                        n_gen += 1
                        self._timings.update(gen_tokens=n_gen, gen_ms=(
                            time.perf_counter() - seq.t_prompt_done) * 1e3)
                        yield token
            if seq.error is not None:
                raise seq.error
        finally:
            if engine.seqs.get(0) is seq:
                engine.release(seq, keep=True)
            if seq.t_prompt_done is not None:
                self._timings.update(gen_tokens=n_gen, gen_ms=(
                    time.perf_counter() - seq.t_prompt_done) * 1e3)

    def _grammar(self, response_format, grammar):
        if response_format is not None:
            if grammar is not None:
                raise ValueError("give response_format or grammar, not both")
            from .grammar import from_response_format
            return from_response_format(self.tokenizer, response_format)
        if isinstance(grammar, str):
            from .grammar import compile
            return compile(self.tokenizer, "gbnf", grammar)
        return grammar

    def chat(self, messages, max_tokens=512, stop=None, **sampling) -> Iterator[str]:
        """Apply the chat template to `messages` and stream the answer's text."""
        prompt = self.chat_template.render(messages, add_generation_prompt=True)
        ids = self.tokenize(prompt, special=True)
        text = TextStream(self.tokenizer, stop)
        for token in self.generate(ids, max_tokens=max_tokens, **sampling):
            piece = text.add(token)
            if piece:
                yield piece
            if text.stopped:
                return
        rest = text.finish()
        if rest:
            yield rest

    # ---- info -----------------------------------------------------------------------------------
    def timings(self) -> dict:
        return dict(self._timings)

    def _mapped_note(self) -> str:
        stats = self.weights.stats
        notes = [f"{stats[key] / 2**20:.1f} MiB read from {where}"
                 for key, where in (("bytes_mapped", "the file's map"),
                                    ("bytes_cached", "the weight cache")) if stats.get(key)]
        if stats.get("fused"):
            notes.append(f"{stats['fused']} tensors fused at load (Q/K/V, gate/up)")
        if stats.get("cache_error"):
            notes.append(f"weight cache not written: {stats['cache_error']}")
        return f" ({'; '.join(notes)})" if notes else ""

    def describe(self) -> str:
        """Devices, memory and the graphs built so far (`-v`)."""
        hp = self.hparams
        lines = [f"model: {hp.arch}, {hp.n_layer} layers, n_embd {hp.n_embd}, n_head "
                 f"{hp.n_head}/{hp.n_head_kv}, vocab {hp.n_vocab}; devices: "
                 f"{', '.join(self.devices)}",
                 f"weights: {self.weights.nbytes / 2**20:.1f} MiB"
                 f"{self._mapped_note()}; KV cache: n_ctx {self.n_ctx}, "
                 f"{self.kv.nbytes / 2**20:.1f} MiB (K {be.type_name(self.kv.type_k)}, V "
                 f"{be.type_name(self.kv.type_v)}); n_batch {self.n_batch}; "
                 f"attention: {'flash_attn_ext' if self.flash_attn else 'soft_max'}"]
        for slot, buf in sorted(self.sched.buffers.items()):
            lines.append(f"{self.sched.slots[slot].name} compute buffer: "
                         f"{buf.size / 2**20:.2f} MiB")
        return "\n".join(lines)

    def close(self):
        self._graphs.clear()
        if getattr(self, "kv", None) is not None:
            self.kv.close()
        if getattr(self, "weights", None) is not None:
            self.weights.close()
        if getattr(self, "sched", None) is not None:
            self.sched.close()
        if getattr(self, "gguf", None) is not None:
            self.gguf.close()   # its map, now, not when a collection finds the model's cycles

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
