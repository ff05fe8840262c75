"""The request router of `serve --replicas`: prompt-prefix affinity, bounded by load, on Ray
Serve's public request-router interface (ray.serve.request_router). PrefixTable is the plain
bookkeeping (no Ray); PromptPrefixRouter is the Serve router that consults it.

A request with a prompt goes to a replica that was recently sent the longest prefix of it (its
prefix cache probably still holds those cells), or, with no prefix worth following, to the
replica that was sent the least prompt text, so new conversations spread out. Load bounds the
affinity: when the chosen replica has more than `imbalance` requests in flight beyond the least
loaded one, the least loaded gets the request. Requests without a prompt (/health,
/v1/models, ...) go to the less loaded of two replicas picked at random.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter, OrderedDict

from ray.serve.request_router import RequestRouter

__all__ = ["PrefixTable", "prefix_keys", "PromptPrefixRouter"]

BLOCK = 64                  # prompt characters per prefix block
MAX_BLOCKS = 256            # a prompt's first 16 Ki characters are tracked
CAPACITY = 1 << 18          # prefix blocks remembered (least recently used forgotten first)


def prefix_keys(text: str, block: int = BLOCK, limit: int = MAX_BLOCKS) -> list[bytes]:
    """One key per whole block of `text`: key i names text[:(i + 1) * block] (a running hash,
    so equal keys mean equal prefixes, and computing them all is linear)."""
    h = hashlib.blake2b(digest_size=16)
    data = text.encode("utf-8", "surrogatepass")
    keys = []
    for start in range(0, min(len(data) // block, limit) * block, block):
        h.update(data[start:start + block])
        keys.append(h.digest())
    return keys


class PrefixTable:
    """Which replicas were sent which prompt prefixes: block key -> replica ids, oldest key
    first, at most `capacity` keys; and how many characters each replica holds."""

    def __init__(self, block: int = BLOCK, capacity: int = CAPACITY):
        self.block, self.capacity = block, capacity
        self._owners: OrderedDict[bytes, set[str]] = OrderedDict()
        self.chars: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._owners)

    def match(self, keys: list[bytes], replicas) -> tuple[int, set[str]]:
        """(blocks, holders): the longest prefix that some of `replicas` hold, in blocks, and
        which of them hold all of it ((0, empty) when none holds the first block)."""
        holders, depth = set(replicas), 0
        for key in keys:
            common = holders & self._owners.get(key, set())
            if not common:
                break
            holders, depth = common, depth + 1
        return (depth, holders) if depth else (0, set())

    def insert(self, keys: list[bytes], replica: str) -> None:
        for key in keys:
            owners = self._owners.get(key)
            if owners is None:
                owners = self._owners[key] = set()
            else:
                self._owners.move_to_end(key)
            if replica not in owners:
                owners.add(replica)
                self.chars[replica] += self.block
        while len(self._owners) > self.capacity:
            _, owners = self._owners.popitem(last=False)
            for r in owners:
                self.chars[r] -= self.block

    def forget(self, replica: str) -> None:
        """Drop a replica that is gone (a restarted replica starts with an empty cache)."""
        for key in [k for k, owners in self._owners.items() if replica in owners]:
            owners = self._owners[key]
            owners.discard(replica)
            if not owners:
                del self._owners[key]
        self.chars.pop(replica, None)


def prompt_of(pending_request) -> str | None:
    """The prompt the ingress named on the call's argument (replicas.Forwarded.prompt)."""
    for arg in getattr(pending_request, "args", None) or ():
        text = getattr(arg, "prompt", None)
        if isinstance(text, str) and text:
            return text
    return None


