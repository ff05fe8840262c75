"""The engine thread: the one thread that owns the model, and the bridge to the event loop.

Routes submit Jobs (one API request: its prompts and settings) from the event loop; this thread
loads the model, admits jobs into the runner's Engine between steps, runs one batched step at a
time, and posts each step's tokens back to the job's asyncio queue. Nothing on the event loop
waits on model work. Idle, the thread sleeps on a condition variable.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass, field

from .errors import APIError

__all__ = ["EngineLoop", "Job", "TokenEvent", "ServeConfig"]

log = logging.getLogger("cann_llm.server")


@dataclass
class ServeConfig:
    """What `cann-llm serve` was started with (the engine's side of it)."""
    model_path: str
    alias: str
    n_ctx: int = 4096                 # one sequence's context
    kv_size: int | None = None        # cells shared by all sequences (default parallel * n_ctx)
    parallel: int = 4
    queue_size: int = 64
    threads: int | None = None
    device: str = "CANN0"
    n_batch: int = 512
    chat_template: str | None = None
    embeddings: bool = False
    load_kwargs: dict = field(default_factory=dict)

    @property
    def cells(self) -> int:
        return self.kv_size or self.parallel * self.n_ctx


@dataclass
class TokenEvent:
    """One choice's news from one step: a token (None if it finished without one), its
    logprob record, and finish_reason/error once it has finished."""
    choice: int
    token: int | None
    logprob: object = None
    finish_reason: str | None = None
    error: BaseException | None = None


class Job:
    """One API request inside the engine: prompts (token ids), settings, and the queue its
    events arrive on (lists of TokenEvent, or an exception that failed the whole job)."""

    def __init__(self, prompts: list[list[int]], params, max_tokens: int | None, stop,
                 n: int = 1, logprobs: int | None = None):
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue = asyncio.Queue()
        self.prompts, self.params, self.max_tokens = prompts, params, max_tokens
        self.stop, self.n, self.logprobs = stop, n, logprobs
        self.seqs: list = []               # choice index -> Sequence, once admitted
        self.t_submit = time.perf_counter()
        self.t_first: float | None = None
        self.cancelled = False

    @property
    def n_choices(self) -> int:
        return len(self.prompts) * self.n

    def post(self, item) -> None:           # engine thread -> event loop
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)


def _deliver(batch) -> None:
    for job, evs in batch:
        job.queue.put_nowait(evs)


