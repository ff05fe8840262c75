"""`cann-llm serve`: the OpenAI-compatible HTTP server (cann_llm.server) under uvicorn.

Checks the flags and the model file, then listens at once: /health answers 503 while the model
loads on the engine thread and 200 when it is ready, which one line on stderr announces.
SIGINT/SIGTERM drain the requests in flight (at most --drain-timeout seconds), then exit 0.
With --replicas, server/replicas.py runs the same application N times on Ray Serve instead.
"""

from __future__ import annotations

import argparse
import os
import signal

from .common import RunError, log as _log, resolve_model
from .run import _check_model_arguments, add_model_arguments, read_chat_template

__all__ = ["register", "cmd_serve"]


def register(commands) -> None:
    p = commands.add_parser(
        "serve", help="OpenAI-compatible HTTP server (chat, completions, embeddings, metrics)",
        description="Serve a model over an OpenAI-compatible API with continuous batching, "
                    "prefix caching and a chat page at /. Needs the server extra: "
                    "pip install 'cann-llm[server]'.")
    p.add_argument("model", nargs="?", metavar="MODEL",
                   help="a .gguf file (default: SmolLM2-135M-Instruct Q4_1, fetched on first use)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (8080; 0: any free port)")
    p.add_argument("--api-key", default=os.environ.get("CANN_LLM_API_KEY"), metavar="KEY",
                   help="require 'Authorization: Bearer KEY' (also CANN_LLM_API_KEY); /health "
                        "and / stay public")
    p.add_argument("-np", "--parallel", type=int, default=4, metavar="N",
                   help="sequences decoded together (4); more requests wait in the queue")
    p.add_argument("--queue-size", type=int, default=64, metavar="N",
                   help="sequences that may wait for a slot before requests get 503 (64)")
    p.add_argument("--kv-size", type=int, default=None, metavar="CELLS",
                   help="KV cache cells shared by all sequences (default --parallel x -c)")
    p.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="allow browser requests from ORIGIN (repeatable; '*' for any)")
    p.add_argument("--model-alias", "-a", default=None, metavar="NAME",
                   help="the model id in /v1/models and responses (default: the file's stem)")
    p.add_argument("--chat-template-file", default=None, metavar="FILE",
                   help="a Jinja chat template to use instead of the model's")
    p.add_argument("--embeddings", action="store_true", help="enable POST /v1/embeddings")
    p.add_argument("--drain-timeout", type=float, default=30.0, metavar="S",
                   help="on SIGINT/SIGTERM, seconds to let requests in flight finish (30)")
    p.add_argument("--max-body-size", type=int, default=16 * 2**20, metavar="BYTES",
                   help="largest request body accepted; larger ones get 413 (16 MiB)")
    p.add_argument("--replicas", type=int, default=None, metavar="N",
                   help="N engine replicas behind this endpoint on Ray Serve, each on devices of "
                        "its own that --device names as the replica sees them (CANN0, or "
                        "CANN0,CANN1 for two each); requests go by prompt prefix and load; -t "
                        "defaults to the cores / N. Needs the scale extra: "
                        "pip install 'cann-llm[scale]' (docs/scale-out.md)")
    p.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="with --replicas: run them on this Ray cluster (its head's HOST:PORT, "
                        "or auto) instead of a local one")
    add_model_arguments(p, ctx_help="one sequence's context in tokens, prompt and answer "
                        "(default 4096)")
    p.set_defaults(handler=cmd_serve)


def _check(args) -> None:
    if args.parallel < 1 or args.parallel > 64:
        raise RunError(f"--parallel must be in 1..64, got {args.parallel}")
    if args.queue_size < 0:
        raise RunError(f"--queue-size must be >= 0, got {args.queue_size}")
    if not 0 <= args.port <= 65535:
        raise RunError(f"--port must be in 0..65535, got {args.port}")
    if args.ctx_size == 0:
        raise RunError("serve needs an explicit -c/--ctx-size (one sequence's context)")
    if args.kv_size is not None and args.kv_size < args.ctx_size:
        raise RunError(f"--kv-size {args.kv_size} is smaller than one sequence's context "
                       f"(-c {args.ctx_size}): a long request could never fit")
    if args.max_body_size < 1024:
        raise RunError(f"--max-body-size must be >= 1024, got {args.max_body_size}")
    if args.replicas is not None and not 1 <= args.replicas <= 64:
        raise RunError(f"--replicas must be in 1..64, got {args.replicas}")
    if args.ray_address is not None and args.replicas is None:
        raise RunError("--ray-address needs --replicas (the replicas run on that cluster)")
    if args.replicas is not None and getattr(args, "tensor_parallel", 1) > 1:
        raise RunError("--replicas and --tensor-parallel cannot be combined yet: each replica "
                       "runs on its own device(s) in one process")


