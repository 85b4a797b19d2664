"""What an upstream said about one request's speculation, read from its reply in whichever of the
three shapes it comes (a JSON reply, or any server-sent event of a stream). Reading never alters what
is forwarded: the relay yields each chunk first and feeds a copy here afterwards.

- llama-server: `timings` {draft_n, draft_n_accepted, predicted_n, predicted_ms, prompt_n, prompt_ms},
  on a JSON reply and on a stream's last event. draft_n is absent where a request drafted nothing.
- vLLM (`--per-request-spec-decode-metrics summary|detailed`, vllm-project/vllm PR 48915; docs/features/
  speculative_decoding/acceptance_metrics.md at 02cf515f0b62e6fc36d5ff8fb9b486a30e8dbe08): a top-level
  `metrics.speculative_decoding` {num_draft_tokens, num_accepted_draft_tokens, num_spec_steps,
  acceptance_histogram: index j = steps that accepted exactly j, ...}; with `--enable-per-request-metrics`
  also `metrics.generation_time_ms`, its decode time (docs/features/per_request_metrics.md at
  0377ba9ad8ebdae7900b9ce41a7a6c00dca7c496). A stream carries `metrics` only on its final usage chunk
  (`choices: []`), sent when the request asks `stream_options.include_usage` or the server forces it.
- TabbyAPI (theroyallab/tabbyAPI PR 452, 973b22b7eaee864ed8c1346b9d3d0488b3704f8c): `usage`
  {completion_tokens_details: {accepted_prediction_tokens, rejected_prediction_tokens}, completion_time
  (seconds, rounded to 0.01), prompt_time, ...}; sent, streamed or not, only to a request that asks
  `stream_options.include_usage`; in a stream on its own last chunk before [DONE].

Where a server gives no decode time the evidence leaves it None: the proxy's own clock (first to last
byte) is kept apart on RequestTimed, never passed off as the server's."""

from __future__ import annotations

import msgspec

MAX_PENDING_BYTES = 1 << 20  # an event larger than this is no server's figures: stop looking, keep relaying
MAX_JSON_BYTES = 16 << 20  # a JSON reply larger than this is relayed unread
# an event without one of these carries neither figures nor a family's mark: skip its JSON decode
MARKS = (b'"timings"', b'"metrics"', b'"usage"', b'"stop_reason"', b'"eos_reason"')
LLAMA_SERVER, VLLM, TABBYAPI = "llama-server", "vllm", "tabbyapi"


class Evidence(msgspec.Struct, frozen=True):
    """One reply's figures, each None where the server gave none (counts as given, never derived)."""

    family: str = ""  # whose shape it was: LLAMA_SERVER | VLLM | TABBYAPI; "" none recognised
    drafted: int | None = None  # draft tokens proposed
    accepted: int | None = None  # draft tokens accepted
    steps: int | None = None  # verification steps (vLLM's num_spec_steps); None where not given
    generated: int | None = None  # tokens generated
    decode_ms: float | None = None  # the server's own decode time
    prompt_n: int | None = None
    prompt_ms: float | None = None
    accepted_per_pos: tuple[int, ...] = ()  # steps whose accepted prefix reached past position i

    @property
    def has_figures(self) -> bool:
        return self.drafted is not None or self.generated is not None


# -- the shapes, as far as they are read (msgspec skips every other field unread) ---------------------
class _Timings(msgspec.Struct):  # llama-server
    prompt_n: int | None = None
    prompt_ms: float | None = None
    predicted_n: int | None = None
    predicted_ms: float | None = None
    draft_n: int | None = None
    draft_n_accepted: int | None = None


class _SpecDecoding(msgspec.Struct):  # vLLM's metrics.speculative_decoding
    num_draft_tokens: int
    num_accepted_draft_tokens: int
    num_spec_steps: int | None = None
    acceptance_histogram: list[int] | dict[str, int] | None = None  # dense (merged); sparse in the PR's first draft


class _Metrics(msgspec.Struct):  # vLLM's top-level metrics
    generation_time_ms: float | None = None  # first to last output token (--enable-per-request-metrics)
    speculative_decoding: _SpecDecoding | None = None


class _CompletionDetails(msgspec.Struct):  # OpenAI's nested usage, as TabbyAPI fills it
    accepted_prediction_tokens: int | None = None
    rejected_prediction_tokens: int | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    completion_tokens_details: _CompletionDetails | None = None
    completion_time: float | None | msgspec.UnsetType = msgspec.UNSET  # TabbyAPI's, in seconds
    prompt_time: float | None = None  # TabbyAPI's, in seconds


class _Choice(msgspec.Struct):
    stop_reason: object = msgspec.UNSET  # vLLM writes it on a finish, even as null
    eos_reason: object = msgspec.UNSET  # TabbyAPI's


class _Reply(msgspec.Struct):
    timings: _Timings | None = None
    metrics: _Metrics | None | msgspec.UnsetType = msgspec.UNSET
    usage: _Usage | None = None
    choices: list[_Choice] = []


_decoder = msgspec.json.Decoder(_Reply)


def reply_evidence(body: bytes) -> Evidence | None:
    """The evidence of one JSON object (a reply, or one event's data); None where it is none of the shapes."""
    try:
        reply = _decoder.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return None  # not an object, or a field of another shape: the reply is relayed all the same
    if reply.timings is not None:
        return _llama_server(reply.timings)
    if reply.metrics is not msgspec.UNSET or any(c.stop_reason is not msgspec.UNSET for c in reply.choices):
        return _vllm(reply.metrics if isinstance(reply.metrics, _Metrics) else None, reply.usage)
    if _tabby_marked(reply):
        return _tabbyapi(reply.usage)
    if reply.usage is not None:  # usage alone (vLLM's usage chunk without metrics): the family came earlier
        return Evidence(generated=reply.usage.completion_tokens, prompt_n=reply.usage.prompt_tokens)
    return None


