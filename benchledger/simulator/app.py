"""Starlette app of the simulator: vLLM's OpenAI-compatible endpoints over one Engine.

The same app serves the head of a deployment of pretend nodes (expect_nodes > 0, see
nodes.py): it adds /nodes and is not ready until every node joined. A pretend node itself
serves nodes.create_node_app instead."""

from __future__ import annotations

import asyncio
import json
import time
import traceback
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from benchledger.simulator import protocol
from benchledger.simulator.clocks import gpu_clocks
from benchledger.simulator.dcgm_page import render_dcgm
from benchledger.simulator.engine import (
    VERSION,
    Chunk,
    Engine,
    SimConfig,
    SimRequest,
    log_line,
)
from benchledger.simulator.metrics import CONTENT_TYPE, render_metrics
from benchledger.simulator.nodes import Head, load_body
from benchledger.simulator.protocol import ApiError, ParsedRequest, ResponseBuilder, sse

# The header a client names its request with; vLLM makes it its own request id. Spelled
# here, apart from the client's (the simulator shares no protocol code with it).
REQUEST_ID = "X-Request-Id"


def create_app(config: SimConfig, engine: Engine | None = None, hostname: str | None = None,
               expect_nodes: int = 0) -> Starlette:
    """The ASGI app; the engine loop and the stats logger run for the app's lifespan.
    `hostname` labels the /dcgm page (default: this machine's); `expect_nodes` > 0 makes
    it the head of that many pretend nodes."""
    engine = engine or Engine(config)
    head = Head(engine, expect_nodes) if expect_nodes > 0 else None
    ready_at = [float("inf")]  # monotonic time after which /health, /v1/models answer 200
    started_at = [time.monotonic()]  # the pretend GPUs' energy counters count from here

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        started_at[0] = time.monotonic()
        ready_at[0] = started_at[0] + config.startup_delay_s
        tasks = [asyncio.create_task(engine.run(), name="engine"),
                 asyncio.create_task(engine.log_loop(), name="stats logger")]
        for task in tasks:
            task.add_done_callback(_log_death)
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def not_ready() -> str | None:
        """Why the server cannot serve yet, or None when it is ready."""
        if time.monotonic() < ready_at[0]:
            return "the model is still loading"
        return head.waiting_message() if head else None

    def require_ready() -> None:
        if (reason := not_ready()) is not None:
            raise ApiError(503, reason, "ServiceUnavailableError")

    async def ready_json_body(request: Request) -> Any:
        """The POST body of a server that is ready, or the ApiError a server answers (any
        JSON value: protocol's parsers check its shape)."""
        require_ready()
        try:
            return await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"invalid JSON body: {exc}") from exc

    streaming: list[asyncio.Event] = []  # --interrupt-requests: the stream to cut next

    async def completions(request: Request) -> Response:
        request_id = request.headers.get(REQUEST_ID)
        if config.uuid_request_ids and request_id is not None and not _is_uuid(request_id):
            return Response(status_code=400)  # llama-cpp-python says nothing more
        body = await ready_json_body(request)
        chat = request.url.path.endswith("/chat/completions")
        parse = protocol.parse_chat if chat else protocol.parse_completion
        cut = None
        if config.interrupt_requests:
            for earlier in streaming:
                earlier.set()
            streaming[:] = [cut := asyncio.Event()]
        return await _serve(engine, parse(body, config), request_id, cut)

    async def tokenize(request: Request) -> Response:
        """vLLM's and llama.cpp's /tokenize, llama-cpp-python's /extras/tokenize."""
        body = await ready_json_body(request)
        extras = request.url.path == "/extras/tokenize"
        tokens = protocol.tokenize_request(body, config, extras)
        return JSONResponse(protocol.tokenize_response(tokens, config, extras))

    async def health(_request: Request) -> Response:
        if not config.health:  # a server without a health endpoint (--no-health)
            return Response(status_code=404)
        return Response(status_code=503 if not_ready() else 200)

    async def models(_request: Request) -> Response:
        # Loading: a server without /health must not look ready here early either
        # (vLLM and llama.cpp's servers do not answer at all until the model is loaded).
        require_ready()
        card = {"id": config.model, "object": "model", "created": int(time.time()),
                "owned_by": "benchledger-sim", "root": config.model, "parent": None,
                "max_model_len": config.max_model_len}
        return JSONResponse({"object": "list", "data": [card]})

    async def version(_request: Request) -> Response:
        return JSONResponse({"version": VERSION})

    async def metrics(_request: Request) -> Response:
        return Response(render_metrics(engine), headers={"content-type": CONTENT_TYPE})

    async def clocks(_request: Request) -> Response:
        """Pretend nvidia-smi clocks: load clocks while any request is in the engine."""
        return JSONResponse(gpu_clocks(config, engine.under_load))

    async def dcgm(_request: Request) -> Response:
        """Pretend dcgm-exporter page of this node's GPUs (simulator/dcgm_page.py)."""
        return Response(render_dcgm(config, engine.under_load,
                                    time.monotonic() - started_at[0], engine.busy_s,
                                    hostname),
                        media_type=CONTENT_TYPE)

    async def load(_request: Request) -> Response:
        """The engine's load, which the pretend nodes' GPUs follow (nodes.py)."""
        return JSONResponse(load_body(engine.under_load, engine.busy_s, engine.slowdown))

    async def api_error(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return JSONResponse(exc.body(), status_code=exc.status)

    routes = [
        Route("/v1/chat/completions", completions, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/models", models),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/extras/tokenize", tokenize, methods=["POST"]),
        Route("/health", health),
        Route("/version", version),
        Route("/metrics", metrics),
        Route("/clocks", clocks),
        Route("/dcgm", dcgm),
        Route("/load", load),
        *(head.routes() if head else []),
    ]
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={ApiError: api_error})
    app.state.engine = engine
    app.state.head = head
    return app


