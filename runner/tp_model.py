"""TPModel: a model split over N tensor-parallel ranks, each a Ray actor owning one device.

Above runner/tensor_parallel.py: the driver keeps what Model keeps on the host (tokenizer, chat
template, the KV cells and their masks, sampling through Engine) and runs every micro-batch on
the ranks: the same inputs go to every rank (a Ray compiled graph, else plain actor calls), the
ranks' collectives run over HCCL between their devices, and rank 0 returns the logits. The
communicator comes from a RootInfo rank 0 makes and the others receive through Ray, because
each actor sees only its own NPU (Ray sets ASCEND_RT_VISIBLE_DEVICES for actors that request
the "NPU" resource).
"""

from __future__ import annotations

import logging
import os
import time

import numpy as np

from .kv_cache import KVCache, kv_type
from .model import Model
from .ray_local import local_ray_environment
from .tensor_parallel import TPError, plan_layout

__all__ = ["TPModel", "RankError"]


class RankError(RuntimeError):
    """A rank failed (its message says which and why); the model cannot run any more."""


def _import_ray():
    if not os.environ.get("RAY_ADDRESS"):
        local_ray_environment()          # a local Ray on loopback (before ray is imported)
    try:
        import ray
    except ImportError:
        raise RuntimeError("--tensor-parallel runs its ranks as Ray actors: install the extra "
                           "with pip install 'cann-llm[scale]'") from None
    return ray


def _reason(exc: BaseException) -> str:
    """The rank's own exception message out of Ray's wrapper (RayTaskError keeps it as
    .cause; an actor that died in its constructor says so in its message)."""
    cause = getattr(exc, "cause", None)
    text = str(cause if cause is not None else exc).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):           # a traceback ends with "Type: message"
        if ": " in ln and not ln.startswith((" ", "\t")):
            return ln.strip()
    return lines[-1].strip() if lines else type(exc).__name__


_own_ray_users = 0      # TPModels using the Ray session a TPModel started (the last shuts it)


def _start_ray(ray, n_ranks: int, acl_host: bool) -> bool:
    """Ray for the ranks: the cluster RAY_ADDRESS names (or one already initialized in this
    process), else a local single-node one (no dashboard). On acl_host the local one declares
    max(n_ranks, CANN_LLM_HOST_DEVICES) "NPU" resources, one per host device. True when
    this process's TPModels started it (the last of them to close shuts it down)."""
    global _own_ray_users
    if ray.is_initialized():
        if _own_ray_users:
            _own_ray_users += 1
            return True
        return False
    kwargs = dict(include_dashboard=False, logging_level=logging.ERROR, log_to_driver=True)
    if os.environ.get("RAY_ADDRESS"):
        ray.init(**kwargs)
    else:
        resources = {"NPU": _host_devices(n_ranks)} if acl_host else {}
        ray.init(address="local", resources=resources, **kwargs)
    _own_ray_users += 1
    return True


def _host_devices(n_ranks: int) -> int:
    try:
        declared = int(os.environ.get("CANN_LLM_HOST_DEVICES", "0") or 0)
    except ValueError:
        declared = 0
    return max(n_ranks, declared)