class EngineLoop:
    """Owns the model and the engine in a thread; submit()/cancel()/embed() from the loop."""

    def __init__(self, config: ServeConfig, metrics=None, on_ready=None):
        self.config = config
        self.metrics = metrics
        self.on_ready = on_ready
        self.model = None
        self.engine = None
        self.state = "loading"            # loading | ready | failed | stopped
        self.load_error: BaseException | None = None
        self._cv = threading.Condition()
        self._inbox: list = []
        self._stopping = False
        self._queued = 0                   # jobs submitted, not yet taken into the engine
        self._thread = threading.Thread(target=self._run, name="cann-llm-engine", daemon=True)

    # ---- event loop side ---------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        with self._cv:
            self._stopping = True
            self._cv.notify()
        self._thread.join(timeout)

    def require_ready(self) -> None:
        if self.state == "loading":
            raise APIError(503, "the model is still loading", code="loading",
                           headers={"Retry-After": "5"})
        if self.state != "ready":
            raise APIError(503, f"the model failed to load: {self.load_error}",
                           code="model_unavailable", headers={"Retry-After": "60"})

    def n_waiting(self) -> int:
        return self._queued + (self.engine.n_waiting if self.engine else 0)

    def submit(self, job: Job) -> None:
        """Queue a job, or 503 when the queue is full (Retry-After)."""
        self.require_ready()
        waiting = self.n_waiting()
        free_slots = max(self.config.parallel - len(self.engine.seqs), 0)
        if waiting + job.n_choices > self.config.queue_size + free_slots:
            raise APIError(503, f"the server is busy: {waiting} sequences are queued "
                                f"(--queue-size {self.config.queue_size}); retry later",
                           code="queue_full", headers={"Retry-After": "1"})
        with self._cv:
            self._queued += job.n_choices
            self._inbox.append(("submit", job))
            self._cv.notify()

    def cancel(self, job: Job) -> None:
        """Stop a job (its client went away): its sequences end within one step."""
        if job.cancelled:
            return
        job.cancelled = True
        with self._cv:
            self._inbox.append(("cancel", job))
            self._cv.notify()

    async def call(self, fn, *args):
        """Run fn(model, *args) on the engine thread between steps (embeddings)."""
        self.require_ready()
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._cv:
            self._inbox.append(("call", (fn, args, loop, future)))
            self._cv.notify()
        return await future

    # ---- engine thread ----------------------------------------------------------------------
    def _run(self) -> None:
        cfg = self.config
        try:
            from cann_llm.engine import Engine
            from cann_llm.model import load
            self.model = load(cfg.model_path, device=cfg.device, n_ctx=cfg.n_ctx,
                              n_cells=cfg.cells, n_threads=cfg.threads, n_batch=cfg.n_batch,
                              chat_template=cfg.chat_template, **cfg.load_kwargs)
            self.engine = Engine(self.model, max_running=cfg.parallel, max_context=cfg.n_ctx,
                                 prefix_cache=True)
        except BaseException as exc:        # reported by /health and every request
            self.load_error, self.state = exc, "failed"
            log.error("cann-llm serve: cannot load %s: %s", cfg.model_path, exc)
            if self.on_ready:
                self.on_ready(self)
            return
        self.state = "ready"
        if self.on_ready:
            self.on_ready(self)
        owners: dict[int, tuple[Job, int]] = {}      # id(Sequence) -> (job, choice)
        while True:
            with self._cv:
                while not self._inbox and not self._stopping and not self._has_work():
                    self._cv.wait()
                if self._stopping:
                    break
                inbox, self._inbox = self._inbox, []
            for kind, item in inbox:
                if kind == "submit":
                    self._queued -= item.n_choices
                    self._admit(item, owners)
                elif kind == "cancel":
                    for seq in item.seqs:
                        owners.pop(id(seq), None)
                        self.engine.release(seq, keep=True)
                else:
                    self._call(*item)
            if self._has_work():
                self._step(owners)
        self._shutdown(owners)

    def _has_work(self) -> bool:
        e = self.engine
        return e is not None and (bool(e.waiting) or any(not s.finished for s in e.seqs.values()))

    def _admit(self, job: Job, owners) -> None:
        if job.cancelled:
            return
        try:
            for prompt in job.prompts:
                seq = self.engine.add(prompt, job.params, max_tokens=job.max_tokens,
                                      stop=job.stop, n=job.n, logprobs=job.logprobs)
                for s in [seq] + seq.forks:
                    owners[id(s)] = (job, len(job.seqs))
                    job.seqs.append(s)
        except Exception as exc:            # checked by the route already; never lose the job
            for s in job.seqs:
                owners.pop(id(s), None)
                self.engine.release(s)
            job.post(exc)

    def _call(self, fn, args, loop, future) -> None:
        try:
            result, error = fn(self.model, *args), None
        except BaseException as exc:
            result, error = None, exc

        def settle():
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)
        loop.call_soon_threadsafe(settle)

    def _step(self, owners) -> None:
        try:
            events = self.engine.step()
        except Exception as exc:             # the forward failed: fail every admitted job
            log.error("cann-llm serve: a step failed: %s", exc)
            for job in {j for j, _ in owners.values()}:
                job.post(exc)
                for s in job.seqs:
                    self.engine.release(s)
            owners.clear()
            return
        now = time.perf_counter()
        per_job: dict[int, tuple[Job, list]] = {}
        m = self.metrics
        for seq, token in events:
            owner = owners.get(id(seq))
            if owner is None:
                continue
            job, choice = owner
            lp = seq.token_logprobs[-1] if token is not None and seq.logprobs is not None \
                else None
            ev = TokenEvent(choice, token, lp)
            if token is not None and m is not None:
                last = getattr(seq, "_t_last", None)
                if last is None:
                    if job.t_first is None:
                        job.t_first = now
                        m.ttft.observe(now - job.t_submit)
                else:
                    m.itl.observe(now - last)
                seq._t_last = now
            if seq.finished:
                ev.finish_reason, ev.error = seq.finish_reason, seq.error
                owners.pop(id(seq), None)
                self.engine.release(seq, keep=True)
            per_job.setdefault(id(job), (job, []))[1].append(ev)
        if per_job:       # one wake-up of the event loop per step, not one per job
            batch = list(per_job.values())
            batch[0][0].loop.call_soon_threadsafe(_deliver, batch)

    def _shutdown(self, owners) -> None:
        for job in {j for j, _ in owners.values()}:
            job.post(APIError(503, "the server is shutting down", code="shutting_down"))
        self.state = "stopped"
        if self.model is not None:
            self.model.close()