def _log_death(task: asyncio.Task[None]) -> None:
    """A background task that ends with an error says so in the server's log: asyncio
    keeps such an error to itself until the task is collected, and a stats logger that
    died silently once left a restart's windows without log lines."""
    if task.cancelled() or task.exception() is None:
        return
    error = "".join(traceback.format_exception(task.exception())).rstrip()
    log_line("api_server.py:1", f"ERROR the {task.get_name()} task died: {error}")


def _reasoning(config: SimConfig, parsed: ParsedRequest) -> int:
    """How many of the request's first tokens are reasoning: the config's, for chat
    requests only (completions have no reasoning); 0: not a reasoning request."""
    return config.reasoning_tokens if parsed.chat else 0


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


async def _serve(engine: Engine, parsed: ParsedRequest, request_id: str | None,
                 cut: asyncio.Event | None = None) -> Response:
    config = engine.config
    request = engine.submit(parsed.prompt, parsed.max_tokens, parsed.temperature,
                            ignore_eos=parsed.ignore_eos, tokens=parsed.tokens,
                            reasoning_tokens=_reasoning(config, parsed))
    builder = ResponseBuilder(parsed.chat, config.model, parsed.logprobs,
                              config.reasoning_field, request_id)
    if config.log_requests:  # vLLM's RequestLogger, without the prompt
        log_line("logger.py:39", f"Received request {builder.id}: prompt_tokens="
                                 f"{parsed.prompt_tokens}, max_tokens={parsed.max_tokens}, "
                                 f"temperature={parsed.temperature}")
    if parsed.stream:
        events = _stream_events(engine, request, parsed, builder, cut)
        return StreamingResponse(events, media_type="text/event-stream")
    try:
        chunks = [chunk async for chunk in request.chunks()]
    finally:
        engine.abort(request)  # no-op unless the handler was cancelled mid-generation
    if request.aborted:
        raise ApiError(503, "the request was aborted (server shutting down)",
                       "ServiceUnavailableError")
    reasoning = _reasoning(config, parsed) > 0
    thought = request.reasoning_generated
    usage = protocol.usage_body(request.prompt_tokens, request.generated,
                                request.cached_tokens, thought if reasoning else None)
    pieces = tuple(piece for c in chunks for piece in c.pieces)
    body = builder.full_response("".join(pieces[thought:]), chunks[-1].finish_reason,
                                 usage if config.usage else None, pieces,
                                 "".join(pieces[:thought]) if reasoning else None)
    return JSONResponse(body)


async def _stream_events(engine: Engine, request: SimRequest, parsed: ParsedRequest,
                         builder: ResponseBuilder, cut: asyncio.Event | None = None
                         ) -> AsyncIterator[bytes]:
    """One SSE event per engine step, sent as soon as the step ends. Like vLLM, the chat
    role event goes out together with the first output; a disconnect aborts the request.
    An aborted request (shutdown) ends the stream without finish_reason, usage or [DONE].
    A reasoning request's reasoning tokens go out in reasoning events; a step that crosses
    into the content sends its reasoning event and its content event in one write. A
    stream `cut` (--interrupt-requests: another request arrived) ends at once with [DONE]
    and no finish_reason, as llama-cpp-python's does."""
    config = engine.config
    reasoning = _reasoning(config, parsed) > 0
    try:
        first = True
        async for chunk in request.chunks():
            if cut is not None and cut.is_set():
                yield sse("[DONE]")
                return
            if first and parsed.chat:
                yield sse(builder.role_event())
            first = False
            yield _step_events(builder, chunk)
        if request.aborted:
            return
        if parsed.include_usage and config.usage and config.stream_usage:
            yield sse(builder.usage_event(request.prompt_tokens, request.generated,
                                          request.cached_tokens,
                                          request.reasoning_generated if reasoning else None))
        yield sse("[DONE]")
    finally:
        engine.abort(request)


def _step_events(builder: ResponseBuilder, chunk: Chunk) -> bytes:
    """The events of one step's chunk: content, reasoning, or (a step that crosses from
    reasoning into content) a reasoning event then a content event."""
    thought = chunk.reasoning
    if not thought:
        return sse(builder.content_event(chunk.text, chunk.finish_reason, chunk.pieces))
    if thought >= len(chunk.pieces):
        return sse(builder.reasoning_event(chunk.text, chunk.finish_reason, chunk.pieces))
    head, tail = chunk.pieces[:thought], chunk.pieces[thought:]
    return (sse(builder.reasoning_event("".join(head), None, head))
            + sse(builder.content_event("".join(tail), chunk.finish_reason, tail)))
