"""The FastAPI application: OpenAI-compatible routes over the engine thread (engine_loop.py).

Routes validate and tokenize a request, submit a Job, then stream or collect its tokens; they
never touch the backend. Around them, one ASGI gate counts requests for /metrics, checks the
API key and bounds the body size; errors.py gives every failure OpenAI's error shape.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import time
import uuid
from pathlib import Path

import numpy as np
from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from cann_llm import __version__, profiler
from cann_llm.sampling_params import SamplingParams

from . import schemas as S
from .engine_loop import EngineLoop, Job, ServeConfig
from .errors import APIError, install_handlers
from .metrics import CONTENT_TYPE, Metrics
from .output import ChoiceOutput
from .reasoning import prompt_opens_thinking
from .tools import call_grammar, prepare_messages, template_takes_tools

__all__ = ["create_app"]

PAGE = Path(__file__).with_name("static") / "index.html"
PUBLIC_PATHS = {"/", "/health"}
MAX_BODY = 16 * 2**20


class _Gate:
    """ASGI middleware: API key, body-size limit and per-route request counting."""

    def __init__(self, app, api_key: str | None, metrics: Metrics, routes: set, max_body: int):
        self.app, self.api_key, self.metrics = app, api_key, metrics
        self.routes, self.max_body = routes, max_body

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        route = path if path in self.routes else "other"
        status = {"code": 500}

        async def send_counted(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        prof = profiler.active()
        start_us = prof.now_us() if prof is not None else 0.0
        try:
            refusal = self._refuse(scope)
            if refusal is None and b"content-length" not in dict(scope.get("headers") or []):
                receive, refusal = await self._buffer(receive)    # a chunked body
            if refusal is not None:
                return await refusal(scope, receive, send_counted)
            await self.app(scope, receive, send_counted)
        finally:
            self.metrics.requests.labels(route, str(status["code"])).inc()
            if prof is not None:        # the request's span, to the end of its (streamed) body
                prof.add_span(f"HTTP {scope['method']} {path}", start_us, prof.now_us() - start_us,
                              cat="http", status=status["code"])

    def _refuse(self, scope):
        headers = dict(scope.get("headers") or [])
        if self.api_key and scope["path"] not in PUBLIC_PATHS and scope["method"] != "OPTIONS":
            auth = headers.get(b"authorization", b"").decode("latin-1")
            scheme, _, token = auth.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                    token.strip().encode(), self.api_key.encode()):
                return APIError(401, "missing or wrong API key (Authorization: Bearer <key>)",
                                code="invalid_api_key",
                                headers={"WWW-Authenticate": "Bearer"}).response()
        length = headers.get(b"content-length")
        if length is not None:
            try:
                too_big = int(length) > self.max_body
            except ValueError:
                return APIError(400, "malformed Content-Length header").response()
            if too_big:
                return self._too_big()
        return None

    def _too_big(self):
        return APIError(413, f"the request body is larger than {self.max_body} bytes",
                        code="body_too_large").response()

    async def _buffer(self, receive):
        """Read a body sent without Content-Length, up to the limit; replay it to the app."""
        parts, seen = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return _replay([message], receive), None
            seen += len(message.get("body", b""))
            if seen > self.max_body:
                return receive, self._too_big()
            parts.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        whole = {"type": "http.request", "body": b"".join(parts), "more_body": False}
        return _replay([whole], receive), None


def _replay(messages: list, receive):
    async def replay():
        return messages.pop(0) if messages else await receive()
    return replay


def create_app(config: ServeConfig, api_key: str | None = None, cors_origins=(),
               max_body: int = MAX_BODY, on_ready=None) -> FastAPI:
    """The application; its lifespan starts the engine thread (loading the model) and stops
    it after uvicorn has drained the requests in flight."""
    holder: dict = {}
    metrics = Metrics(lambda: holder.get("loop"))
    engine_loop = EngineLoop(config, metrics, on_ready=on_ready)
    holder["loop"] = engine_loop

    async def lifespan(app):
        engine_loop.start()
        yield
        await run_in_threadpool(engine_loop.stop)

    app = FastAPI(title="cann-llm", version=__version__, lifespan=lifespan, docs_url=None,
                  redoc_url=None, description="OpenAI-compatible API of cann-llm")
    app.state.engine_loop = engine_loop
    app.state.metrics = metrics
    install_handlers(app)
    ids = {config.alias, Path(config.model_path).name, Path(config.model_path).stem}
    fingerprint = f"cann-llm-{__version__}"
    created = int(time.time())

    def check_model(name: str | None) -> None:
        if name is not None and name not in ids:
            raise APIError(404, f"the model '{name}' does not exist; this server serves "
                                f"'{config.alias}'", param="model", code="model_not_found")

    def model_of():
        engine_loop.require_ready()
        return engine_loop.model

    # ---- plain routes -----------------------------------------------------------------------
    @app.get("/", include_in_schema=False)
    async def page():
        return HTMLResponse(PAGE.read_text(encoding="utf-8"))

    @app.get("/health", response_model=S.HealthResponse,
             responses={503: {"model": S.ErrorResponse}})
    async def health():
        engine_loop.require_ready()
        return {"status": "ok"}

    def card() -> dict:
        meta = None
        if engine_loop.state == "ready":
            hp = engine_loop.model.hparams
            meta = {"arch": hp.arch, "n_vocab": hp.n_vocab, "n_ctx": config.n_ctx,
                    "n_ctx_train": hp.n_ctx_train, "n_embd": hp.n_embd,
                    "slots": config.parallel}
        return {"id": config.alias, "object": "model", "created": created,
                "owned_by": "cann-llm", "meta": meta}

    @app.get("/v1/models", response_model=S.ModelList)
    async def models():
        return {"object": "list", "data": [card()]}

    @app.get("/v1/models/{model_id:path}", response_model=S.ModelCard,
             responses={404: {"model": S.ErrorResponse}})
    async def model_card(model_id: str):
        check_model(model_id)
        return card()

    @app.get("/metrics", response_class=Response)
    async def prometheus():
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    @app.post("/tokenize", response_model=S.TokenizeResponse,
              responses={400: {"model": S.ErrorResponse}})
    async def tokenize(body: S.TokenizeRequest):
        model = model_of()
        tok = model.tokenizer
        ids = await run_in_threadpool(tok.tokenize, body.content, add_special=body.add_special,
                                      special=True)
        if body.with_pieces:
            return {"tokens": [{"id": i, "piece": tok.token_to_piece(i, True).decode(
                "utf-8", errors="replace")} for i in ids]}
        return {"tokens": ids}

    @app.post("/detokenize", response_model=S.DetokenizeResponse,
              responses={400: {"model": S.ErrorResponse}})
    async def detokenize(body: S.DetokenizeRequest):
        model = model_of()
        check_ids(model, body.tokens, "tokens")
        return {"content": model.tokenizer.detokenize(body.tokens)}

    # ---- generation -------------------------------------------------------------------------
    def check_ids(model, ids, field):
        n_vocab = model.hparams.n_vocab
        bad = next((i for i in ids if i >= n_vocab), None)
        if bad is not None:
            raise APIError(400, f"{field}: token id {bad} is outside the vocabulary "
                                f"(0..{n_vocab - 1})", param=field)

    async def token_lists(model, value, field: str) -> tuple[list | None, list[list[int]]]:
        """(texts or None, token lists) of a prompt/input field: a string, strings, token ids or
        lists of token ids; ids are checked against the vocabulary, every list is non-empty and
        fits the context."""
        if isinstance(value, str) or isinstance(value[0], str):
            texts = [value] if isinstance(value, str) else list(value)
            lists = await run_in_threadpool(lambda: [model.tokenize(t) for t in texts])
        else:
            texts = None
            lists = [value] if isinstance(value[0], int) else list(value)
            for ids in lists:
                check_ids(model, ids, field)
        for ids in lists:
            if not ids:
                raise APIError(400, f"{field}: an entry gives no tokens", param=field)
            check_context(len(ids), field)
        return texts, lists

    def sampling(body, model) -> SamplingParams:
        d = SamplingParams()
        bias = {}
        for key, value in (body.logit_bias or {}).items():
            tid = int(key)
            if tid >= model.hparams.n_vocab:
                raise APIError(400, f"logit_bias: token id {tid} is outside the vocabulary "
                                    f"(0..{model.hparams.n_vocab - 1})", param="logit_bias")
            bias[tid] = float(value)

        def pick(name):
            v = getattr(body, name)
            return getattr(d, name) if v is None else v
        params = SamplingParams(
            temperature=pick("temperature"), top_k=pick("top_k"), top_p=pick("top_p"),
            min_p=pick("min_p"), repeat_penalty=pick("repeat_penalty"),
            repeat_last_n=pick("repeat_last_n"), presence_penalty=pick("presence_penalty"),
            frequency_penalty=pick("frequency_penalty"), seed=pick("seed"), logit_bias=bias)
        try:
            params.sampler()
        except ValueError as e:
            raise APIError(400, str(e), param=str(e).split(" ")[0]) from None
        return params

    async def constrain(body, model, params: SamplingParams, think: str | None = None) -> None:
        """Compile the request's response_format or grammar into params.grammar (a 400 naming
        the problem when the engine cannot compile it). think: a thinking model may reason
        before its JSON answer ("optional"), or ends the think block its prompt opened
        ("open")."""
        from cann_llm.grammar import GrammarError, compile as compile_grammar
        rf = getattr(body, "response_format", None)
        if rf is not None and rf.type != "text":
            field = "response_format"
            if rf.type == "json_object":
                args = ("json_object", None, None, think)
            else:
                schema = rf.json_schema.schema_
                args = ("json_schema", {"type": "object"} if schema is None else schema,
                        rf.json_schema.name, think)
        elif body.grammar is not None:       # the user's grammar covers the whole output
            field, args = "grammar", ("gbnf", body.grammar, None, None)
        else:
            return
        try:
            params.grammar = await run_in_threadpool(compile_grammar, model.tokenizer, *args)
        except GrammarError as e:
            raise APIError(400, f"{field}: {e}", param=field,
                           code="invalid_grammar" if field == "grammar" else "invalid_schema"
                           ) from None

    async def force_call(model, params: SamplingParams, tools: list, body,
                         think: str | None = None) -> None:
        """tool_choice "required" or a named function: a grammar that allows only calls (of
        that function) whose arguments validate against its parameters."""
        from cann_llm.grammar import GrammarError, compile as compile_grammar
        name = None if body.tool_choice == "required" else body.tool_choice.function.name
        lark = call_grammar(tools, name, parallel=body.parallel_tool_calls is not False)
        try:
            params.grammar = await run_in_threadpool(compile_grammar, model.tokenizer, "lark",
                                                     lark, None, think)
        except GrammarError as e:
            raise APIError(400, f"tools: a function's parameters do not compile: {e}",
                           param="tools", code="invalid_schema") from None

    def check_request(body) -> None:
        check_model(body.model)
        why = body.unsupported()
        if why is not None:
            raise APIError(400, why[1], param=why[0], code="unsupported_parameter")
        if body.n > config.parallel:
            raise APIError(400, f"n={body.n} is more than the server's {config.parallel} "
                                f"slots (--parallel)", param="n")

    def check_context(n_prompt: int, field: str) -> None:
        if n_prompt >= config.n_ctx:
            raise APIError(400, f"the prompt has {n_prompt} tokens but the context holds "
                                f"{config.n_ctx}, so at most {config.n_ctx - 1} prompt tokens "
                                f"fit (with one to generate)", param=field,
                           code="context_length_exceeded")

    async def events(job: Job):
        """The job's event lists until every choice has finished (errors raise)."""
        left = job.n_choices
        while left:
            item = await job.queue.get()
            if isinstance(item, BaseException):
                raise item
            left -= sum(1 for ev in item if ev.finish_reason is not None)
            yield item

    def usage(job: Job, outs: list[ChoiceOutput]) -> dict:
        n_prompt = sum(len(p) for p in job.prompts)
        n_gen = sum(len(s.generated) for s in job.seqs)
        cached = sum(s.n_cached for s in job.seqs[::job.n]) if job.seqs else 0
        metrics.prompt_tokens.inc(n_prompt)
        metrics.generation_tokens.inc(n_gen)
        metrics.e2e.observe(time.perf_counter() - job.t_submit)
        return {"prompt_tokens": n_prompt, "completion_tokens": n_gen,
                "total_tokens": n_prompt + n_gen,
                "prompt_tokens_details": {"cached_tokens": cached}}

    def seq_error(ev) -> APIError | None:
        if ev.finish_reason != "error":
            return None
        return APIError(400, f"sampling failed: {ev.error}", code="sampling_error")

    def engine_error(exc: BaseException) -> APIError:
        if isinstance(exc, APIError):
            return exc
        if isinstance(exc, ValueError):
            return APIError(400, str(exc))
        return APIError(500, f"the model failed: {type(exc).__name__}: {exc}")

    async def collect(job: Job, outs: list[ChoiceOutput], request: Request):
        """Run a non-streamed job to its end; a client that disconnects cancels it."""
        async def consume():
            async for evs in events(job):
                for ev in evs:
                    err = seq_error(ev)
                    if err is not None:
                        raise err
                    outs[ev.choice].add(ev.token, ev.logprob)
                    if ev.finish_reason is not None:
                        outs[ev.choice].finish(ev.finish_reason)

        async def disconnected():
            while (await request.receive())["type"] != "http.disconnect":
                pass

        work = asyncio.ensure_future(consume())
        watch = asyncio.ensure_future(disconnected())
        try:
            await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
            if not work.done():
                work.cancel()
                engine_loop.cancel(job)
        if work.cancelled():
            raise APIError(400, "the client disconnected", code="client_disconnected")
        exc = work.exception()
        if exc is not None:
            engine_loop.cancel(job)
            raise engine_error(exc)

    def dumps(obj) -> str:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))

    def sse(obj) -> str:
        return f"data: {dumps(obj)}\n\n"

    async def stream(job: Job, outs: list[ChoiceOutput], head: dict, chat: bool,
                     include_usage: bool):
        finished = False
        # the head (id, object, created, model, ...) is encoded once per response
        prefix = "data: " + dumps(head)[:-1] + ',"choices":'

        def chunk(choice, usage_=None) -> str:
            tail = f',"usage":{dumps(usage_)}}}\n\n' if usage_ is not None else "}\n\n"
            return prefix + dumps([choice] if choice is not None else []) + tail
        try:
            if chat:
                for o in outs:
                    yield chunk({"index": o.index, "delta": {"role": "assistant", "content": ""},
                                 "logprobs": None, "finish_reason": None})
            left, u = job.n_choices, None
            try:
                async for evs in events(job):
                    for ev in evs:
                        err = seq_error(ev)
                        if err is not None:
                            raise err
                        o = outs[ev.choice]
                        reasoning, content, lps = o.add(ev.token, ev.logprob)
                        if ev.finish_reason is not None:
                            r2, c2 = o.finish(ev.finish_reason)
                            reasoning, content = reasoning + r2, content + c2
                        calls = o.take_calls()
                        if reasoning or content or lps or calls:
                            yield chunk(delta(o, reasoning, content, lps, None, chat,
                                              calls))
                        if ev.finish_reason is not None:
                            left -= 1
                            if not left:   # the chunk that ends the response carries usage
                                u = usage(job, outs)
                            yield chunk(delta(o, "", "", [], public_reason(o.finish_reason),
                                              chat), None if left else u)
            except Exception as exc:     # after the 200: the error travels as an event
                yield sse(engine_error(exc).body())
                yield "data: [DONE]\n\n"
                finished = True
                return
            if include_usage:
                yield chunk(None, u)
            yield "data: [DONE]\n\n"
            finished = True
        finally:
            if not finished:
                engine_loop.cancel(job)

    def delta(o: ChoiceOutput, reasoning: str, content: str, lps: list, finish, chat: bool,
              calls=()):
        if chat:
            d = {}
            if reasoning:
                d["reasoning_content"] = reasoning
            if content:
                d["content"] = content
            if calls:         # a call's id and name first, then its arguments as they come
                d["tool_calls"] = calls
            lp = {"content": lps} if (o.logprobs is not None and lps) else None
            return {"index": o.index, "delta": d, "logprobs": lp, "finish_reason": finish}
        lp = lps[0] if lps else None
        return {"index": o.index, "text": content, "logprobs": lp, "finish_reason": finish}

    def public_reason(reason: str) -> str:
        return reason if reason in ("length", "tool_calls") else "stop"

    @app.post("/v1/chat/completions", response_model=S.ChatCompletion,
              responses={200: {"content": {"text/event-stream": {}}},
                         400: {"model": S.ErrorResponse}, 401: {"model": S.ErrorResponse},
                         404: {"model": S.ErrorResponse}, 413: {"model": S.ErrorResponse},
                         503: {"model": S.ErrorResponse}})
    async def chat_completions(body: S.ChatCompletionRequest, request: Request):
        model = model_of()
        check_request(body)
        params = sampling(body, model)
        messages = []
        for m in body.messages:
            msg = {"role": "system" if m.role == "developer" else m.role, "content": m.text()}
            if m.tool_calls:
                msg["tool_calls"] = [c.model_dump() for c in m.tool_calls]
            if m.tool_call_id is not None:
                msg["tool_call_id"] = m.tool_call_id
            if m.name is not None and m.role == "tool":
                msg["name"] = m.name
            messages.append(msg)
        kwargs = dict(body.chat_template_kwargs or {})
        for reserved in ("messages", "add_generation_prompt", "tools"):
            if reserved in kwargs:
                raise APIError(400, f"chat_template_kwargs may not set '{reserved}'",
                               param="chat_template_kwargs")
        tools = [t.model_dump(exclude_none=True) for t in body.tools or []] \
            if body.tool_choice != "none" else []
        native = template_takes_tools(model.chat_template.source)
        messages = prepare_messages(messages, tools, native)
        if tools and native:
            kwargs["tools"] = tools

        def render():
            text = model.chat_template.render(messages, add_generation_prompt=True, **kwargs)
            return text, model.tokenize(text, special=True)
        try:
            prompt_text, ids = await run_in_threadpool(render)
        except (ValueError, TypeError) as e:
            raise APIError(400, str(e), param="messages") from None
        check_context(len(ids), "messages")
        thinking = prompt_opens_thinking(prompt_text)
        # a thinking model's template: constrained answers may follow its reasoning
        think = ("open" if thinking else "optional") \
            if "<think>" in (model.chat_template.source or "") else None
        await constrain(body, model, params, think)
        if tools and body.tool_choice not in (None, "auto"):
            await force_call(model, params, tools, body, think)
        max_tokens = body.max_completion_tokens or body.max_tokens
        top = body.top_logprobs or 0
        job = Job([ids], params, max_tokens, body.stop, n=body.n,
                  logprobs=top if body.logprobs else None)
        names = [t["function"]["name"] for t in tools] if tools else None
        outs = [ChoiceOutput(i, model.tokenizer, body.stop, chat=True, thinking=thinking,
                             logprobs=job.logprobs, tools=names) for i in range(job.n_choices)]
        engine_loop.submit(job)
        head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": config.alias,
                "system_fingerprint": fingerprint}
        if body.stream:
            include = bool(body.stream_options and body.stream_options.include_usage)
            return StreamingResponse(stream(job, outs, head, True, include),
                                     media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        await collect(job, outs, request)
        return {**head, "object": "chat.completion", "choices": [
            {"index": o.index, "message": {
                "role": "assistant", "reasoning_content": o.full_reasoning,
                "content": o.full_content if o.full_content or not o.tool_calls else None,
                "tool_calls": o.tool_calls or None},
             "logprobs": {"content": o.lp_chat} if o.logprobs is not None else None,
             "finish_reason": public_reason(o.finish_reason)} for o in outs],
            "usage": usage(job, outs)}

    @app.post("/v1/completions", response_model=S.Completion,
              responses={200: {"content": {"text/event-stream": {}}},
                         400: {"model": S.ErrorResponse}, 401: {"model": S.ErrorResponse},
                         404: {"model": S.ErrorResponse}, 413: {"model": S.ErrorResponse},
                         503: {"model": S.ErrorResponse}})
    async def completions(body: S.CompletionRequest, request: Request):
        model = model_of()
        check_request(body)
        params = sampling(body, model)
        await constrain(body, model, params)
        texts, lists = await token_lists(model, body.prompt, "prompt")
        if len(lists) * body.n > config.parallel + config.queue_size:
            raise APIError(400, f"{len(lists)} prompts x n={body.n} choices is more than the "
                                f"server queues", param="prompt")
        echo = [(t if texts is not None else model.detokenize(ids)) if body.echo else ""
                for t, ids in zip(texts or [None] * len(lists), lists)]
        job = Job(lists, params, body.max_tokens, body.stop, n=body.n, logprobs=body.logprobs)
        outs = [ChoiceOutput(i, model.tokenizer, body.stop, chat=False, logprobs=body.logprobs,
                             text_offset=len(echo[i // body.n]))
                for i in range(job.n_choices)]
        engine_loop.submit(job)
        head = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion",
                "created": int(time.time()), "model": config.alias,
                "system_fingerprint": fingerprint}
        if body.stream:
            include = bool(body.stream_options and body.stream_options.include_usage)

            async def with_echo():
                for o in outs:
                    if echo[o.index // body.n]:
                        yield sse({**head, "choices": [{"index": o.index, "text": echo[
                            o.index // body.n], "logprobs": None, "finish_reason": None}]})
                async for chunk in stream(job, outs, head, False, include):
                    yield chunk
            return StreamingResponse(with_echo(), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        await collect(job, outs, request)
        return {**head, "choices": [
            {"index": o.index, "text": echo[o.index // body.n] + o.full_content,
             "logprobs": o.lp_legacy if o.logprobs is not None else None,
             "finish_reason": public_reason(o.finish_reason)} for o in outs],
            "usage": usage(job, outs)}

    @app.post("/v1/embeddings", response_model=S.EmbeddingList,
              responses={400: {"model": S.ErrorResponse}, 404: {"model": S.ErrorResponse},
                         503: {"model": S.ErrorResponse}})
    async def embeddings(body: S.EmbeddingRequest):
        if not config.embeddings:
            raise APIError(404, "embeddings are off: start the server with --embeddings",
                           code="embeddings_disabled")
        model = model_of()
        check_model(body.model)
        _, lists = await token_lists(model, body.input, "input")

        def embed_all(m, batch):
            engine = engine_loop.engine
            return [np.asarray(engine.embed(ids, normalize=True), dtype=np.float32)
                    for ids in batch]
        vectors = await engine_loop.call(embed_all, lists)
        data = []
        for i, v in enumerate(vectors):
            if body.encoding_format == "base64":
                emb = base64.b64encode(v.astype("<f4").tobytes()).decode()
            else:
                emb = v.tolist()
            data.append({"object": "embedding", "index": i, "embedding": emb})
        n = sum(len(ids) for ids in lists)
        metrics.prompt_tokens.inc(n)
        return {"object": "list", "data": data, "model": config.alias,
                "usage": {"prompt_tokens": n, "total_tokens": n}}

    def openapi():
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi
            schema = get_openapi(title=app.title, version=app.version,
                                 description=app.description, routes=app.routes)
            for path in schema.get("paths", {}).values():
                for op in path.values():
                    responses = op.get("responses", {})
                    if responses.pop("422", None) is not None:
                        responses.setdefault("400", {"description": "Bad Request", "content": {
                            "application/json": {"schema": {
                                "$ref": "#/components/schemas/ErrorResponse"}}}})
            for name in ("HTTPValidationError", "ValidationError"):
                schema.get("components", {}).get("schemas", {}).pop(name, None)
            app.openapi_schema = schema
        return app.openapi_schema
    app.openapi = openapi

    routes = {r.path for r in app.routes if hasattr(r, "path")} - {"/v1/models/{model_id:path}"}
    app.add_middleware(_Gate, api_key=api_key, metrics=metrics, routes=routes,
                       max_body=max_body)
    if cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(cors_origins),
                           allow_methods=["GET", "POST", "OPTIONS"],
                           allow_headers=["Authorization", "Content-Type"])
    return app
