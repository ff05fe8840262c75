"""Prometheus metrics for /metrics, through prometheus-client, in a registry per server.

Counters and histograms are updated by the routes and the engine thread; the engine's own
numbers (running and queued sequences, KV cells in use, prefix-cache and preemption counts)
are read when Prometheus scrapes, by a collector.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

__all__ = ["Metrics", "CONTENT_TYPE"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_LATENCY = (.005, .01, .02, .04, .06, .08, .1, .15, .2, .3, .5, .75, 1, 2.5, 5, 10, 20, 40, 80)


class Metrics:
    def __init__(self, engine_loop_getter):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("cann_llm_requests", "HTTP requests by route and status",
                                ["route", "status"], registry=r)
        self.prompt_tokens = Counter("cann_llm_prompt_tokens", "prompt tokens of finished "
                                     "requests", registry=r)
        self.generation_tokens = Counter("cann_llm_generation_tokens", "generated tokens",
                                         registry=r)
        self.ttft = Histogram("cann_llm_time_to_first_token_seconds", "time from a request's "
                              "arrival to its first token", buckets=_LATENCY, registry=r)
        self.itl = Histogram("cann_llm_inter_token_latency_seconds", "time between two tokens "
                             "of one sequence", buckets=_LATENCY, registry=r)
        self.e2e = Histogram("cann_llm_e2e_request_latency_seconds", "time from a request's "
                             "arrival to its last token", buckets=_LATENCY, registry=r)
        r.register(_EngineCollector(engine_loop_getter))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _EngineCollector:
    def __init__(self, getter):
        self._get = getter

    def describe(self):
        return []

    def collect(self):
        loop = self._get()
        engine = getattr(loop, "engine", None)
        running = waiting = used = total = 0
        stats = {"prefix_queries": 0, "prefix_hits": 0, "prefix_tokens": 0, "preemptions": 0}
        if engine is not None:
            running = sum(1 for s in list(engine.seqs.values()) if not s.finished)
            waiting = loop.n_waiting()
            used, total = engine.model.kv.n_used(), engine.model.kv.n_ctx
            stats = dict(engine.stats)
        yield GaugeMetricFamily("cann_llm_requests_running", "sequences holding KV cells and "
                                "decoding", value=running)
        yield GaugeMetricFamily("cann_llm_requests_waiting", "sequences queued for a slot",
                                value=waiting)
        yield GaugeMetricFamily("cann_llm_kv_cells_used", "KV cache cells in use (running "
                                "sequences and the prefix cache)", value=used)
        yield GaugeMetricFamily("cann_llm_kv_cells", "KV cache cells in all", value=total)
        yield CounterMetricFamily("cann_llm_prefix_cache_queries", "admissions that looked "
                                  "up the prefix cache", value=stats["prefix_queries"])
        yield CounterMetricFamily("cann_llm_prefix_cache_hits", "admissions that reused "
                                  "cached cells", value=stats["prefix_hits"])
        yield CounterMetricFamily("cann_llm_prefix_cache_hit_tokens", "prompt tokens whose "
                                  "cells came from the prefix cache", value=stats["prefix_tokens"])
        yield CounterMetricFamily("cann_llm_preemptions", "sequences preempted to free KV "
                                  "cells (they recompute)", value=stats["preemptions"])
