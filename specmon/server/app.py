"""The ASGI app (Starlette): routes, the API key, the body limit, and the one error shape.

Handlers never touch the model: a request is checked (in a thread: templating and tokenizing),
queued, and then only awaits what the worker thread posts back, so the event loop never blocks
on a decode. Streams are server-sent events, one chunk per round that adds text, ending in
`data: [DONE]`; a client that leaves cancels its request."""

from __future__ import annotations

import asyncio
import functools
import hmac
import time
from typing import AsyncIterator

import anyio
import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from specmon.server.errors import ApiError, from_decode_error, status_error
from specmon.server.jobs import Finished, Job, Piece
from specmon.server.metrics import CONTENT_TYPE
from specmon.server.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    Health,
    Model,
    ModelList,
    encoder,
)
from specmon.server.reply import Reply
from specmon.server.text import ReplyText

JSON = "application/json"
CLASS_HEADER = "x-specmon-class"
SHUT_DOWN = ApiError(503, "the server shut down during this request", type="server_error")  # its decode cancelled


def build_app(state) -> Starlette:
    """The app of a runner.Serving (`state`): its admission, worker, metrics, session, options and on_refused."""
    served = Model(state.admission.model_id, int(time.time()), max_model_len=state.admission.context_len)

    async def models(request: Request) -> Response:
        authorize(request, state.options)
        return _json(ModelList([served]))

    async def model(request: Request) -> Response:
        """One model by id, as `client.models.retrieve(id)` asks for it."""
        authorize(request, state.options)
        if (asked := request.path_params["model_id"]) != state.admission.model_id:
            raise ApiError(
                404,
                f"the model {asked[:80]!r} does not exist; this server serves {state.admission.model_id!r}",
                param="model",
                code="model_not_found",
                type="not_found_error",
            )
        return _json(served)

    async def health(request: Request) -> Response:
        busy = int(state.worker.in_flight is not None)
        return _json(Health("ok", state.session.session_id, state.admission.model_id, len(state.worker.waiting), busy))

    async def metrics(request: Request) -> Response:
        authorize(request, state.options)
        return Response(state.metrics.exposition(), media_type=CONTENT_TYPE)

    async def api_error(request: Request, exc: ApiError) -> Response:
        _note_refused(state, request.url.path, exc)
        return error_response(exc)

    async def server_error(request: Request, exc: Exception) -> Response:
        """A bug: one line on stderr and a 500 in the one shape (uvicorn prints the traceback)."""
        return await api_error(request, ApiError(500, f"internal error: {exc!r}", type="server_error"))

    async def http_error(request: Request, exc: HTTPException) -> Response:
        return await api_error(request, status_error(request, exc))

    routes = [
        Route("/v1/chat/completions", functools.partial(_complete, state=state, chat=True), methods=["POST"]),
        Route("/v1/completions", functools.partial(_complete, state=state, chat=False), methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/models/{model_id:path}", model, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
    return Starlette(
        routes=routes, exception_handlers={ApiError: api_error, HTTPException: http_error, Exception: server_error}
    )


def _json(body) -> Response:
    return Response(encoder.encode(body), media_type=JSON)


def error_response(exc: ApiError) -> Response:
    return Response(exc.body(), status_code=exc.status, headers=exc.headers, media_type=JSON)


def _note_refused(state, path: str, exc: ApiError) -> None:
    """A request answered without being decoded: counted by status, and its headless line."""
    state.metrics.refused.labels(str(exc.status)).inc()
    state.on_refused(path, exc)


def _client_left(state, path: str, job: Job) -> None:
    """The client closed the connection. Still queued: withdrawn, never decoded, so refused with 499 here.
    Decoding: it stops after its round and the worker reports it (requests_total, its line) as cancelled."""
    if state.worker.cancel(job):
        _note_refused(state, path, ApiError(499, "the client closed the connection", code="client_closed_request"))


def class_header(request: Request) -> str | None:
    """X-Specmon-Class as UTF-8 (HTTP hands headers over as bytes; Latin-1 would garble any other script)."""
    raw = next((value for key, value in request.headers.raw if key.lower() == CLASS_HEADER.encode()), None)
    try:
        return None if raw is None else raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(
            400, "the X-Specmon-Class header is not UTF-8", param="X-Specmon-Class", code="invalid_value"
        ) from None


def authorize(request: Request, state) -> None:
    """`Authorization: Bearer KEY`, compared in constant time; the key is never echoed or logged."""
    if state.api_key is None:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), state.api_key):
        raise ApiError(
            401,
            "missing or incorrect API key: send it as `Authorization: Bearer KEY`",
            code="invalid_api_key",
            headers={"WWW-Authenticate": "Bearer"},
        )


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The body, refused with 413 as soon as it passes the limit (announced or as it arrives), with
    408 when it is not all in within the timeout, and 499 when the client leaves before the end."""
    length = request.headers.get("content-length", "")
    too_large = ApiError(413, f"the request body is over the {limit} byte limit", code="request_too_large")
    if length.isdigit() and int(length) > limit:
        raise too_large
    body = bytearray()
    try:
        with anyio.fail_after(timeout_s):
            async for chunk in request.stream():
                body += chunk
                if len(body) > limit:
                    raise too_large
    except TimeoutError:
        raise ApiError(
            408,
            f"the request body did not arrive within {timeout_s:g} s",
            code="request_timeout",
            headers={"Connection": "close"},
        ) from None
    except ClientDisconnect:
        raise ApiError(
            499, "the client closed the connection during its upload", code="client_closed_request"
        ) from None
    return bytes(body)


async def _complete(request: Request, state, chat: bool) -> Response:
    authorize(request, state.options)
    body = await read_body(request, state.options.max_body_bytes, state.options.body_timeout_s)
    try:
        parsed = msgspec.json.decode(body, type=ChatCompletionRequest if chat else CompletionRequest)
    except msgspec.DecodeError as exc:
        raise from_decode_error(exc) from None
    except RecursionError:  # nesting inside a free-form field (metadata, tools): the decoder's stack ran out
        raise ApiError(400, "the request body is nested too deeply", code="invalid_json") from None
    admit = state.admission.chat if chat else state.admission.completion
    admitted = await anyio.to_thread.run_sync(admit, parsed, class_header(request))
    # control tokens left out, as vLLM's skip_special_tokens: past an ignored eos, <|im_end|> is template markup
    tok = state.admission.tokenizer.tokenizer
    text = ReplyText(functools.partial(tok.decode, skip_special_tokens=True), admitted.prompt.end_ids, admitted.stops)
    job = Job(admitted, asyncio.get_running_loop(), text)
    state.worker.submit(job)
    reply = Reply(admitted.id, int(time.time()), state.admission.model_id, chat)  # OpenAI's: when this completion began
    if parsed.stream:
        usage = parsed.stream_options is not None and parsed.stream_options.include_usage
        return StreamingResponse(
            _events(job, reply, state, request.url.path, usage),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    item = await _outcome(job, request, state)
    if item is None:  # no one is left to read a reply
        return Response(status_code=499)
    if isinstance(item, ApiError):
        raise item
    if item.finish_reason == "cancelled":  # decoded in part, so reported by the worker: not a refusal too
        return error_response(SHUT_DOWN)
    return _json(reply.whole(item))


async def _outcome(job: Job, request: Request, state) -> Finished | ApiError | None:
    """Wait for the decode's end, or for the client to leave (None: its request is cancelled)."""
    gone = asyncio.ensure_future(disconnected(request))
    try:
        while True:
            item = asyncio.ensure_future(job.out.get())
            await asyncio.wait({item, gone}, return_when=asyncio.FIRST_COMPLETED)
            if not item.done():
                item.cancel()
                _client_left(state, request.url.path, job)
                return None
            if isinstance(result := item.result(), (Finished, ApiError)):
                return result
    finally:
        gone.cancel()


async def disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _events(job: Job, reply: Reply, state, path: str, include_usage: bool) -> AsyncIterator[bytes]:
    """Server-sent events: the chunks (Reply.chunk), the usage chunk if asked for, then [DONE]."""
    finished = False
    try:
        yield _sse(reply.chunk("", role="assistant"))  # as soon as the request is queued
        while isinstance(item := await job.out.get(), Piece):
            yield _sse(reply.chunk(item.text, specmon=item.round))
        finished = True
        if isinstance(item, ApiError) or item.finish_reason == "cancelled":
            error = item if isinstance(item, ApiError) else SHUT_DOWN
            yield b"data: " + error.body() + b"\n\n"
        else:
            yield _sse(reply.chunk(item.rest, item.finish_reason, specmon=item.info))
            if include_usage:
                yield _sse(reply.usage(item.usage))
        yield b"data: [DONE]\n\n"
    finally:
        if not finished:
            _client_left(state, path, job)  # the stream was cancelled before the end


def _sse(chunk) -> bytes:
    return b"data: " + encoder.encode(chunk) + b"\n\n"