def choose(table: PrefixTable, keys: list[bytes], n_chars: int, loads: dict[str, int],
           imbalance: float, min_match: float) -> str:
    """The replica for a prompt (`keys`, `n_chars` long) among `loads` (replica id -> requests
    in flight): the holders of its longest prefix when it covers at least `min_match` of the
    prompt, else the replicas holding the least text; the least loaded of those; the least
    loaded of all when that one is more than `imbalance` requests busier."""
    depth, holders = table.match(keys, loads)
    if not holders or depth * table.block < min_match * n_chars:
        least = min(table.chars.get(r, 0) for r in loads)
        holders = {r for r in loads if table.chars.get(r, 0) == least}
    pick = min(holders, key=lambda r: (loads[r], random.random()))
    lowest = min(loads.values())
    if loads[pick] - lowest > imbalance:
        pick = min(loads, key=lambda r: (loads[r], table.chars.get(r, 0), random.random()))
    return pick


class PromptPrefixRouter(RequestRouter):
    """Serve's router for the engine deployment (RequestRouterConfig.request_router_kwargs:
    imbalance, min_match, capacity). Its state is its own: one router per ingress replica.
    Load is counted here, per replica, from the moment a request is assigned until Serve
    reports it completed: Serve's queue-length cache learns of a request only once it is sent,
    too late for requests that arrive together."""

    def initialize_state(self, imbalance: float = 4, min_match: float = 0.1,
                         capacity: int = CAPACITY, **_) -> None:
        self._table = PrefixTable(capacity=capacity)
        self._imbalance, self._min_match = imbalance, min_match
        self._inflight: dict[str, tuple[str, object]] = {}   # request id -> (replica, request)
        self._done: OrderedDict[str, None] = OrderedDict()   # completed before reported routed

    def _loads(self, replicas) -> dict[str, int]:
        loads = dict.fromkeys(replicas, 0)
        for key, (replica, request) in list(self._inflight.items()):
            if request.future.cancelled():          # given up before it was sent
                del self._inflight[key]
            elif replica in loads:
                loads[replica] += 1
        return loads

    async def choose_replicas(self, candidate_replicas, pending_request=None):
        if pending_request is not None:
            # back off between rounds when every replica is full, instead of spinning
            pending_request.routing_context.should_backoff = True
        if not candidate_replicas:
            return []
        prompt = prompt_of(pending_request)
        if prompt is None or len(candidate_replicas) == 1:
            return [random.sample(candidate_replicas, min(2, len(candidate_replicas)))]
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        loads = self._loads(by_id)
        keys = prefix_keys(prompt)
        pick = choose(self._table, keys, min(len(prompt), MAX_BLOCKS * BLOCK), loads,
                      self._imbalance, self._min_match)
        # counted now, so that prompts arriving together see each other
        self._table.insert(keys, pick)
        self._inflight[pending_request.metadata.internal_request_id] = (pick, pending_request)
        rest = sorted((r for i, r in by_id.items() if i != pick), key=lambda r: loads[
            r.replica_id.unique_id])
        return [[by_id[pick]], rest]

    def on_request_routed(self, pending_request, replica_id, result) -> None:
        """The replica that took the request (not the chosen one when that one was full)
        holds its prefix and counts it."""
        request_id = pending_request.metadata.internal_request_id
        if self._done.pop(request_id, False) is None:
            self._inflight.pop(request_id, None)
        else:
            self._inflight[request_id] = (replica_id.unique_id, pending_request)
        prompt = prompt_of(pending_request)
        if prompt is not None:
            self._table.insert(prefix_keys(prompt), replica_id.unique_id)

    def on_request_completed(self, replica_id, internal_request_id: str) -> None:
        entry = self._inflight.pop(internal_request_id, None)
        if entry is None or entry[0] != replica_id.unique_id:     # not reported routed yet
            self._done[internal_request_id] = None
            while len(self._done) > 1024:
                self._done.popitem(last=False)

    def on_replica_actor_died(self, replica_id) -> None:
        super().on_replica_actor_died(replica_id)
        self._table.forget(replica_id.unique_id)

    def update_replicas(self, replicas) -> None:
        gone = {r.unique_id for r in self.curr_replicas} - \
            {r.replica_id.unique_id for r in replicas}
        super().update_replicas(replicas)
        table = getattr(self, "_table", None)
        for replica in gone if table is not None else ():
            table.forget(replica)
