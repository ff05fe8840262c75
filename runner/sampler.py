"""Token sampling on the host logits, with llama.cpp's semantics and default order.

The chain, as llama.cpp's common sampler builds it by default (logit bias first, then
"penalties; top_k; top_p; min_p; temperature", then the draw), after the grammar's mask:

0. grammar         with a grammar (cann_llm.grammar), the tokens it does not allow next are
                   set to -inf before anything else, so no bias or penalty brings them back;
                   the drawn token advances this sampler's own matcher.

1. logit_bias      logits[id] += bias; a bias of -inf bans the token.
2. penalties       over the last `repeat_last_n` tokens of the history (-1: all of it, 0: off).
                   A token seen `c` times: a positive logit is divided by repeat_penalty, a
                   negative (or zero) one multiplied by it; then
                   logit -= c * frequency_penalty + presence_penalty.
3. greedy          temperature <= 0: argmax of the penalised logits, ties to the lowest id.
4. top_k           the k highest logits (k <= 0 or k >= n_vocab: off); ties at the cut go to
                   the lowest ids.
5. top_p           softmax over the candidates left, sorted by probability; keep the shortest
                   prefix whose mass reaches p (p >= 1: off); at least one token.
6. min_p           keep tokens whose probability is at least min_p times the top one's
                   (min_p <= 0: off).
7. temperature     logits / temperature.
8. draw            one uniform number from a numpy Generator against the cumulative softmax.

Candidates are ordered by (logit descending, id ascending), so the result depends only on the
logits, the history, the settings and the seed: the same seed and settings give the same tokens.
Everything is vectorised numpy; with top_k set, the full vocabulary is touched only by a few
linear passes (argpartition, comparisons), well under a millisecond for a 150k vocabulary.
"""

from __future__ import annotations

import math
import os
from typing import Sequence

import numpy as np

from .sampling_params import SamplingParams

__all__ = ["Sampler", "SamplingParams"]


_D = SamplingParams()


def _finite(name: str, value) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return v