def _llama_server(t: _Timings) -> Evidence:
    return Evidence(
        LLAMA_SERVER, t.draft_n, t.draft_n_accepted, None, t.predicted_n, t.predicted_ms, t.prompt_n, t.prompt_ms
    )


def _vllm(metrics: _Metrics | None, usage: _Usage | None) -> Evidence:
    spec = metrics.speculative_decoding if metrics is not None else None
    generated = usage.completion_tokens if usage is not None else None
    prompt_n = usage.prompt_tokens if usage is not None else None
    decode_ms = metrics.generation_time_ms if metrics is not None else None
    if spec is None:
        return Evidence(VLLM, generated=generated, decode_ms=decode_ms, prompt_n=prompt_n)
    return Evidence(
        VLLM,
        spec.num_draft_tokens,
        spec.num_accepted_draft_tokens,
        spec.num_spec_steps,
        generated,
        decode_ms,
        prompt_n,
        accepted_per_pos=positions(spec.acceptance_histogram),
    )


def _tabby_marked(reply: _Reply) -> bool:
    usage = reply.usage
    if usage is not None and usage.completion_time is not msgspec.UNSET:
        return True
    details = usage.completion_tokens_details if usage is not None else None
    if details is not None and details.accepted_prediction_tokens is not None:
        return True  # vLLM's details hold reasoning_tokens only
    return any(c.eos_reason is not msgspec.UNSET for c in reply.choices)


def _tabbyapi(usage: _Usage | None) -> Evidence:
    if usage is None:
        return Evidence(TABBYAPI)  # its finish chunk: the usage chunk comes next, if the request asked for it
    details = usage.completion_tokens_details
    accepted = details.accepted_prediction_tokens if details is not None else None
    rejected = details.rejected_prediction_tokens if details is not None else None
    seconds = usage.completion_time if isinstance(usage.completion_time, (int, float)) else None
    return Evidence(
        TABBYAPI,
        None if accepted is None or rejected is None else accepted + rejected,
        accepted if rejected is not None else None,
        None,  # TabbyAPI counts no steps
        usage.completion_tokens,
        None if seconds is None else seconds * 1e3,
        usage.prompt_tokens,
        None if usage.prompt_time is None else usage.prompt_time * 1e3,
    )


def positions(histogram: list[int] | dict[str, int] | None) -> tuple[int, ...]:
    """From steps that accepted exactly j (index j) to steps whose accepted prefix reached past
    position i: accepted_per_pos[i] = Σ_{j > i} histogram[j], positions 0 .. k-1."""
    if not histogram:
        return ()
    dense = histogram if isinstance(histogram, list) else _dense(histogram)
    return tuple(sum(dense[i + 1 :]) for i in range(len(dense) - 1))


def _dense(sparse: dict[str, int]) -> list[int]:
    try:
        counts = {int(j): n for j, n in sparse.items()}
    except ValueError:
        return []
    return [counts.get(j, 0) for j in range(max(counts, default=-1) + 1)]


class ReplyReader:
    """Reads a reply's evidence from the copies it is fed: a JSON body once whole, or each complete
    server-sent event of a stream (the family from the first event that shows one; the figures from
    the last event that carries them: llama-server's last chunk, vLLM's and TabbyAPI's usage chunk)."""

    def __init__(self, content_type: str):
        """ "" for a reply nobody needs the evidence of (a pass-through path): it is not read at all."""
        self.stream = content_type.split(";")[0].strip().lower() == "text/event-stream"
        self.family = ""
        self.found: Evidence | None = None
        self._pending = bytearray()
        self._given_up = not content_type

    @property
    def evidence(self) -> Evidence | None:
        """None where no event or body had any shape read here."""
        if self.found is None:
            return Evidence(self.family) if self.family else None
        return msgspec.structs.replace(self.found, family=self.family or self.found.family)

    def feed(self, chunk: bytes) -> None:
        if self._given_up:
            return
        self._pending += chunk
        if self.stream:
            self._read_events()
        elif len(self._pending) > MAX_JSON_BYTES:
            self._give_up()

    def close(self) -> None:
        """The reply ended: a JSON body is read now; a stream's unterminated last event is read too."""
        if self._given_up:
            return
        if self.stream:
            self._read_event(bytes(self._pending))
        else:
            self._take(reply_evidence(bytes(self._pending)))
        self._pending.clear()

    def _read_events(self) -> None:
        while True:
            end, sep = _event_end(self._pending)
            if end < 0:
                break
            self._read_event(bytes(self._pending[:end]))
            del self._pending[: end + sep]
        if len(self._pending) > MAX_PENDING_BYTES:
            self._give_up()

    def _read_event(self, event: bytes) -> None:
        if not any(mark in event for mark in MARKS):
            return  # most chunks carry only text: skip the JSON decode
        data = b"\n".join(line[5:].lstrip(b" ") for line in event.splitlines() if line.startswith(b"data:"))
        self._take(reply_evidence(data))

    def _take(self, found: Evidence | None) -> None:
        if found is None:
            return
        self.family = self.family or found.family
        if found.has_figures:
            self.found = found

    def _give_up(self) -> None:
        self._given_up = True
        self._pending = bytearray()


def _event_end(buf: bytearray) -> tuple[int, int]:
    """(where the first complete event ends, the separator's length); (-1, 0) while none is complete."""
    found = [(i, len(sep)) for sep in (b"\n\n", b"\r\n\r\n", b"\r\r") if (i := buf.find(sep)) >= 0]
    return min(found) if found else (-1, 0)
