"""FastAPI app: OpenAI-compatible /v1/completions and /v1/chat/completions (streaming or not), /v1/models,
/health and /metrics over one engine thread; `register` adds the `sparkdec serve` subcommand."""
from __future__ import annotations

import json
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from sparkdec.errors import PromptTooLongError, SparkdecError
from sparkdec.server import protocol as P
from sparkdec.server import tokenize as T
from sparkdec.server import choices as C
from sparkdec.server.auth import require_key
from sparkdec.server.engine_loop import EngineLoop
from sparkdec.server.metrics import Metrics
from sparkdec.server.streaming import stream_events, wait_finals


@dataclass
class ServerState:
    draining: bool = False  # set by SIGTERM: new requests get 503, in-flight ones finish
    inflight: int = 0
    max_inflight: int = 0
    reasoning: bool = False  # chat thinking returned apart (server/reasoning.py)
    defaults: dict | None = None  # the model's sampling defaults for fields a request leaves out (server/defaults.py)


def create_app(engine, model_name: str, max_queue: int = 256, aliases: tuple[str, ...] = (),
               reasoning_parser: str | None = None, api_key: str | None = None,
               trust_templates: bool = False, sampling_defaults: dict | None = None) -> FastAPI:
    """One app per engine. Requests beyond max_num_seqs running + max_queue waiting get 503. reasoning_parser:
    "qwen3" returns chat thinking as reasoning_content (server/reasoning.py). api_key: required on every route but
    /health and /metrics (server/auth.py). trust_templates: render a request's own chat_template.
    sampling_defaults: the model's for the fields a request leaves out (server/defaults.py; None: OpenAI's)."""
    metrics = Metrics(engine)
    loop = EngineLoop(engine, metrics)
    state = ServerState(max_inflight=engine.config.max_num_seqs + max_queue, reasoning=reasoning_parser is not None,
                        defaults=sampling_defaults)
    names = {model_name, *aliases}

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        loop.start()
        yield
        loop.stop()

    app = FastAPI(title="sparkdec", lifespan=lifespan)
    app.state.engine, app.state.loop, app.state.metrics, app.state.server = engine, loop, metrics, state
    _install_error_handlers(app)
    if api_key:
        require_key(app, api_key)

    @app.get("/health")
    async def health():
        if state.draining or not loop.alive:
            return JSONResponse({"status": "draining" if state.draining else "engine stopped"}, status_code=503)
        return {"status": "ok"}

    @app.get("/metrics")
    async def metrics_endpoint():
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": int(time.time()),
                                            "owned_by": "sparkdec", "max_model_len": engine.max_model_len}]}

    @app.post("/tokenize")
    async def tokenize(request: Request):
        body = await _parse(request, T.TokenizeRequest)
        T.check_model(body, names, model_name)
        return T.tokenize(engine, body, trust_templates)

    @app.post("/detokenize")
    async def detokenize(request: Request):
        body = await _parse(request, T.DetokenizeRequest)
        T.check_model(body, names, model_name)
        return T.detokenize(engine, body)

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await _parse(request, P.CompletionRequest)
        _check_model(body, names, model_name)
        return await _generate(request, body, body.prompts(), "completions", engine, loop, state, model_name)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        body = await _parse(request, P.ChatCompletionRequest)
        _check_model(body, names, model_name)
        if engine.tokenizer is None:
            raise P.RequestError(400, "this model has no tokenizer.json, so chat messages cannot be rendered; "
                                      "use /v1/completions with token ids", param="messages")
        prompt = T.render_chat(engine.tokenizer, body.template_messages(), body, trust_templates)
        return await _generate(request, body, [prompt], "chat", engine, loop, state, model_name)

    return app


async def _parse(request: Request, model: type[BaseModel]):
    raw = await request.body()
    try:
        obj = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise P.RequestError(400, f"the request body is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise P.RequestError(400, "the request body must be a JSON object")
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(x) for x in first["loc"]) or None
        msgs = "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()[:5])
        raise P.RequestError(422, f"invalid request body: {msgs}", param=param) from None