def _replica_devices(device: str) -> int:
    """NPUs per replica for --replicas: Ray gives each replica its own devices, which it sees
    renumbered from 0, so --device must name CANN0..CANNk-1 (or CPU: no NPU)."""
    names = device.split(",")
    if names == ["CPU"]:
        return 0
    if names != [f"CANN{i}" for i in range(len(names))]:
        raise RunError(f"with --replicas, --device names the devices each replica sees, "
                       f"numbered from 0 (CANN0, or CANN0,CANN1 for two per replica), got "
                       f"{device}: Ray gives every replica its own")
    return len(names)


def cmd_serve(args: argparse.Namespace) -> int:
    _check(args)
    device = _check_model_arguments(args)
    try:
        import uvicorn
        from ..server.app import create_app
        from ..server.engine_loop import ServeConfig
    except ImportError as e:
        raise RunError(f"the server needs its extra: pip install 'cann-llm[server]' ({e})") \
            from None
    path = resolve_model(args.model)
    template = read_chat_template(args)
    alias = args.model_alias or os.path.splitext(os.path.basename(path))[0]
    config = ServeConfig(
        model_path=path, alias=alias, n_ctx=args.ctx_size, kv_size=args.kv_size,
        parallel=args.parallel, queue_size=args.queue_size, threads=args.threads,
        device=device, n_batch=args.batch_size, chat_template=template,
        embeddings=args.embeddings,
        load_kwargs=dict(flash_attn=args.flash_attn == "on", type_k=args.cache_type_k,
                         type_v=args.cache_type_v, convert=args.convert,
                         check_weights=not args.no_check, verbose=args.verbose, log=_log,
                         tensor_parallel=args.tensor_parallel,
                         **({"use_mmap": False} if args.no_mmap else {})))
    if args.replicas is not None:
        return _serve_replicas(args, config, device)
    server = None
    failed = []

    def on_ready(loop):
        if loop.state != "ready":
            failed.append(loop.load_error)
            if server is not None:
                server.should_exit = True
            return
        host, port = args.host, server.bound_port() if server else args.port
        shown = f"[{host}]" if ":" in host else host
        _log(f"cann-llm serve: listening on http://{shown}:{port} · model {alias} "
             f"({os.path.basename(path)}) · {config.parallel} slots × {config.n_ctx} tokens, "
             f"{config.cells} KV cells · "
             + (f"device {loop.model.devices[0]}" if args.tensor_parallel == 1 else
                f"tensor parallel over {', '.join(loop.model.devices)}"))

    app = create_app(config, api_key=args.api_key or None, cors_origins=args.cors_origin,
                     max_body=args.max_body_size, on_ready=on_ready)
    uv_config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning",
                               access_log=False, lifespan="on",
                               timeout_graceful_shutdown=args.drain_timeout)
    server = _server_class()(uv_config)
    server.run()
    if failed:
        raise RunError(f"cannot serve {path}: {failed[0]}")
    if not server.started:
        raise RunError(f"cannot listen on {args.host}:{args.port}")
    return 0


def _serve_replicas(args, config, device: str) -> int:
    npus = _replica_devices(device)
    from ..server import replicas
    if args.threads is None and args.ray_address is None and \
            not os.environ.get("CANN_LLM_THREADS"):
        # the replicas share this host's cores (acl_host computes on them)
        config.threads = max(1, (os.cpu_count() or 1) // args.replicas)
    try:
        replicas.run(config, replicas=args.replicas, npus_per_replica=npus, host=args.host,
                     port=args.port, ray_address=args.ray_address,
                     api_key=args.api_key or None, cors_origins=args.cors_origin,
                     max_body=args.max_body_size, drain_timeout=args.drain_timeout, log=_log)
    except replicas.ReplicasError as e:
        raise RunError(str(e)) from None
    return 0


def _server_class():
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, except that a SIGINT/SIGTERM drain ends in exit 0 rather than
        re-raising the signal once the requests in flight have finished."""

        def handle_exit(self, sig, frame) -> None:
            if self.should_exit and sig == signal.SIGINT:
                self.force_exit = True          # a second Ctrl-C: stop waiting
            else:
                self.should_exit = True

        def bound_port(self) -> int:
            for s in getattr(self, "servers", []) or []:
                for sock in s.sockets:
                    return sock.getsockname()[1]
            return self.config.port
    return Server
