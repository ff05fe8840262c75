"""`cann-llm serve --replicas N`: N engine replicas behind one OpenAI endpoint, on Ray Serve.

Ray Serve places the replicas (each asks for its NPUs through Ray's "NPU" resource, and Ray sets
ASCEND_RT_VISIBLE_DEVICES for it, so a replica sees its devices as CANN0, CANN1, ...), checks
their health and restarts one that dies. One Serve application:

    Serve's HTTP proxy (--host, --port)
      -> Ingress, one replica: reads the request, names its prompt, forwards it through a
         DeploymentHandle whose router (replicas_router.py) picks an engine replica by prompt
         prefix and load; turns a replica's failure into an OpenAI error (before the response
         starts) or an error event ending the SSE stream (after)
      -> EngineReplica x N: each runs the single-process server's own FastAPI application
         (app.create_app) and engine thread, so routes, validation, streaming and errors are
         the same code as `cann-llm serve` without --replicas

Every response names the replica that answered in the X-Cann-Llm-Replica header (its Serve id,
pid and devices): for debugging, and for the tests. run() is the driver: it starts (or joins)
Ray, deploys the application, and takes everything down on SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import threading
from dataclasses import dataclass

from cann_llm.ray_local import local_ray_environment

from .errors import APIError

__all__ = ["Forwarded", "prompt_text", "EngineReplica", "Ingress", "build_app", "run",
           "ReplicasError", "REPLICA_HEADER", "ROUTER"]

REPLICA_HEADER = "x-cann-llm-replica"
GENERATION_PATHS = ("/v1/chat/completions", "/v1/completions")
ROUTER = "cann_llm.server.replicas_router:PromptPrefixRouter"
APP_NAME = "cann-llm"


class ReplicasError(Exception):
    """A reason `serve --replicas` cannot start, as one line (the CLI prints it)."""


@dataclass
class Forwarded:
    """One HTTP request on its way from the ingress to an engine replica. `prompt` is the text
    the router matches by prefix (None for requests that generate nothing)."""
    method: str
    path: str
    raw_path: bytes
    query_string: bytes
    headers: list
    body: bytes
    client: tuple | None = None
    prompt: str | None = None


def prompt_text(path: str, body: bytes) -> str | None:
    """The prompt of a chat or completion request as one string, for prefix matching: the
    messages' text contents in order, or the (first) prompt. None when the body is not such a
    request (the engine replica then answers with the 400)."""
    if path not in GENERATION_PATHS:
        return None
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    if path == "/v1/chat/completions":
        parts = []
        for m in data.get("messages") or []:
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts.extend(p["text"] for p in content
                             if isinstance(p, dict) and isinstance(p.get("text"), str))
        return "\n".join(parts) or None
    prompt = data.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]                      # the first of several prompts
    if isinstance(prompt, list):                # token ids
        prompt = " ".join(str(t) for t in prompt)
    return prompt if isinstance(prompt, str) and prompt else None


class EngineReplica:
    """One replica: the model on this replica's devices, behind create_app's application.
    The constructor returns once the model is loaded, so Serve routes nothing to a replica that
    is still loading, and a model that fails to load fails the replica."""

    def __init__(self, config, api_key=None, cors_origins=(), max_body=16 * 2**20):
        from ray import serve

        from .app import create_app
        ready = threading.Event()
        self.app = create_app(config, api_key=api_key, cors_origins=cors_origins,
                              max_body=max_body, on_ready=lambda loop: ready.set())
        self.loop = self.app.state.engine_loop
        self.loop.start()           # what the app's lifespan does under uvicorn
        ready.wait()
        if self.loop.state != "ready":
            raise RuntimeError(f"cannot load {config.model_path}: {self.loop.load_error}")
        npus = os.environ.get("ASCEND_RT_VISIBLE_DEVICES")
        self.identity = (f"id={serve.get_replica_context().replica_tag} pid={os.getpid()} "
                         f"devices={','.join(self.loop.model.devices)}"
                         + (f" npu={npus}" if npus is not None else ""))

    def check_health(self) -> None:
        """Serve calls this every few seconds; raising marks the replica unhealthy, and Serve
        replaces it."""
        if self.loop.state != "ready" or not self.loop._thread.is_alive():
            raise RuntimeError(f"the engine thread is {self.loop.state}")

    def __del__(self):
        """Serve's graceful shutdown, once the requests in flight have finished."""
        loop = getattr(self, "loop", None)
        if loop is not None:
            loop.stop()

    async def __call__(self, req: Forwarded):
        """Run the request through the application; yield its ASGI messages (the response
        start, then the body's parts as they come). Cancelled (the client went away): the
        application sees http.disconnect, as it would under uvicorn."""
        queue: asyncio.Queue = asyncio.Queue()
        gone = asyncio.Event()
        body_sent = False

        async def receive():
            nonlocal body_sent
            if not body_sent:
                body_sent = True
                return {"type": "http.request", "body": req.body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [
                    *message.get("headers", []),
                    (REPLICA_HEADER.encode(), self.identity.encode())]}
            queue.put_nowait(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": req.method, "scheme": "http", "path": req.path,
                 "raw_path": req.raw_path, "query_string": req.query_string,
                 "root_path": "", "headers": req.headers, "client": req.client,
                 "server": None, "state": {}}
        task = asyncio.ensure_future(self.app(scope, receive, send))
        task.add_done_callback(lambda _: queue.put_nowait(None))
        ended = False
        try:
            while (message := await queue.get()) is not None:
                yield message
                ended = message["type"] == "http.response.body" and \
                    not message.get("more_body")
            if not ended and not task.cancelled() and task.exception() is not None:
                raise task.exception()
        finally:
            gone.set()
            if not task.done():
                try:
                    await asyncio.wait_for(asyncio.shield(task), 5)
                except (asyncio.TimeoutError, asyncio.CancelledError):
                    task.cancel()