class Sampler:
    """Picks the next token from float32 logits [n_vocab] and the tokens seen so far."""

    def __init__(self, temperature=_D.temperature, top_k=_D.top_k, top_p=_D.top_p,
                 min_p=_D.min_p, repeat_penalty=_D.repeat_penalty,
                 repeat_last_n=_D.repeat_last_n, presence_penalty=_D.presence_penalty,
                 frequency_penalty=_D.frequency_penalty,
                 logit_bias: dict[int, float] | None = None, seed: int | None = None,
                 grammar=None):
        self.temperature = _finite("temperature", temperature)
        self.top_k = int(top_k)
        self.top_p = _finite("top_p", top_p)
        if not 0.0 <= self.top_p <= 1.0:
            raise ValueError(f"top_p must be in [0, 1], got {top_p!r}")
        self.min_p = _finite("min_p", min_p)
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {min_p!r}")
        self.repeat_penalty = _finite("repeat_penalty", repeat_penalty)
        if self.repeat_penalty <= 0.0:
            raise ValueError(f"repeat_penalty must be > 0, got {repeat_penalty!r}")
        self.repeat_last_n = int(repeat_last_n)
        if self.repeat_last_n < -1:
            raise ValueError(f"repeat_last_n must be >= -1, got {repeat_last_n!r}")
        self.presence_penalty = _finite("presence_penalty", presence_penalty)
        self.frequency_penalty = _finite("frequency_penalty", frequency_penalty)
        self._penalize = (self.repeat_last_n != 0 and (
            self.repeat_penalty != 1.0 or self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0))
        self.logit_bias = {}
        for token, bias in (logit_bias or {}).items():
            b = float(bias)
            if math.isnan(b) or b == math.inf:
                raise ValueError(f"logit_bias for token {token} must be a number or -inf")
            if int(token) < 0:
                raise ValueError(f"logit_bias token id {token} is negative")
            self.logit_bias[int(token)] = b
        self._bias_ids = np.fromiter(self.logit_bias.keys(), dtype=np.int64,
                                     count=len(self.logit_bias))
        self._bias_vals = np.fromiter(self.logit_bias.values(), dtype=np.float32,
                                      count=len(self.logit_bias))
        self._bias_bans_only = bool(self._bias_vals.size) and bool(np.all(self._bias_vals == -np.inf))
        self._bans_sorted = np.sort(self._bias_ids) if self._bias_bans_only else None
        if seed is None or int(seed) < 0:      # llama.cpp: -1 means a random seed
            seed = int.from_bytes(os.urandom(4), "little")
        self.seed = int(seed)
        self._generator = None                 # made at the first random draw (rng)
        self.grammar = grammar
        self.matcher = grammar.matcher() if grammar is not None else None

    @property
    def _rng(self) -> np.random.Generator:
        """The random stream of self.seed, made at the first draw: importing numpy.random costs
        a greedy run's first token several milliseconds for nothing."""
        if self._generator is None:
            self._generator = np.random.default_rng(self.seed)
        return self._generator

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    @property
    def greedy_bans(self) -> np.ndarray | None:
        """When this sampler's pick is the argmax of the raw logits without some banned ids
        (greedy, no penalties, no grammar, a logit bias of bans only or none): those ids,
        ascending (int64, maybe empty). A caller that scanned the logits for that pick
        (backend.logits_scan) passes it to sample(). None when sampling needs the logits."""
        if self.temperature > 0.0 or self._penalize or self.matcher is not None:
            return None
        if not self._bias_ids.size:
            return self._bias_ids
        return self._bans_sorted

    def reset(self, seed: int | None = None) -> None:
        """Restart the random stream (with the same seed unless one is given)."""
        if seed is not None:
            self.seed = int(seed)
        self._generator = None
        if self.grammar is not None:
            self.matcher = self.grammar.matcher()

    # -- the chain --------------------------------------------------------------------------

    def apply_penalties(self, logits: np.ndarray, history: Sequence[int]) -> np.ndarray:
        """Logit bias and repetition penalties; returns a new float32 array when anything
        applies, else `logits` itself."""
        n_vocab = logits.shape[0]
        out = logits
        if self._bias_ids.size:
            out = np.array(logits, dtype=np.float32, copy=True)
            ok = self._bias_ids < n_vocab
            np.add.at(out, self._bias_ids[ok], self._bias_vals[ok])
        if self._penalize and len(history):
            window = history if self.repeat_last_n < 0 else history[-self.repeat_last_n:]
            ids, counts = np.unique(np.asarray(window, dtype=np.int64), return_counts=True)
            keep = (ids >= 0) & (ids < n_vocab)
            ids, counts = ids[keep], counts[keep]
            if ids.size:
                if out is logits:
                    out = np.array(logits, dtype=np.float32, copy=True)
                v = out[ids]
                if self.repeat_penalty != 1.0:
                    v = np.where(v <= 0, v * np.float32(self.repeat_penalty),
                                 v / np.float32(self.repeat_penalty))
                v = v - (counts.astype(np.float32) * np.float32(self.frequency_penalty)
                         + np.float32(self.presence_penalty))
                out[ids] = v.astype(np.float32)
        return out

    def candidates(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Ids and float32 logits left after top_k, top_p and min_p (before temperature).

        Exact llama.cpp semantics without sorting the vocabulary: min_p keeps the tokens whose
        logit is at least max + log(min_p), a prefix of the sorted order independent of any
        normalisation; top_p keeps the shortest sorted prefix whose mass, normalised over all
        the candidates top_k left, reaches p. The result is the shorter of the two prefixes, so
        only the min_p survivors are sorted (or, with min_p off, a prefix grown geometrically
        until it holds the mass p). Ordered by logit descending, ties by id ascending, when
        top_p applies; by id otherwise."""
        n = logits.shape[0]
        if 0 < self.top_k < n:
            ids = self._top_ids(logits, self.top_k)
            vals = logits[ids]
        else:
            ids = None                       # the whole vocabulary
            vals = logits
        m = vals.max()
        if m == -np.inf:
            return np.empty(0, np.int64), np.empty(0, np.float32)
        if self.min_p > 0.0:
            keep = np.flatnonzero(vals >= np.float32(float(m) + math.log(self.min_p)))
        else:
            keep = np.flatnonzero(vals > -np.inf)
        if self.top_p < 1.0 and keep.size > 1:
            p = np.exp(vals - m)             # float32: vocabulary-wide float64 exp is slow
            total = float(p.sum(dtype=np.float64))
            if keep.size > 1024:             # min_p kept a lot: grow a sorted prefix
                k = 256
                while k < keep.size:
                    sub = keep[self._top_ids(vals[keep], k)]
                    if float(p[sub].sum(dtype=np.float64)) >= self.top_p * total:
                        keep = sub
                        break
                    k *= 4
            keep = keep[np.lexsort((keep, -vals[keep]))]
            cum = np.cumsum(p[keep], dtype=np.float64) / total
            last = int(np.searchsorted(cum, self.top_p, side="left")) + 1
            keep = keep[:min(last, keep.size)]
        if keep.size == vals.shape[0]:       # nothing cut: no vocabulary-wide gather
            return (np.arange(n) if ids is None else ids), vals
        if ids is None:
            return keep, vals[keep]
        return ids[keep], vals[keep]

    @staticmethod
    def _top_ids(logits: np.ndarray, k: int) -> np.ndarray:
        """Ids (ascending) of the k highest logits; ties at the k-th value go to the lowest ids.

        The partition runs on the logits within a few units of the maximum when at least k of
        them are there (the k-th value is then among them, so the result is the same), not on
        the whole vocabulary: two linear passes instead of a vocabulary-wide partition."""
        n = logits.shape[0]
        ids = None
        top = logits.max()
        if np.isfinite(top):
            for spread in (8.0, 32.0):
                near = np.flatnonzero(logits >= top - np.float32(spread))
                if near.size >= k:
                    ids = near
                    break
        vals = logits if ids is None else logits[ids]
        m = vals.shape[0]
        kth = np.partition(vals, m - k)[m - k]
        above = np.flatnonzero(vals > kth)
        tied = np.flatnonzero(vals == kth)[: k - above.size]
        picked = np.sort(np.concatenate((above, tied)))
        return picked if ids is None else ids[picked]

    def sample(self, logits: np.ndarray, history: Sequence[int] = (), pick: int | None = None) -> int:
        """The next token id for float32 logits [n_vocab] after the tokens in `history`. pick:
        backend.logits_scan's greedy pick over these logits, all finite, without greedy_bans
        (-1: every id banned); used only while greedy_bans is not None."""
        if pick is not None and self.greedy_bans is not None:
            if pick < 0:
                raise ValueError(self._all_banned())
            return pick
        if type(logits) is not np.ndarray:
            logits = np.asarray(logits)
        if logits.ndim != 1 or logits.shape[0] == 0:
            raise ValueError(f"logits must be a non-empty vector, got shape {logits.shape}")
        if logits.dtype != np.float32:
            logits = logits.astype(np.float32)
        # one pass: NaN propagates through max, and argmax stops at the first NaN (greedy
        # decoding's argmax is that pass); Python floats from here (a decode step's few checks)
        if self.greedy:
            best = int(logits.argmax())
            top = float(logits[best])
        else:
            best, top = None, float(logits.max())
        if top != top or top == math.inf:
            raise ValueError("logits hold NaN or +inf values: refusing to sample a token from them")
        if self.matcher is not None:
            logits = self.matcher.mask(logits)
            best = None                       # masked: the argmax may have moved
        token = self._greedy_biased(logits, history, best, top)
        if token is None:
            token = self._pick(self.apply_penalties(logits, history))
        if self.matcher is not None:
            self.matcher.accept(token)
        return token

    def _greedy_biased(self, logits: np.ndarray, history, best: int | None = None,
                       best_value: float | None = None) -> int | None:
        """Greedy decoding's pick (best: the argmax already taken) without copying the
        vocabulary for the logit bias (a decode step's common case: end-of-generation tokens
        banned): the argmax of the unbiased logits against the best biased token, ties to the
        lower id, as argmax over the biased copy would choose. None when this does not apply
        (sampling, penalties, or the argmax is a biased token itself). best_value: logits[best]
        as a Python float, when best is given."""
        if not self.greedy or (self._penalize and len(history)):
            return None
        if best is None:
            best = int(logits.argmax())
            best_value = None
        if best_value is None:
            best_value = float(logits[best])
        if not self._bias_ids.size:
            if best_value == -math.inf:
                raise ValueError(self._all_banned())
            return best
        if best in self.logit_bias:
            return None
        if self._bias_bans_only and best_value > -math.inf:
            return best                       # banned tokens (-inf) never beat a finite best
        ok = self._bias_ids < logits.shape[0]
        ids = self._bias_ids[ok]
        vals = logits[ids] + self._bias_vals[ok]
        value = logits[best]
        if vals.size:
            top = vals.max()
            if top >= value:
                first = int(ids[vals == top].min())
                if top > value or first < best:
                    best, value = first, top
        if value == -np.inf:
            raise ValueError(self._all_banned())
        return best

    def _pick(self, logits: np.ndarray) -> int:
        if self.greedy:
            best = int(np.argmax(logits))     # first maximum: the lowest id
            if logits[best] == -np.inf:
                raise ValueError(self._all_banned())
            return best
        ids, vals = self.candidates(logits)
        if ids.size == 0:
            raise ValueError(self._all_banned())
        if ids.size == 1:
            return int(ids[0])
        p = np.exp((vals - vals.max()) * np.float32(1.0 / self.temperature))
        cum = np.cumsum(p, dtype=np.float64)
        u = self._rng.random() * cum[-1]
        i = int(np.searchsorted(cum, u, side="right"))
        return int(ids[min(i, ids.size - 1)])

    def _all_banned(self) -> str:
        if self.matcher is not None:
            return ("every token is banned (all logits are -inf): the logit bias bans every "
                    "token the grammar allows")
        return "every token is banned (all logits are -inf)"

    def probabilities(self, logits: np.ndarray, history: Sequence[int] = ()):
        """(ids, probabilities) the draw would use: for tests and `--verbose` inspection."""
        logits = np.asarray(logits, dtype=np.float32)
        if self.matcher is not None:
            logits = self.matcher.mask(logits)
        logits = self.apply_penalties(logits, history)
        if self.greedy:
            return np.array([int(np.argmax(logits))]), np.array([1.0])
        ids, vals = self.candidates(logits)
        p = np.exp((vals - vals.max()) / self.temperature)
        return ids, p / p.sum()

    def __repr__(self):
        return (f"Sampler(temperature={self.temperature}, top_k={self.top_k}, top_p={self.top_p}, "
                f"min_p={self.min_p}, repeat_penalty={self.repeat_penalty}, "
                f"repeat_last_n={self.repeat_last_n}, presence_penalty={self.presence_penalty}, "
                f"frequency_penalty={self.frequency_penalty}, seed={self.seed})")
