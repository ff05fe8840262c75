"""The engine: several sequences sharing one model and its unified KV cache.

Sits between the users (Model.generate/chat, the CLI, the server) and Model.decode: each
sequence has an id (its bit in the KV cells), its own positions, prompt and sampler. step() is
one batched forward over every decoding sequence's last token plus at most one prefill chunk,
then one draw per sequence that got logits. acl_host is batch-invariant, so a sequence gives the
same tokens alone or alongside others. Sequences under a grammar (cann_llm.grammar) get their
token masks computed on a worker thread while the forward runs.

Scheduling, for a server: at most `max_running` sequences hold cells at once and the others wait
in a queue; with `prefix_cache`, the cells of released sequences stay as reusable prefixes
(evicted least recently used first); when the cells run out, the most recently admitted
sequence is preempted back to the queue and later recomputes its cells (its tokens do not
change). A request with n > 1 prefills once and forks its cells (seq_cp). Not thread-safe: one
step at a time.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from typing import Iterable

import numpy as np

from . import profiler
from .kv_cache import MAX_SEQ, ContextFullError
from .model import Batch
from .sampler import SamplingParams

__all__ = ["Engine", "Sequence", "TokenLogprob"]


class TokenLogprob:
    """The log-probability of a generated token under the model (raw logits, before penalties
    and sampling) and the `top` most likely tokens with theirs."""
    __slots__ = ("token", "logprob", "top")

    def __init__(self, token: int, logprob: float, top: list[tuple[int, float]]):
        self.token, self.logprob, self.top = token, logprob, top


class Sequence:
    """One request (or one choice of a request with n > 1): its prompt still to prefill, the
    tokens its cells hold, its sampler and its stop conditions. finish_reason is None while it
    runs, then "stop" (end of generation, a stop token or text), "length" (max_tokens or the
    context), "error" (the sampler refused: `error` holds why) or "cancelled"."""

    def __init__(self, params: SamplingParams, max_tokens: int | None, stop, tokenizer,
                 logprobs: int | None = None):
        self.id: int | None = None           # set when admitted (cells are held under it)
        self.params = params
        self.sampler = params.sampler()
        self.max_tokens = None if max_tokens is None else int(max_tokens)
        self.tokens: list[int] = []          # in the cache (positions 0..len-1)
        self.pending: list[int] = []         # prompt tokens still to prefill
        self.next_token: int | None = None   # sampled, not yet in the cache
        self.history: list[int] = []         # prompt + generated (the penalties' window)
        self.generated: list[int] = []
        self.logprobs = logprobs             # None: off; k: the chosen token's and the top k
        self.token_logprobs: list[TokenLogprob] = []
        self.n_prompt = 0
        self.n_cached = 0                    # prompt tokens whose cells came from the prefix cache
        self.n_preempted = 0
        self.forks: list[Sequence] = []      # the other choices of an n > 1 request, until forked
        self.state = "waiting"               # waiting | running | released
        self.finish_reason: str | None = None
        self.error: BaseException | None = None
        self.stop_ids, self.stop_text = set(), []
        for s in ([stop] if isinstance(stop, (str, int)) else (stop or [])):
            if isinstance(s, str):
                self.stop_text.append(s)
            else:
                self.stop_ids.add(int(s))
        self._tokenizer = tokenizer
        self._text = tokenizer.incremental() if self.stop_text else None
        self._generated_text = ""
        self.t_start = time.perf_counter()
        self.t_prompt_done: float | None = None   # the forward that ended the prompt returned

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def n_past(self) -> int:
        return len(self.tokens)


class Engine:
    """Sequences over one Model: add() a prompt, step() until the sequences finish.

    max_running: sequences holding cells at once (None: no limit); max_context: one sequence's
    tokens (None: the model's n_ctx); prefix_cache: keep released sequences' cells for reuse."""

    def __init__(self, model, max_running: int | None = None, max_context: int | None = None,
                 prefix_cache: bool = False):
        if max_running is not None and not 1 <= max_running <= MAX_SEQ:
            raise ValueError(f"max_running must be in 1..{MAX_SEQ}, got {max_running}")
        self.model = model
        self.max_running = max_running
        self.max_context = min(int(max_context or model.n_ctx), model.n_ctx)
        self.prefix_cache = prefix_cache
        self.seqs: dict[int, Sequence] = {}     # admitted ones, in the order they were admitted
        self.waiting: deque[Sequence] = deque()
        self.cache: OrderedDict[int, list[int]] = OrderedDict()   # id -> tokens, LRU first
        self.stats = {"prefix_queries": 0, "prefix_hits": 0, "prefix_tokens": 0,
                      "preemptions": 0}
        self._mask_pool = None               # a thread for grammar masks during forwards

    # ---- sequences ---------------------------------------------------------------------------
    def add(self, prompt: Iterable[int], params: SamplingParams | None = None,
            max_tokens: int | None = 128, stop=None, seq_id: int | None = None,
            cached: list[int] | None = None, n: int = 1,
            logprobs: int | None = None) -> Sequence:
        """Queue a sequence on `prompt` (token ids) and admit it when there is room (at once
        without max_running). seq_id None: the lowest free id. `cached`: the tokens the cells of
        seq_id already hold (from a sequence released with keep=True); their common prefix with
        the prompt is reused, the rest of seq_id's cells are dropped. n > 1: n choices that share
        the prompt's cells (Sequence.forks holds the others; choice i samples with seed + i when
        a seed is set). logprobs: record each token's log-probability and the top `logprobs`."""
        ids = [int(i) for i in prompt]
        if not ids:
            raise ValueError("a sequence needs at least one prompt token")
        if len(ids) > self.max_context:
            raise ContextFullError(f"the prompt has {len(ids)} tokens, the context holds "
                                   f"{self.max_context}; use a larger context or a shorter "
                                   f"prompt")
        n = int(n)
        if n < 1 or (self.max_running is not None and n > self.max_running):
            raise ValueError(f"n must be in 1..{self.max_running or MAX_SEQ}, got {n}")
        if seq_id is not None:
            if n != 1:
                raise ValueError("seq_id and n > 1 cannot be combined")
            if not 0 <= seq_id < MAX_SEQ:
                raise ValueError(f"sequence ids must be in 0..{MAX_SEQ - 1}")
            if seq_id in self.seqs:
                raise ValueError(f"sequence {seq_id} is already running")
        params = params or SamplingParams()
        tok = self.model.tokenizer
        seq = Sequence(params, max_tokens, stop, tok, logprobs)
        for i in range(1, n):
            p = params if params.seed < 0 else _with_seed(params, params.seed + i)
            seq.forks.append(Sequence(p, max_tokens, stop, tok, logprobs))
        for s in [seq] + seq.forks:
            s.history, s.n_prompt = list(ids), len(ids)
        seq.pending = ids
        seq._want_id, seq._cached = seq_id, cached
        self.waiting.append(seq)
        self._admit()
        return seq

    def release(self, seq: Sequence, keep: bool = False) -> None:
        """End a sequence (cancelled if it was running or waiting) and free its cells; keep=True
        leaves them: in the prefix cache when it is on, else for a later add(..., cached=...)."""
        if not seq.finished:
            seq.finish_reason = "cancelled"
        if seq in self.waiting:
            self.waiting.remove(seq)
        for child in seq.forks:                # choices not forked yet go with their parent
            child.finish_reason = child.finish_reason or "cancelled"
            self._drop(child, keep=False)
        seq.forks = []
        self._drop(seq, keep)

    def _drop(self, seq: Sequence, keep: bool) -> None:
        seq.state = "released"
        if seq.id is None or self.seqs.get(seq.id) is not seq:
            return
        del self.seqs[seq.id]
        if keep and self.prefix_cache and seq.tokens:
            self.cache[seq.id] = list(seq.tokens)
        elif not keep:
            self.model.kv.seq_rm(seq.id, None, None)

    @property
    def n_waiting(self) -> int:
        """Sequences queued (readable from another thread: it iterates a snapshot)."""
        return sum(1 + len(s.forks) for s in list(self.waiting))

    def _taken_ids(self) -> set:
        return set(self.seqs) | set(self.cache)

    def _evict_one(self, keep_id: int | None = None) -> bool:
        """Drop the least recently used prefix-cache entry (not keep_id); False if none."""
        for sid in self.cache:
            if sid != keep_id:
                del self.cache[sid]
                self.model.kv.seq_rm(sid, None, None)
                return True
        return False

    def _free_ids(self, k: int, keep_id: int | None = None) -> list[int] | None:
        while True:
            taken = self._taken_ids()
            free = [i for i in range(MAX_SEQ) if i not in taken]
            if len(free) >= k:
                return free[:k]
            if not self._evict_one(keep_id):
                return None

    def _admit(self) -> None:
        """Give waiting sequences ids and (shared) cells, in order, while there is room."""
        while self.waiting:
            seq = self.waiting[0]
            group = [seq] + seq.forks
            if self.max_running is not None and len(self.seqs) + len(group) > self.max_running:
                return
            want = getattr(seq, "_want_id", None)
            best_id, common = self._best_prefix(seq.pending) if want is None else (None, 0)
            # the whole prompt must fit beside a next token for each running sequence, or a
            # sequence admitted now would only be preempted again
            need = len(seq.pending) - common + len(self.seqs)
            if self.seqs and self._free_cells(need, keep_id=best_id) < need:
                return
            if want is not None:
                ids = [want]
            else:
                ids = self._free_ids(len(group), keep_id=best_id)
                if ids is None:
                    return
            self.waiting.popleft()
            for s, sid in zip(group, ids):
                s.id, s.state = sid, "running"
                self.seqs[sid] = s
            prompt = seq.pending
            kv = self.model.kv
            if want is None:        # a free id may still hold cells kept without a prefix cache
                for sid in ids:     # (generate()'s sequence 0): they are stale for a new owner
                    kv.seq_rm(sid, None, None)
            if want is not None:
                cached = seq._cached if seq._cached is not None else self.cache.get(want)
                self.cache.pop(want, None)
                common = 0
                if cached and kv.seq_pos_max(want) == len(cached) - 1:   # cells still hold them
                    common = min(_common_prefix(cached, prompt), len(prompt) - 1)
                kv.seq_rm(want, common, None)
                seq._want_id = None                # a preempted sequence gets any free id
            elif common:
                if best_id in self.cache:
                    self.cache.move_to_end(best_id)
                kv.seq_cp(best_id, seq.id, 0, common)
                self.stats["prefix_hits"] += 1
                self.stats["prefix_tokens"] += common
            seq.tokens, seq.pending = prompt[:common], prompt[common:]
            seq.n_cached = common

    def _best_prefix(self, prompt: list[int]) -> tuple[int | None, int]:
        """The prefix-cache entry sharing the longest prefix with `prompt` (at most all but its
        last token, which must run to give logits) and that length."""
        if not self.prefix_cache or len(prompt) < 2:
            return None, 0
        self.stats["prefix_queries"] += 1
        best, best_n = None, 0
        for sid, tokens in self.cache.items():
            n = _common_prefix(tokens, prompt)
            if n > best_n:
                best, best_n = sid, n
        return best, min(best_n, len(prompt) - 1)

    def _preempt(self, seq: Sequence) -> None:
        """Free seq's cells and queue it first: it recomputes them when admitted again."""
        self.model.kv.seq_rm(seq.id, None, None)
        for s in [seq] + seq.forks:
            if s.state != "running":
                continue
            del self.seqs[s.id]
            s.id, s.state = None, "waiting"
        seq.pending = seq.tokens + ([seq.next_token] if seq.next_token is not None else []) \
            + seq.pending
        seq.tokens, seq.next_token = [], None
        seq.n_preempted += 1
        self.stats["preemptions"] += 1
        self.waiting.appendleft(seq)

    def _free_cells(self, need: int, keep_id: int | None = None) -> int:
        """Empty cells, after evicting prefix-cache entries (LRU first, not keep_id) until `need`
        fit."""
        kv = self.model.kv
        free = kv.n_ctx - kv.n_used()
        while free < need and self._evict_one(keep_id):
            free = kv.n_ctx - kv.n_used()
        return free

    def embed(self, ids: list[int], **kwargs):
        """Model.embed between steps: cells come from the prefix cache if need be, and the
        sequence id is one no running, waiting or cached sequence uses."""
        self._free_cells(len(ids))
        sid = self._free_ids(1)
        return self.model.embed(ids, seq_id=None if sid is None else sid[-1], **kwargs)

    # ---- one step --------------------------------------------------------------------------
    def step(self) -> list[tuple[Sequence, int | None]]:
        """One forward: the sampled token of every decoding sequence plus one prefill chunk (up
        to n_batch tokens in all). Returns (sequence, token) for every sequence that drew a token
        or finished in this step (token None when it finished without one)."""
        if profiler.active() is None:
            return self._step()
        with profiler.span("engine step", sequences=len(self.seqs)):
            return self._step()

    def _step(self) -> list[tuple[Sequence, int | None]]:
        self._admit()
        model = self.model
        events: list[tuple[Sequence, int | None]] = []
        # one pass: sequences at the end of the context finish, the others decode their next
        # token, and the first with prompt tokens left prefills
        decoding, prefill, max_context = [], None, self.max_context
        for seq in self.seqs.values():
            if seq.finish_reason is not None:
                continue
            if seq.next_token is not None:
                if len(seq.tokens) >= max_context:
                    seq.error = ContextFullError(f"generation reached the end of the context "
                                                 f"({max_context} tokens)")
                    seq.finish_reason = "length"
                    events.append((seq, None))
                    continue
                decoding.append(seq)
            if prefill is None and seq.pending:
                prefill = seq
        while True:
            chunk = 0 if prefill is None else \
                min(len(prefill.pending), max(model.n_batch - len(decoding), 1))
            free = self._free_cells(len(decoding) + chunk)
            if free >= len(decoding) + chunk:
                break
            if prefill is not None and free > len(decoding):
                chunk = free - len(decoding)          # a smaller chunk fits
                break
            victims = [s for s in self.seqs.values()
                       if not s.finished and (s.next_token is not None or s.pending)]
            if len(victims) <= 1:
                break                                  # decode raises ContextFullError
            self._preempt(victims[-1])
            decoding = [s for s in self.seqs.values()
                        if not s.finished and s.next_token is not None]
            prefill = next((s for s in self.seqs.values() if s.pending and not s.finished), None)
        rows = [(s, 1) for s in decoding]
        if prefill is not None and chunk > 0:
            rows.append((prefill, chunk))
        else:
            prefill = None
        if not rows:
            if self.waiting and not events:      # nothing can run: do not spin forever
                held = sum(1 for s in self.seqs.values() if s.finished)
                raise ContextFullError(
                    f"{self.n_waiting} waiting sequences do not fit in the free KV cells and "
                    f"nothing else runs: {held} finished sequences still hold cells (release "
                    f"them) or the cache is too small")
            return events
        masks = self._prepare_masks(rows, prefill)
        picks = None
        try:
            if prefill is None:     # one token per sequence: the greedy picks come with the check
                bans = [s.sampler.greedy_bans for s in decoding]
                need = any(b is None for b in bans) or any(s.logprobs is not None for s in decoding)
                logits, picks = model.decode_step(       # logits None: the picks were enough
                    [s.next_token for s in decoding], [len(s.tokens) for s in decoding],
                    [s.id for s in decoding], bans, logits=need)
            else:
                tokens, pos, seq_ids, want = [], [], [], []
                for seq, n in rows:
                    todo = [seq.next_token] if seq is not prefill else seq.pending[:n]
                    tokens += todo
                    pos += range(seq.n_past, seq.n_past + n)
                    seq_ids += [seq.id] * n
                    want += [False] * (n - 1) + [seq is not prefill or n == len(seq.pending)]
                logits = model.decode(Batch(tokens, pos, seq_ids, want))
        except BaseException:               # micro-batches that went in before the failure
            for seq, _ in rows:
                model.kv.seq_rm(seq.id, seq.n_past, None)
            raise
        finally:
            if masks is not None:
                masks.result()
        now = time.perf_counter()
        row = 0
        for seq, n in rows:
            if seq is prefill:
                seq.tokens += seq.pending[:n]
                del seq.pending[:n]
                if seq.pending:
                    continue
                seq.t_prompt_done = now
                for child in seq.forks:        # n > 1: the other choices share these cells
                    if child.state != "running":
                        continue                # released (cancelled) before the fork
                    self._fork(seq, child, now)
                    events.append((child, self._draw_safely(child, logits[row])))
                seq.forks = []
            else:
                seq.tokens.append(seq.next_token)
                seq.next_token = None
            events.append((seq, self._draw_safely(seq, None if logits is None else logits[row],
                                                  None if picks is None else picks[row])))
            row += 1
        return events

    def _prepare_masks(self, rows, prefill):
        """Grammar masks of the sequences that draw after this forward, computed on a worker
        thread while the forward runs (off the critical path); None when there are none."""
        matchers = [s.sampler.matcher for s, n in rows if s.sampler.matcher is not None
                    and (s is not prefill or n == len(s.pending))]
        if not matchers:
            return None
        if self._mask_pool is None:
            from concurrent.futures import ThreadPoolExecutor
            self._mask_pool = ThreadPoolExecutor(1, thread_name_prefix="cann-llm-mask")

        def prepare():
            for m in matchers:
                m.prepare()
        return self._mask_pool.submit(prepare)

    def _fork(self, parent: Sequence, child: Sequence, now: float) -> None:
        self.model.kv.seq_cp(parent.id, child.id, None, None)
        child.tokens = list(parent.tokens)
        child.history = list(parent.history)
        child.n_cached, child.t_prompt_done = parent.n_cached, now

    def _draw_safely(self, seq: Sequence, logits: np.ndarray, pick: int | None = None) -> int | None:
        try:
            return self._draw(seq, logits, pick)
        except ValueError as exc:       # e.g. logit_bias banned every token
            seq.error, seq.finish_reason = exc, "error"
            return None

    def _draw(self, seq: Sequence, logits: np.ndarray, pick: int | None = None) -> int | None:
        """Sample the next token and apply the stop conditions (the order generate() had); pick:
        the greedy pick of the decode step's logits scan (Sampler.sample)."""
        if seq.max_tokens is not None and len(seq.generated) >= seq.max_tokens:
            seq.finish_reason = "length"
            return None
        if profiler.active() is None:
            token = seq.sampler.sample(logits, seq.history, pick)
        else:
            with profiler.span("sample"):
                token = seq.sampler.sample(logits, seq.history, pick)
        if self.model.tokenizer.is_eog(token) or token in seq.stop_ids:
            seq.finish_reason = "stop"
            return None
        if seq.logprobs is not None:
            seq.token_logprobs.append(_logprob(logits, token, seq.logprobs))
        seq.generated.append(token)
        seq.history.append(token)
        if seq._text is not None:
            seq._generated_text += seq._text.add(token)
            if any(s in seq._generated_text for s in seq.stop_text):
                seq.finish_reason = "stop"
                return token
        matcher = seq.sampler.matcher
        if matcher is not None and matcher.done:    # the grammar is complete: only EOS can follow
            seq.finish_reason = "stop"
            return token
        if seq.max_tokens is not None and len(seq.generated) >= seq.max_tokens:
            seq.finish_reason = "length"
            return token
        seq.next_token = token
        return token

    def run(self) -> None:
        """Step until every sequence has finished (they stay in self.seqs until released)."""
        while self.waiting or any(not s.finished for s in self.seqs.values()):
            self.step()


def _with_seed(params: SamplingParams, seed: int) -> SamplingParams:
    from dataclasses import replace
    return replace(params, seed=seed)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


def _logprob(logits: np.ndarray, token: int, top: int) -> TokenLogprob:
    """log-softmax of the raw logits at `token`, and the `top` best (ties to the lower id)."""
    x = logits.astype(np.float64)
    m = x.max()
    lse = m + np.log(np.exp(x - m).sum())
    best: list[tuple[int, float]] = []
    if top > 0:
        k = min(top, x.shape[0])
        ids = np.argpartition(-x, k - 1)[:k]
        ids = ids[np.lexsort((ids, -x[ids]))]
        best = [(int(i), float(x[i] - lse)) for i in ids]
    return TokenLogprob(int(token), float(x[token] - lse), best)