class Ingress:
    """The one deployment Serve's proxy calls: forwards each request to an engine replica
    through a handle, and reports a replica's failure as the single-process server reports
    its own (an OpenAI error, or an error event and [DONE] inside an SSE stream)."""

    def __init__(self, engine, max_body: int = 16 * 2**20):
        self.engine = engine
        self.max_body = max_body

    async def _body(self, request) -> bytes | None:
        parts, seen = [], 0
        async for chunk in request.stream():
            seen += len(chunk)
            if seen > self.max_body:
                return None
            parts.append(chunk)
        return b"".join(parts)

    async def __call__(self, request):
        from starlette.responses import StreamingResponse

        body = await self._body(request)
        if body is None:
            return APIError(413, f"the request body is larger than {self.max_body} bytes",
                            code="body_too_large").response()
        scope = request.scope
        fwd = Forwarded(method=scope["method"], path=scope["path"],
                        raw_path=scope.get("raw_path") or scope["path"].encode(),
                        query_string=scope.get("query_string", b""),
                        headers=list(scope.get("headers") or []), body=body,
                        client=tuple(scope["client"]) if scope.get("client") else None,
                        prompt=prompt_text(scope["path"], body))
        stream = self.engine.options(stream=True).remote(fwd)
        try:
            start = await stream.__anext__()
        except asyncio.CancelledError:
            stream.cancel()
            raise
        except Exception as exc:        # the replica died, or none could take the request
            return failure(exc).response()
        headers = list(start.get("headers") or [])
        sse = any(k.lower() == b"content-type" and v.startswith(b"text/event-stream")
                  for k, v in headers)

        async def body_parts():
            finished = False
            try:
                async for message in stream:
                    if message["type"] == "http.response.body":
                        if message.get("body"):
                            yield message["body"]
                        if not message.get("more_body"):
                            break
                finished = True
            except Exception as exc:
                if not sse:
                    raise                   # a plain body cannot carry it: the connection drops
                event = json.dumps(failure(exc).body(), separators=(",", ":"))
                yield f"data: {event}\n\n".encode()
                yield b"data: [DONE]\n\n"
                finished = True
            finally:
                if not finished:
                    stream.cancel()

        response = StreamingResponse(body_parts(), status_code=start["status"])
        response.raw_headers = headers
        return response


def failure(exc: BaseException) -> APIError:
    """A handle call's exception as the client's error: 503 for a replica that died or could
    not take the request (worth retrying), 500 for anything else."""
    from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError
    from ray.serve.exceptions import BackPressureError

    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, BackPressureError):
        return APIError(503, "every replica is busy and the queue is full; retry later",
                        code="queue_full", headers={"Retry-After": "1"})
    if isinstance(exc, (ActorDiedError, ActorUnavailableError, RayActorError)):
        return APIError(503, f"the replica serving this request failed ({type(exc).__name__}); "
                             f"retry", code="replica_failed", headers={"Retry-After": "1"})
    return APIError(500, f"internal error: {type(exc).__name__}: {first}".rstrip(": "))


