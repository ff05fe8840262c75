"""The engine: several sequences sharing one model and its unified KV cache.

Sits between the users (Model.generate/chat, the CLI, the server) and Model.decode: each
sequence has an id (its bit in the KV cells), its own positions, prompt and sampler. step() is
one batched forward over every decoding sequence's last token plus at most one prefill chunk,
then one draw per sequence that got logits. acl_host is batch-invariant, so a sequence gives the
same tokens alone or alongside others. Not thread-safe: one step at a time.
"""

from __future__ import annotations

import time
from typing import Iterable

import numpy as np

from .kv_cache import MAX_SEQ, ContextFullError
from .model import Batch
from .sampler import SamplingParams

__all__ = ["Engine", "Sequence"]


class Sequence:
    """One request: its prompt still to prefill, the tokens its cells hold, its sampler and its
    stop conditions. finish_reason is None while it runs, then "stop" (end of generation, a
    stop token or text), "length" (max_tokens) or "cancelled"; error holds an exception that
    ended it (the context is full)."""

    def __init__(self, seq_id: int, params: SamplingParams, max_tokens: int, stop, tokenizer):
        self.id = seq_id
        self.params = params
        self.sampler = params.sampler()
        self.max_tokens = int(max_tokens)
        self.tokens: list[int] = []          # in the cache (positions 0..len-1)
        self.pending: list[int] = []         # prompt tokens still to prefill
        self.next_token: int | None = None   # sampled, not yet in the cache
        self.history: list[int] = []         # prompt + generated (the penalties' window)
        self.generated: list[int] = []
        self.n_prompt = 0
        self.finish_reason: str | None = None
        self.error: BaseException | None = None
        self.stop_ids, self.stop_text = set(), []
        for s in ([stop] if isinstance(stop, (str, int)) else (stop or [])):
            if isinstance(s, str):
                self.stop_text.append(s)
            else:
                self.stop_ids.add(int(s))
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
    """Sequences over one Model: add() a prompt, step() until the sequences finish."""

    def __init__(self, model):
        self.model = model
        self.seqs: dict[int, Sequence] = {}     # active ones, in the order they were added

    # ---- sequences ---------------------------------------------------------------------------
    def _free_id(self) -> int:
        for i in range(MAX_SEQ):
            if i not in self.seqs:
                return i
        raise RuntimeError(f"all {MAX_SEQ} sequence ids are in use")

    def add(self, prompt: Iterable[int], params: SamplingParams | None = None,
            max_tokens: int = 128, stop=None, seq_id: int | None = None,
            cached: list[int] | None = None) -> Sequence:
        """Start a sequence on `prompt` (token ids). seq_id None: the lowest free id. `cached`:
        the tokens the cells of seq_id already hold (from a sequence released with keep=True);
        their common prefix with the prompt is reused, the rest of seq_id's cells are dropped."""
        ids = [int(i) for i in prompt]
        if not ids:
            raise ValueError("a sequence needs at least one prompt token")
        n_ctx = self.model.n_ctx
        if len(ids) > n_ctx:
            raise ContextFullError(f"the prompt has {len(ids)} tokens, the context holds "
                                   f"{n_ctx}; load the model with a larger n_ctx or use a "
                                   f"shorter prompt")
        if seq_id is None:
            seq_id = self._free_id()
        elif seq_id in self.seqs:
            raise ValueError(f"sequence {seq_id} is already running")
        elif not 0 <= seq_id < MAX_SEQ:
            raise ValueError(f"sequence ids must be in 0..{MAX_SEQ - 1}")
        seq = Sequence(seq_id, params or SamplingParams(), max_tokens, stop,
                       self.model.tokenizer)
        kv = self.model.kv
        common = 0
        if cached and kv.seq_pos_max(seq_id) == len(cached) - 1:   # the cells still hold them
            for a, b in zip(cached, ids):
                if a != b:
                    break
                common += 1
            common = min(common, len(ids) - 1)   # at least one token to get logits from
        kv.seq_rm(seq_id, common, None)
        seq.tokens = ids[:common]
        seq.pending = ids[common:]
        seq.history = list(ids)
        seq.n_prompt = len(ids)
        self.seqs[seq_id] = seq
        return seq

    def release(self, seq: Sequence, keep: bool = False) -> None:
        """End a sequence (cancelled if it was running) and free its cells; keep=True leaves
        them for a later add(..., cached=seq.tokens)."""
        if not seq.finished:
            seq.finish_reason = "cancelled"
        if self.seqs.get(seq.id) is seq:
            del self.seqs[seq.id]
        if not keep:
            self.model.kv.seq_rm(seq.id, None, None)

    # ---- one step --------------------------------------------------------------------------
    def step(self) -> list[tuple[Sequence, int | None]]:
        """One forward: the sampled token of every decoding sequence plus one prefill chunk (up
        to n_batch tokens in all). Returns (sequence, token) for every sequence that drew a token
        or finished in this step (token None when it finished without one)."""
        model = self.model
        events: list[tuple[Sequence, int | None]] = []
        rows: list[tuple[Sequence, int]] = []     # (sequence, tokens it puts in the batch)
        for seq in self.seqs.values():
            if seq.finished or seq.next_token is None:
                continue
            if seq.n_past >= model.n_ctx:
                seq.error = ContextFullError(f"generation reached the end of the context "
                                             f"(n_ctx={model.n_ctx})")
                seq.finish_reason = "length"
                events.append((seq, None))
                continue
            rows.append((seq, 1))
        budget = max(model.n_batch - len(rows), 1)
        prefill = next((s for s in self.seqs.values() if s.pending and not s.finished), None)
        if prefill is not None:
            rows.append((prefill, min(len(prefill.pending), budget)))
        if not rows:
            return events
        tokens, pos, seq_ids, want = [], [], [], []
        for seq, n in rows:
            todo = [seq.next_token] if seq is not prefill else seq.pending[:n]
            tokens += todo
            pos += range(seq.n_past, seq.n_past + n)
            seq_ids += [seq.id] * n
            want += [False] * (n - 1) + [seq is not prefill or n == len(seq.pending)]
        try:
            logits = model.decode(Batch(tokens, pos, seq_ids, want))
        except BaseException:               # micro-batches that went in before the failure
            for seq, _ in rows:
                model.kv.seq_rm(seq.id, seq.n_past, None)
            raise
        now = time.perf_counter()
        row = 0
        for seq, n in rows:
            if seq is prefill:
                seq.tokens += seq.pending[:n]
                del seq.pending[:n]
                if seq.pending:
                    continue
                seq.t_prompt_done = now
            else:
                seq.tokens.append(seq.next_token)
                seq.next_token = None
            try:
                token = self._draw(seq, logits[row])
            except ValueError as exc:       # e.g. logit_bias banned every token
                seq.error, seq.finish_reason, token = exc, "error", None
            row += 1
            events.append((seq, token))
        return events

    def _draw(self, seq: Sequence, logits: np.ndarray) -> int | None:
        """Sample the next token and apply the stop conditions (the order generate() had)."""
        if len(seq.generated) >= seq.max_tokens:
            seq.finish_reason = "length"
            return None
        token = seq.sampler.sample(logits, seq.history)
        if self.model.tokenizer.is_eog(token) or token in seq.stop_ids:
            seq.finish_reason = "stop"
            return None
        seq.generated.append(token)
        seq.history.append(token)
        if seq._text is not None:
            seq._generated_text += seq._text.add(token)
            if any(s in seq._generated_text for s in seq.stop_text):
                seq.finish_reason = "stop"
                return token
        if len(seq.generated) >= seq.max_tokens:
            seq.finish_reason = "length"
            return token
        seq.next_token = token
        return token

    def run(self) -> None:
        """Step until every sequence has finished (they stay in self.seqs until released)."""
        while any(not s.finished for s in self.seqs.values()):
            self.step()