class TPModel(Model):
    """A Model whose forward pass runs on n_ranks tensor-parallel ranks (Ray actors, one device
    each). Everything Model does on the host (tokenize, generate, chat, Engine, embed) works as
    there; an eval callback (the diff tool) needs a single-process model. compiled_graph: each
    step through a Ray compiled graph (default), else plain actor calls."""

    pick_on_device = False      # rank 0 returns the gathered logits: the host scans them

    def __init__(self, path, n_ranks: int, device="CANN0", n_ctx=4096, n_threads=None,
                 n_batch=512, flash_attn=True, convert=None, verbose=False, log=None,
                 check_weights=True, chat_template=None, type_k="f16", type_v="f16",
                 n_cells=None, compiled_graph: bool = True):
        t0 = time.perf_counter()
        self._actors, self._dag, self._ray = [], None, None
        self._own_ray, self._failed = False, None
        type_k, type_v = kv_type(type_k, "type_k"), kv_type(type_v, "type_v")
        if str(device).upper() != "CANN0":
            raise ValueError(f"--tensor-parallel places one rank per device through Ray's NPU "
                             f"resource (ASCEND_RT_VISIBLE_DEVICES); --device {device} cannot be "
                             f"combined with it")
        self._init_front(path, n_ctx, n_batch, n_cells, flash_attn, chat_template, log, verbose)
        hp = self.hparams
        self.layout = plan_layout(hp, n_ranks)          # TPError before any process starts
        self.n_ranks = n = self.layout.n_ranks
        from . import backend as be
        ray = self._ray = _import_ray()
        self._own_ray = _start_ray(ray, n, be.runtime_name() == "acl_host")
        free = ray.available_resources().get("NPU", 0)
        deadline = time.monotonic() + 15
        while free < n and ray.cluster_resources().get("NPU", 0) >= n and \
                time.monotonic() < deadline:        # ranks of a model just closed are exiting
            time.sleep(0.1)
            free = ray.available_resources().get("NPU", 0)
        if free < n:
            self.close()
            raise RuntimeError(f"--tensor-parallel {n} needs {n} free NPU resources in Ray, it "
                               f"has {free:g} (on acl_host: CANN_LLM_HOST_DEVICES >= {n}; on a "
                               f"cluster: ray start --resources '{{\"NPU\": ...}}')")
        threads = n_threads if n_threads is not None else max(1, (os.cpu_count() or 1) // n)
        env = {"CANN_LLM_THREADS": str(int(threads))}
        if be.runtime_name() == "acl_host":     # every NPU id Ray may hand out is a host device
            total = int(ray.cluster_resources().get("NPU", 0))
            env["CANN_LLM_HOST_DEVICES"] = str(max(_host_devices(n), total))
        load_kwargs = dict(n_ctx=self.n_ctx, n_batch=self.n_batch, n_cells=self.n_cells,
                           flash_attn=self.flash_attn, convert=convert, check_weights=check_weights,
                           type_k=type_k, type_v=type_v)
        from .tensor_parallel import TPRank
        rank_cls = ray.remote(TPRank)
        try:
            self._actors = [rank_cls.options(num_cpus=0, resources={"NPU": 1}, max_restarts=0,
                                             runtime_env={"env_vars": env}).remote(
                                str(path), n, r, **load_kwargs) for r in range(n)]
            root = ray.get(self._actors[0].root_info.remote())
            ray.get([a.join.remote(root) for a in self._actors])   # all at once: each waits
            self.rank_devices = ray.get([a.visible_device.remote() for a in self._actors])
        except Exception as exc:
            self.close()
            if isinstance(exc, (TPError, MemoryError)):
                raise
            raise RankError(f"starting the tensor-parallel ranks failed: {_reason(exc)}") from None
        self._dag = self._compile() if compiled_graph else None
        self.devices = [f"CANN{d}" for d in self.rank_devices]
        self.kv = KVCache(hp.n_layer, 0, 0, self.n_cells, None)      # cells only: K, V on ranks
        self._timings["load_ms"] = (time.perf_counter() - t0) * 1e3
        if verbose:
            self._log(self.describe())

    def _compile(self):
        """The ranks' forward as a Ray compiled graph (channels set up once: a step costs a
        fraction of a millisecond instead of an actor call each), None when Ray cannot compile
        it here; then forward() calls the actors."""
        from ray.dag import InputNode, MultiOutputNode
        try:
            with InputNode() as request:
                dag = MultiOutputNode([a.forward.bind(request) for a in self._actors])
            return dag.experimental_compile()
        except Exception as exc:        # noqa: BLE001 - plain actor calls still work
            self._log(f"cann-llm: tensor parallel: Ray compiled graphs unavailable "
                      f"({_reason(exc)}); calling the actors")
            return None

    def _forward(self, n_tokens, n_kv, n_outputs, values, eval_callback, embeddings):
        if eval_callback is not None:
            raise ValueError("an eval callback (cann-llm diff) sees one process's nodes: load "
                             "the model without --tensor-parallel")
        if self._failed is not None:
            raise RankError(f"the tensor-parallel ranks failed earlier: {self._failed}")
        ray = self._ray
        request = (n_tokens, n_kv, n_outputs, bool(embeddings),
                   {k: np.ascontiguousarray(v) for k, v in values.items()})
        try:
            if self._dag is not None:      # -1: no limit (Ray's default is 10 s; a long
                # prefill may take longer, and the ranks' HCCL deadline bounds every wait)
                outs = ray.get(self._dag.execute(request), timeout=-1)
            else:
                outs = ray.get([a.forward.remote(request) for a in self._actors])
        except Exception as exc:
            self._failed = _reason(exc)
            raise RankError(f"a tensor-parallel rank failed: {self._failed}") from None
        return {"embd" if embeddings else "logits": outs[0]}

    def _forward_step(self, n_tokens, n_kv, values):
        return self._forward(n_tokens, n_kv, n_tokens, values, None, False)["logits"], None

    def describe(self) -> str:
        hp = self.hparams
        lines = [f"model: {hp.arch}, {hp.n_layer} layers, n_embd {hp.n_embd}, n_head "
                 f"{hp.n_head}/{hp.n_head_kv}, vocab {hp.n_vocab}; tensor parallel over "
                 f"{self.n_ranks} ranks (Ray actors)"]
        for r, text in enumerate(self._ray.get([a.describe.remote() for a in self._actors])):
            lines.append(f"rank {r} ({self.devices[r]}): " + text.replace("\n", "\n  "))
        return "\n".join(lines)

    def close(self):
        ray = self._ray
        if ray is None:
            return
        if self._dag is not None:
            # a graph whose actors died cannot cancel their tasks: Ray logs that as an error
            dag_log = logging.getLogger("ray.dag.compiled_dag_node")
            level = dag_log.level
            dag_log.setLevel(logging.CRITICAL if self._failed else level)
            try:
                self._dag.teardown()
            except Exception:       # noqa: BLE001 - tearing down a graph of dead actors
                pass
            finally:
                dag_log.setLevel(level)
            self._dag = None
        if ray.is_initialized():
            for a in self._actors:
                try:
                    ray.kill(a)
                except Exception:   # noqa: BLE001 - an actor of a session already gone
                    pass
        self._actors = []
        global _own_ray_users
        if self._own_ray:
            _own_ray_users -= 1
            if _own_ray_users == 0 and ray.is_initialized():
                ray.shutdown()
        self._own_ray = False
        self._ray = None
