"""Stand-ins for vLLM and TabbyAPI in the proxy tests: small Starlette apps under uvicorn on a free port
(real sockets, on a thread) that answer /v1/chat/completions and /v1/completions, streamed and not, and
/health, in each server's own reply shapes, with figures a test chooses per request (`figures`: a
function of the request body, so a class's acceptance or speed can follow the prompt). `delay_s`
really sleeps (a JSON reply before it is sent, a stream between its chunks), so the proxy's clock
sees it. `carried(raw)` reads back, with the json module alone, the figures a client received.

Where each shape comes from (read in the servers' source; nothing here was recorded from a server):

- vLLM. Bodies and chunks: vllm/entrypoints/openai/chat_completion/protocol.py at
  d5dba2d7b0ab9b98096560c69db7126b54b14d79 (ChatCompletionResponse, ChatCompletionStreamResponse; the
  completions endpoint's CompletionResponse mirrors them with `text`) and chat_completion/serving.py at
  5e918640d7b65820db5beaa98c2a99925bff7c17 (a chunk is `data: {model_dump_json(exclude_unset=True)}\\n\\n`;
  the finish chunk sets stop_reason; the usage chunk has `choices: []`, is dumped with exclude_none and
  is sent only when stream_options.include_usage is asked or --enable-force-include-usage is given;
  then `data: [DONE]`). Those commits predate the `metrics` object: it follows
  docs/features/per_request_metrics.md at 0377ba9ad8ebdae7900b9ce41a7a6c00dca7c496 (top-level
  `metrics`, timing fields with --enable-per-request-metrics, on a stream's final usage chunk) and
  docs/features/speculative_decoding/acceptance_metrics.md at 02cf515f0b62e6fc36d5ff8fb9b486a30e8dbe08
  (`metrics.speculative_decoding`, --per-request-spec-decode-metrics summary; vllm-project/vllm PR
  48915), whose serving code this index did not hold.
- TabbyAPI: theroyallab/tabbyAPI PR 452 at 973b22b7eaee864ed8c1346b9d3d0488b3704f8c (refs/pull/452/head):
  endpoints/OAI/types/common.py (UsageStats, CompletionTokensDetails), endpoints/OAI/utils/common_.py
  (get_usage_stats: completion_time = the backend's gen_time in seconds), endpoints/OAI/utils/
  chat_completion.py and completion.py (usage only when stream_options.include_usage, streamed or not;
  a stream's usage on its own last chunk, with the finish suppressed on the chunk before), and
  backends/exllamav3/model.py (gen_time rounded to 0.01 s; draft_accept/draft_reject only with a draft
  model). Its SSE comes from sse_starlette: `data: ...\\r\\n\\r\\n`."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass
from typing import Callable

from threaded import Threaded
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/completions": "completion"}
MODEL = "stand-in"
CHUNKS = 6  # content chunks a stream sends (the delay is spread between them)


@dataclass(frozen=True)
class Figures:
    """What one reply says of its request: generated tokens, the speculative counts, the server's
    decode time, and how long the stand-in really takes to answer."""

    generated: int
    drafted: int | None = None
    accepted: int | None = None
    histogram: tuple[int, ...] = ()  # vLLM: index j = steps that accepted exactly j draft tokens
    decode_ms: float | None = 100.0  # the server's own decode time (None: it reports none)
    prompt_tokens: int = 12
    delay_s: float = 0.0  # slept before a JSON reply, or across a stream's chunks

    @property
    def steps(self) -> int:
        return sum(self.histogram)


def from_histogram(histogram: list[int], decode_ms: float | None = 100.0, delay_s: float = 0.0) -> Figures:
    """vLLM's figures from its histogram, every step drafting k = len - 1: accepted = Σ j·h[j], drafted =
    k·steps, generated = accepted + steps + 1 (each step's own token, and the prefill's)."""
    steps = sum(histogram)
    accepted = sum(j * n for j, n in enumerate(histogram))
    drafted = (len(histogram) - 1) * steps
    return Figures(accepted + steps + 1, drafted, accepted, tuple(histogram), decode_ms, delay_s=delay_s)


def from_counts(accepted: int, rejected: int, decode_ms: float = 100.0, delay_s: float = 0.0) -> Figures:
    """TabbyAPI's figures: its draft model's accepted and rejected tokens (generated: one per step besides)."""
    return Figures(2 * accepted + rejected, accepted + rejected, accepted, decode_ms=decode_ms, delay_s=delay_s)


def positions(histogram: tuple[int, ...]) -> list[int]:
    """Steps whose accepted prefix reached past position i, from the histogram (what the log should hold)."""
    return [sum(histogram[i + 1 :]) for i in range(len(histogram) - 1)]


class Standin:
    """A server on a free port; `sent` is (path, request body, figures) per request answered."""

    separator = b"\n\n"

    def __init__(self, figures: Callable[[dict], Figures]):
        self.figures = figures
        self.sent: list[tuple[str, dict, Figures]] = []
        self.metrics_asked = 0  # GET /metrics answered (404: neither stand-in publishes one)
        self.url = ""

    # -- shapes, per server ------------------------------------------------------------------------
    def reply(self, endpoint: str, body: dict, f: Figures) -> dict:
        raise NotImplementedError

    def chunks(self, endpoint: str, body: dict, f: Figures) -> list[dict]:
        raise NotImplementedError

    def health(self) -> Response:
        return Response(status_code=200)

    # -- serving -----------------------------------------------------------------------------------
    def app(self) -> Starlette:
        async def complete(request: Request) -> Response:
            body = json.loads(await request.body())
            endpoint = ENDPOINTS[request.url.path]
            f = self.figures(body)
            self.sent.append((request.url.path, body, f))
            if body.get("stream"):
                events = [self._event(c) for c in self.chunks(endpoint, body, f)] + [self._event("[DONE]")]
                return StreamingResponse(self._paced(events, f.delay_s), media_type="text/event-stream")
            await asyncio.sleep(f.delay_s)
            return Response(json.dumps(self.reply(endpoint, body, f)).encode(), media_type="application/json")

        async def health(request: Request) -> Response:
            return self.health()

        async def models(request: Request) -> Response:
            return JSONResponse({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

        routes = [Route(path, complete, methods=["POST"]) for path in ENDPOINTS]

        async def metrics(request: Request) -> Response:
            self.metrics_asked += 1
            return Response(b"Not Found", status_code=404)  # Starlette's own 404 for a path it has no route to

        routes += [Route("/health", health), Route("/v1/models", models), Route("/metrics", metrics)]
        return Starlette(routes=routes)

    def _event(self, chunk: dict | str) -> bytes:
        data = chunk if isinstance(chunk, str) else json.dumps(chunk, separators=(",", ":"))
        return b"data: " + data.encode() + self.separator

    async def _paced(self, events: list[bytes], delay_s: float):
        """The first event at once (the role chunk), the rest spread over the delay: a decode seen by a clock."""
        pause = delay_s / max(len(events) - 1, 1)
        for i, event in enumerate(events):
            if i:
                await asyncio.sleep(pause)
            yield event

    def __enter__(self):
        self._served = Threaded(self.app()).__enter__()
        self.url = self._served.url
        return self

    def __exit__(self, *exc) -> None:
        self._served.__exit__()


def _text(n: int) -> list[str]:
    """The generated text in CHUNKS pieces (a token a word: the counts, not the words, are the figures)."""
    words = [f"w{i} " for i in range(n)]
    size = max(1, -(-n // CHUNKS))
    return ["".join(words[i : i + size]) for i in range(0, n, size)] or [""]


def _asked_usage(body: dict) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


class VllmStandin(Standin):
    """vLLM with `--per-request-spec-decode-metrics summary` (spec_metrics) and `--enable-per-request-metrics`
    (timing_metrics); force_usage: `--enable-force-include-usage`."""

    def __init__(self, figures, spec_metrics=True, timing_metrics=True, force_usage=False):
        super().__init__(figures)
        self.spec_metrics, self.timing_metrics, self.force_usage = spec_metrics, timing_metrics, force_usage

    def metrics(self, f: Figures) -> dict | None:
        """The top-level `metrics` object (None: neither flag given, so vLLM writes none)."""
        out: dict = {}
        if self.timing_metrics:
            out.update(time_to_first_token_ms=20.0, generation_time_ms=f.decode_ms, queue_time_ms=0.5)
            out.update(mean_itl_ms=None if f.decode_ms is None else f.decode_ms / max(f.generated - 1, 1))
            out.update(tokens_per_second=None if f.decode_ms is None else f.generated / (f.decode_ms + 20.0) * 1e3)
        if self.spec_metrics and f.histogram:
            steps = f.steps
            out["speculative_decoding"] = {
                "mean_acceptance_length": 1 + f.accepted / steps if steps else 1.0,
                "draft_acceptance_rate": f.accepted / f.drafted if f.drafted else 0.0,
                "acceptance_histogram": list(f.histogram),
                "num_spec_steps": steps,
                "num_accepted_draft_tokens": f.accepted,
                "num_draft_tokens": f.drafted,
                "num_spec_tokens": len(f.histogram) - 1,
            }
        return out or None

    def usage(self, f: Figures) -> dict:
        return {
            "prompt_tokens": f.prompt_tokens,
            "total_tokens": f.prompt_tokens + f.generated,
            "completion_tokens": f.generated,
            "prompt_tokens_details": None,
        }

    def reply(self, endpoint: str, body: dict, f: Figures) -> dict:
        text = "".join(_text(f.generated))
        if endpoint == "chat":
            message = {"role": "assistant", "content": text, "refusal": None, "annotations": None, "audio": None}
            message.update(function_call=None, tool_calls=[], reasoning=None)
            choice = {"index": 0, "message": message}
        else:
            choice = {"index": 0, "text": text}
        choice.update(logprobs=None, finish_reason="length", stop_reason=None, token_ids=None)
        out = {
            "id": f"{'chatcmpl' if endpoint == 'chat' else 'cmpl'}-{uuid.uuid4().hex}",
            "object": "chat.completion" if endpoint == "chat" else "text_completion",
            "created": 1796500000,
            "model": MODEL,
            "choices": [choice],
            "service_tier": None,
            "system_fingerprint": None,
            "usage": self.usage(f),
            "prompt_logprobs": None,
            "prompt_token_ids": None,
            "kv_transfer_params": None,
        }
        metrics = self.metrics(f)
        return out if metrics is None else {**out, "metrics": metrics}

    def chunks(self, endpoint: str, body: dict, f: Figures) -> list[dict]:
        chat = endpoint == "chat"
        head = {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": 1796500000,
            "model": MODEL,
        }
        pieces = _text(f.generated)
        out = [{**head, "choices": [_vllm_choice(chat, "", None, role=True)]}] if chat else []
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1
            out.append({**head, "choices": [_vllm_choice(chat, piece, "length" if last else None)]})
        if self.force_usage or _asked_usage(body):
            usage = {k: v for k, v in self.usage(f).items() if v is not None}  # exclude_none
            metrics = self.metrics(f)
            final = {**head, "choices": [], "usage": usage}
            out.append(final if metrics is None else {**final, "metrics": _no_nones(metrics)})
        return out


def _vllm_choice(chat: bool, text: str, finish: str | None, role: bool = False) -> dict:
    if chat:
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""} if role else {"content": text}}
    else:
        choice = {"index": 0, "text": text}
    choice.update(logprobs=None, finish_reason=finish)
    return {**choice, "stop_reason": None} if finish else choice  # set (so dumped) on the finish only


def _no_nones(d: dict) -> dict:
    return {k: _no_nones(v) if isinstance(v, dict) else v for k, v in d.items() if v is not None}


class TabbyStandin(Standin):
    """TabbyAPI with a draft model loaded (draft) or without."""

    separator = b"\r\n\r\n"  # sse_starlette's

    def __init__(self, figures, draft=True):
        super().__init__(figures)
        self.draft = draft

    def health(self) -> Response:
        return JSONResponse({"status": "healthy", "issues": []})

    def usage(self, f: Figures) -> dict:
        """UsageStats.model_dump(mode="json"): every field, None included."""
        seconds = None if f.decode_ms is None else round(f.decode_ms / 1e3, 2)
        details = None
        if self.draft and f.drafted is not None:
            details = {"accepted_prediction_tokens": f.accepted, "rejected_prediction_tokens": f.drafted - f.accepted}
        return {
            "prompt_tokens": f.prompt_tokens,
            "prompt_tokens_details": {"cached_tokens": 0},
            "prompt_time": 0.05,
            "prompt_tokens_per_sec": round(f.prompt_tokens / 0.05, 2),
            "completion_tokens": f.generated,
            "completion_tokens_details": details,
            "completion_time": seconds,
            "completion_tokens_per_sec": "Indeterminate" if not seconds else round(f.generated / seconds, 2),
            "total_tokens": f.prompt_tokens + f.generated,
            "total_time": round(0.05 + (seconds or 0.0), 2),
        }

    def reply(self, endpoint: str, body: dict, f: Figures) -> dict:
        text = "".join(_text(f.generated))
        choice = {"index": 0, "finish_reason": "length", "eos_reason": "max_new_tokens"}
        if endpoint == "chat":
            choice.update(stop_str=None, logprobs=None)
            choice["message"] = {"role": "assistant", "content": text, "reasoning_content": None}
            choice["message"].update(tool_calls=None, tool_call_id=None)
        else:
            choice.update(logprobs=None, text=text)
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "choices": [choice],
            "created": 1796500000,
            "model": MODEL,
            "object": "chat.completion" if endpoint == "chat" else "text_completion",
            "usage": self.usage(f) if _asked_usage(body) else None,
        }

    def chunks(self, endpoint: str, body: dict, f: Figures) -> list[dict]:
        chat, usage = endpoint == "chat", _asked_usage(body)
        head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk" if chat else "text_completion"}
        pieces = _text(f.generated)
        out = []
        for i, piece in enumerate(pieces):
            finish = "length" if i == len(pieces) - 1 and not usage else None  # suppressed before a usage chunk
            choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
            choice["finish_reason"] = finish
            if finish:
                choice["eos_reason"] = "max_new_tokens"
            out.append(_tabby_chunk(head, chat, choice))
        if usage:
            choice = {"index": 0, "delta": {}} if chat else {"index": 0, "text": ""}
            out.append({**_tabby_chunk(head, chat, {**choice, "finish_reason": "length"}), "usage": self.usage(f)})
        return out


def _tabby_chunk(head: dict, chat: bool, choice: dict) -> dict:
    chunk = {**head, "created": 1796500000, "choices": [choice]}
    return {**chunk, "model": MODEL} if chat else {**chunk, "model_name": MODEL}  # completions say model_name


def carried(raw: bytes) -> dict:
    """The figures a client received in one reply, read with json alone: {drafted, accepted, steps,
    histogram, generated} (None where the reply had none)."""
    if raw.startswith(b"data:"):
        objects = [
            json.loads(line[5:])
            for event in raw.replace(b"\r\n", b"\n").split(b"\n\n")
            for line in event.split(b"\n")
            if line.startswith(b"data:") and line[5:].strip().startswith(b"{")
        ]
    else:
        objects = [json.loads(raw)]
    found = {"drafted": None, "accepted": None, "steps": None, "histogram": None, "generated": None}
    for obj in objects:
        spec = (obj.get("metrics") or {}).get("speculative_decoding")
        usage = obj.get("usage") or {}
        details = usage.get("completion_tokens_details") or {}
        if spec:
            found.update(drafted=spec["num_draft_tokens"], accepted=spec["num_accepted_draft_tokens"])
            found.update(steps=spec["num_spec_steps"], histogram=spec["acceptance_histogram"])
        if "accepted_prediction_tokens" in details:
            accepted, rejected = details["accepted_prediction_tokens"], details["rejected_prediction_tokens"]
            found.update(drafted=accepted + rejected, accepted=accepted)
        if "completion_tokens" in usage:
            found["generated"] = usage["completion_tokens"]
    return found