def build_app(config, replicas: int, npus_per_replica: int, api_key=None, cors_origins=(),
              max_body: int = 16 * 2**20, drain_timeout: float = 30.0):
    """The Serve application: the ingress bound to N engine replicas, each asking Ray for
    npus_per_replica NPUs (none on the CPU reference)."""
    from ray import serve
    from ray.serve.config import RequestRouterConfig

    actor_options: dict = {"num_cpus": 0}
    if npus_per_replica:
        actor_options["resources"] = {"NPU": npus_per_replica}
    engine = serve.deployment(EngineReplica, name="engine").options(
        num_replicas=replicas, ray_actor_options=actor_options,
        # a replica takes what its engine queues; past that, the ingress's router holds
        # requests (queue_size of them) until a replica has room, then answers 503
        max_ongoing_requests=config.parallel + config.queue_size,
        max_queued_requests=max(config.queue_size, 1),
        health_check_period_s=2, health_check_timeout_s=30,
        max_constructor_retry_count=3,
        graceful_shutdown_timeout_s=drain_timeout, graceful_shutdown_wait_loop_s=0.5,
        request_router_config=RequestRouterConfig(
            request_router_class=ROUTER,
            request_router_kwargs={"imbalance": config.parallel}))
    ingress = serve.deployment(Ingress, name="ingress").options(
        num_replicas=1, ray_actor_options={"num_cpus": 0}, max_ongoing_requests=10_000,
        graceful_shutdown_timeout_s=drain_timeout)
    return ingress.bind(engine.bind(config, api_key, tuple(cors_origins), max_body), max_body)


# ---- the driver: `cann-llm serve --replicas N` -----------------------------------------------

def visible_npus() -> int:
    """The devices this host shows the backend (CANN_LLM_HOST_DEVICES on acl_host, the NPUs
    ASCEND_RT_VISIBLE_DEVICES leaves visible on an Ascend host): the NPU resource a local Ray
    node offers."""
    from cann_llm import backend
    return len(backend.Registry().devices)


def hold_port(host: str, port: int) -> socket.socket:
    """Bind the port Serve's proxy will listen on (a free one for 0) and keep it bound until the
    proxy has bound it too: a port in use is an error now, before Ray starts, and none of the
    dozen processes ray.init starts can be handed it by bind(0) meanwhile (their metrics servers
    answer any GET with 200, so a client would take one for the server). The held socket never
    listens and sets SO_REUSEPORT as the proxy's does, so the proxy's bind shares it; a plain
    bind first finds a port in use, which SO_REUSEPORT alone would share with its owner."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as e:
            raise ReplicasError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
        port = probe.getsockname()[1]
    held = socket.socket(family)
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        held.bind((host, port))
    except OSError as e:
        held.close()
        raise ReplicasError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return held


HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def check_address(address: str) -> None:
    """A HOST:PORT cluster address must answer as a GCS does, a gRPC server: to HTTP/2's
    greeting it sends its SETTINGS frame. (ray.init would retry a silent or foreign port for
    minutes.) "auto" is ray.init's to resolve."""
    if address == "auto":
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ReplicasError(f"--ray-address {address!r}: expected HOST:PORT (the head node's "
                            f"GCS address that `ray start --head` prints) or auto")
    try:
        s = socket.create_connection((host.strip("[]"), int(port)), timeout=5)
    except OSError as e:
        raise ReplicasError(f"--ray-address {address}: cannot reach a Ray cluster there "
                            f"({e.strerror or e})") from None
    with s:
        try:
            s.sendall(HTTP2_HELLO)
            reply = s.recv(9)
        except OSError:
            reply = b""
    if len(reply) < 9 or reply[3] != 4:             # frame type 4: SETTINGS
        raise ReplicasError(f"--ray-address {address}: that port does not answer as a Ray "
                            f"cluster's GCS (the head node's port, 6379 by default)")