def _check_model(body, names: set[str], model_name: str) -> None:
    body.check_supported()
    if body.model not in names:
        raise P.RequestError(404, f"the model `{body.model}` does not exist; this server serves "
                                  f"{model_name!r} (see /v1/models)", param="model", code="model_not_found")


async def _generate(request: Request, body, prompts: list, kind: str, engine, loop: EngineLoop,
                    state: ServerState, model_name: str):
    _check_open(state)
    rid = P.new_id("cmpl" if kind == "completions" else "chatcmpl")
    choices = C.plan(engine, body, prompts, kind, rid, state.reasoning, state.defaults)
    _check_room(state, len(choices))
    state.inflight += len(choices)
    queued = False
    try:
        await C.queue_all(loop, choices)
        queued = True
    finally:
        if not queued:  # refused by the engine, or the client went away while it was being added
            state.inflight -= len(choices)
    if body.stream:
        events = stream_events(choices, rid, model_name, kind, body.include_usage)
        return _AbortingStream(events, choices, loop, state, media_type="text/event-stream",
                               headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    try:
        snaps = await wait_finals([c.handle for c in choices], request)
    finally:
        state.inflight -= len(choices)
        C.abort_unfinished(loop, choices)
    if snaps is None:  # the client disconnected; nobody reads this
        return Response(status_code=499)
    for snap in snaps:
        if snap.error:
            raise P.RequestError(400 if snap.error_type == "invalid_request_error" else 500, snap.error, snap.error_type)
    return C.response(kind, rid, model_name, choices, snaps)


def _check_open(state: ServerState) -> None:
    if state.draining:
        raise P.RequestError(503, "the server is shutting down; retry on another replica", "server_error",
                             code="server_draining")


def _check_room(state: ServerState, wanted: int) -> None:
    """Each choice is one request in flight: a request larger than the server's whole capacity can never run (400);
    one that does not fit now can be retried (503)."""
    if wanted > state.max_inflight:
        raise P.RequestError(400, f"this request asks for {wanted} choices (n x prompts) but the server holds at most "
                                  f"{state.max_inflight} requests in flight; lower n or send fewer prompts at a time",
                             param="n")
    if state.inflight + wanted > state.max_inflight:
        raise P.RequestError(503, f"the server is full ({state.inflight} requests in flight); retry later",
                             "server_error", code="server_overloaded")


class _AbortingStream(StreamingResponse):
    """A stream that aborts its request however it ends early (client gone, send error, cancellation)."""

    def __init__(self, content, choices: list[C.Choice], loop: EngineLoop, state: ServerState, **kw):
        super().__init__(content, **kw)
        self._choices, self._loop, self._state = choices, loop, state

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._state.inflight -= len(self._choices)
            C.abort_unfinished(self._loop, self._choices)


def _error(status: int, message: str, type: str, param=None, code=None) -> JSONResponse:
    return JSONResponse(P.error_body(message, type, param, code), status_code=status)


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(P.RequestError)
    async def request_error(_: Request, exc: P.RequestError):
        return _error(exc.status, exc.message, exc.type, exc.param, exc.code)

    @app.exception_handler(SparkdecError)
    async def sparkdec_error(_: Request, exc: SparkdecError):
        code = "context_length_exceeded" if isinstance(exc, PromptTooLongError) else None
        return _error(400, str(exc), "invalid_request_error", code=code)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException):
        return _error(exc.status_code, str(exc.detail), "invalid_request_error" if exc.status_code < 500 else "server_error")

    @app.exception_handler(Exception)
    async def internal_error(_: Request, exc: Exception):
        return _error(500, f"internal server error: {type(exc).__name__}: {exc}", "server_error")


def register(subparsers, add_engine_args, engine_kwargs) -> None:
    from sparkdec.server.serve import add_serve_args, run_serve

    p = subparsers.add_parser("serve", help="OpenAI-compatible HTTP server with Prometheus /metrics")
    add_engine_args(p)
    add_serve_args(p)
    p.set_defaults(func=lambda args: run_serve(args, engine_kwargs))