def run(config, *, replicas: int, npus_per_replica: int, host: str, port: int,
        ray_address: str | None = None, api_key=None, cors_origins=(),
        max_body: int = 16 * 2**20, drain_timeout: float = 30.0, log=print) -> None:
    """Start a local Ray (or join ray_address), deploy the application, serve until
    SIGINT/SIGTERM, then take it down: Serve lets the requests in flight finish (at most
    drain_timeout seconds), and a local Ray stops with every process it started."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray_address is None:
        local_ray_environment()
    try:
        import ray
        from ray import serve
        from ray.serve.config import HTTPOptions, ProxyLocation
        from ray.serve.schema import LoggingConfig
    except ImportError as e:
        raise ReplicasError(f"--replicas needs Ray Serve: pip install 'cann-llm[scale]' ({e})") \
            from None
    logging.getLogger("ray.serve").setLevel(logging.WARNING)   # set up by its import
    need = replicas * npus_per_replica
    if ray_address is None:
        have = visible_npus() if npus_per_replica else 0
        if need > have:
            raise ReplicasError(f"{replicas} replicas x {npus_per_replica} device(s) need "
                                f"{need} devices, but this host shows {have}")
        held = hold_port(host, port)
        port = held.getsockname()[1]
        os.environ["SERVE_SOCKET_REUSE_PORT_ENABLED"] = "1"     # the proxy shares the held port
    else:
        held = None
        check_address(ray_address)
    quiet = LoggingConfig(log_level="WARNING", enable_access_log=False)
    try:
        if ray_address is None:
            ray.init(address="local", include_dashboard=False,
                     resources={"NPU": have} if have else {}, namespace=APP_NAME,
                     object_store_memory=80 * 2**20, logging_level="WARNING")
        else:
            ray.init(address=ray_address, namespace=APP_NAME, logging_level="WARNING")
    except ConnectionError as e:
        if ray_address == "auto":
            raise ReplicasError("--ray-address auto: no Ray cluster runs on this host (start "
                                "one with `ray start --head`)") from None
        hint = "" if os.environ.get("RAY_AUTH_MODE") == "token" else \
            " (a cluster with token authentication, Ray's default, also needs RAY_AUTH_MODE=token)"
        raise ReplicasError(f"--ray-address {ray_address}: {_first_line(e)}{hint}") from None
    except Exception as e:
        if held is not None:
            held.close()
        raise ReplicasError(f"cannot start Ray: {_first_line(e)}" if ray_address is None else
                            f"--ray-address {ray_address}: {_first_line(e)}") from None
    stop = threading.Event()
    deployed = deleted = False

    def on_signal(sig, frame):
        if not deployed:
            stop.set()
            raise _Stopped          # out of serve.run: the replicas may never come up
        if stop.is_set():
            raise KeyboardInterrupt     # a second signal: stop waiting for the drain
        stop.set()
    try:
        if ray_address is not None:
            have = int(ray.cluster_resources().get("NPU", 0))
            if need > have:
                raise ReplicasError(f"{replicas} replicas x {npus_per_replica} device(s) need "
                                    f"{need} NPUs, but the cluster at {ray_address} has {have}")
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, on_signal)
        serve.start(http_options=HTTPOptions(host=host, port=port),
                    proxy_location=ProxyLocation.HeadOnly, logging_config=quiet)
        app = build_app(config, replicas, npus_per_replica, api_key=api_key,
                        cors_origins=cors_origins, max_body=max_body,
                        drain_timeout=drain_timeout)
        try:
            serve.run(app, name=APP_NAME, route_prefix="/", logging_config=quiet)
        except RuntimeError as e:
            raise ReplicasError(f"the replicas failed to start: {deploy_failure(serve, e)}") \
                from None
        deployed = True
        if held is not None:
            held.close()            # the proxy listens on the port now
        shown = f"[{host}]" if ":" in host else host
        log(f"cann-llm serve: listening on http://{shown}:{port} · model {config.alias} "
            f"({os.path.basename(config.model_path)}) · {replicas} replicas on Ray Serve, "
            f"each {config.parallel} slots × {config.n_ctx} tokens on "
            f"{npus_per_replica or 'no'} NPU(s)")
        stop.wait()
        log("cann-llm serve: stopping the replicas")
        serve.delete(APP_NAME)      # drains the requests in flight (graceful_shutdown_timeout_s)
        deleted = True
    except _Stopped:
        log("cann-llm serve: stopped before the replicas were ready")
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)      # nothing interrupts taking Ray down
        if held is not None:
            held.close()
        if ray_address is not None and not deleted:
            try:
                serve.delete(APP_NAME)      # the cluster stays; our application goes
            except Exception:
                pass
        ray.shutdown()              # a local Ray stops with every process it started


class _Stopped(BaseException):
    """SIGINT/SIGTERM while the replicas were deploying."""


def deploy_failure(serve, exc: BaseException) -> str:
    """Why the application did not deploy: the last line of the engine deployment's message
    (Serve ends it with the constructor's exception, e.g. the model that did not load), or
    serve.run's own message."""
    try:
        message = serve.status().applications[APP_NAME].deployments["engine"].message
        lines = [ln.strip() for ln in message.strip().splitlines() if ln.strip()]
        if lines and "constructor" in message:
            return lines[-1].removeprefix("RuntimeError: ")
    except Exception:
        pass
    return _first_line(exc)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
