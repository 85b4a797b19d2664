"""What an upstream said about one request's speculation, read from its reply in whichever of the
three shapes it comes (a JSON reply, or any server-sent event of a stream; proxy.reader finds them in
the copies the relay feeds it, after each chunk is sent on, so reading never alters what is forwarded).

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
byte) is kept apart on RequestTimed, never passed off as the server's.

An upstream's figures are input, not truth: one out of range leaves the whole reply unmeasured (its
Evidence keeps the family and says why); reading never raises (a Python int past 2**64 reached the log once)."""

from __future__ import annotations

import json
import math

import msgspec

LLAMA_SERVER, VLLM, TABBYAPI = "llama-server", "vllm", "tabbyapi"
MAX_COUNT = 1 << 32  # tokens or steps of one request: past this a figure counts nothing real
MAX_DRAFT = 256  # draft tokens one step proposes: past any server's --draft-max / num_speculative_tokens
MAX_MS = 1e9  # 11.6 days: no request takes longer
MAX_TOKENS_PER_MS = 1e3  # a million tokens a second: a shorter decode time is not a measurement
LONGEST_INT = 40  # digits; a longer JSON integer is read as past every bound, never converted


class Evidence(msgspec.Struct, frozen=True):
    """One reply's figures in RequestTimed's names, each None where the server gave none (as given, never derived)."""

    family: str = ""  # whose shape it was: LLAMA_SERVER | VLLM | TABBYAPI; "" none recognised
    draft_n: int | None = None  # draft tokens proposed
    draft_n_accepted: int | None = None  # draft tokens accepted
    spec_steps: int | None = None  # verification steps (vLLM's num_spec_steps); None where not given
    predicted_n: int | None = None  # tokens generated
    predicted_ms: float | None = None  # the server's own decode time
    prompt_n: int | None = None
    prompt_ms: float | None = None
    accepted_per_pos: tuple[int, ...] = ()  # steps whose accepted prefix reached past position i
    unmeasured: str = ""  # why the reply's figures are no evidence (then every figure is None); "" they are


class OutOfRange(Exception):
    """A figure that is no evidence; its message says which and why in a few words."""


# -- the shapes, as far as they are read (msgspec skips every other field unread); each figure is read as
# whatever JSON value it is (`object`) and checked below, never trusted to a type ------------------------
class _Timings(msgspec.Struct):  # llama-server
    prompt_n: object = None
    prompt_ms: object = None
    predicted_n: object = None
    predicted_ms: object = None
    draft_n: object = None
    draft_n_accepted: object = None


class _SpecDecoding(msgspec.Struct):  # vLLM's metrics.speculative_decoding
    num_draft_tokens: object
    num_accepted_draft_tokens: object
    num_spec_steps: object = None
    acceptance_histogram: object = None  # a list (dense, merged) or {"j": n} (sparse, the PR's first draft)


class _Metrics(msgspec.Struct):  # vLLM's top-level metrics
    generation_time_ms: object = None  # first to last output token (--enable-per-request-metrics)
    speculative_decoding: _SpecDecoding | None = None


class _CompletionDetails(msgspec.Struct):  # OpenAI's nested usage, as TabbyAPI fills it
    accepted_prediction_tokens: object = None
    rejected_prediction_tokens: object = None


class _Usage(msgspec.Struct):
    prompt_tokens: object = None
    completion_tokens: object = None
    completion_tokens_details: _CompletionDetails | None = None
    completion_time: object = msgspec.UNSET  # TabbyAPI's, in seconds
    prompt_time: object = None  # TabbyAPI's, in seconds


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
    """The evidence of one JSON object (a reply, or one event's data); None where it is none of the shapes.
    A shape whose figures are out of range is Evidence(family, unmeasured=why)."""
    try:
        reply = _decoder.decode(body)
    except (msgspec.DecodeError, RecursionError):
        # msgspec refuses numbers JSON can carry (1e400, a 5000-digit integer) and NaN: read them as json does
        try:
            reply = msgspec.convert(json.loads(body, parse_int=_int), _Reply)
        except (ValueError, TypeError, RecursionError, msgspec.ValidationError):
            return None  # not an object, or a field of another shape: the reply is relayed all the same
    family = _family(reply)
    try:
        found = _read(family, reply)
        return None if found is None else _checked(found)
    except OutOfRange as why:
        return Evidence(family, unmeasured=str(why))


def _int(digits: str) -> int:
    """A JSON integer, one too long to convert (Python refuses past 4300 digits) read as past every bound."""
    return int(digits) if len(digits) <= LONGEST_INT else 10**LONGEST_INT


def _family(reply: _Reply) -> str:
    if reply.timings is not None:
        return LLAMA_SERVER
    if reply.metrics is not msgspec.UNSET or any(c.stop_reason is not msgspec.UNSET for c in reply.choices):
        return VLLM
    usage = reply.usage or _Usage()
    details = usage.completion_tokens_details or _CompletionDetails()  # vLLM's hold reasoning_tokens only
    tabby = usage.completion_time is not msgspec.UNSET or details.accepted_prediction_tokens is not None
    return TABBYAPI if tabby or any(c.eos_reason is not msgspec.UNSET for c in reply.choices) else ""


def _read(family: str, reply: _Reply) -> Evidence | None:
    usage = reply.usage
    if family == LLAMA_SERVER:
        return _llama_server(reply.timings)
    if family == VLLM:
        return _vllm(reply.metrics if isinstance(reply.metrics, _Metrics) else _Metrics(), usage)
    if family == TABBYAPI:
        return _tabbyapi(usage)
    if usage is None:
        return None
    # usage alone (vLLM's usage chunk without metrics): the family came earlier
    return Evidence(predicted_n=_count("completion_tokens", usage.completion_tokens), prompt_n=_prompt_n(usage))


def _llama_server(t: _Timings) -> Evidence:
    return Evidence(
        LLAMA_SERVER,
        _count("draft_n", t.draft_n),
        _count("draft_n_accepted", t.draft_n_accepted),
        None,
        _count("predicted_n", t.predicted_n),
        _ms("predicted_ms", t.predicted_ms),
        _count("prompt_n", t.prompt_n),
        _ms("prompt_ms", t.prompt_ms),
    )


def _vllm(metrics: _Metrics, usage: _Usage | None) -> Evidence:
    spec = metrics.speculative_decoding or _SpecDecoding(None, None)  # none: no draft figures
    steps = _count("num_spec_steps", spec.num_spec_steps)
    return Evidence(
        VLLM,
        _count("num_draft_tokens", spec.num_draft_tokens),
        _count("num_accepted_draft_tokens", spec.num_accepted_draft_tokens),
        steps,
        _count("completion_tokens", usage.completion_tokens) if usage is not None else None,
        _ms("generation_time_ms", metrics.generation_time_ms),
        _prompt_n(usage),
        accepted_per_pos=_positions(spec.acceptance_histogram, steps),
    )


def _tabbyapi(usage: _Usage | None) -> Evidence:
    if usage is None:
        return Evidence(TABBYAPI)  # its finish chunk: the usage chunk comes next, if the request asked for it
    details = usage.completion_tokens_details
    accepted = _count("accepted_prediction_tokens", details.accepted_prediction_tokens) if details else None
    rejected = _count("rejected_prediction_tokens", details.rejected_prediction_tokens) if details else None
    seconds = None if usage.completion_time is msgspec.UNSET else usage.completion_time
    return Evidence(
        TABBYAPI,
        None if accepted is None or rejected is None else accepted + rejected,
        accepted if rejected is not None else None,
        None,  # TabbyAPI counts no steps
        _count("completion_tokens", usage.completion_tokens),
        _ms("completion_time", seconds, "s"),
        _prompt_n(usage),
        _ms("prompt_time", usage.prompt_time, "s"),
    )


def _prompt_n(usage: _Usage | None) -> int | None:
    return _count("prompt_tokens", usage.prompt_tokens) if usage is not None else None


# -- the checks: each raises OutOfRange with the figure's own name ------------------------------------
def _count(name: str, value: object) -> int | None:
    """A count as given: a non-negative integer up to MAX_COUNT (a bool or 3.0 is no count); None: not given."""
    if value is None:
        return None
    if type(value) is not int:
        raise OutOfRange(f"{name} is not an integer")
    if value < 0:
        raise OutOfRange(f"{name} is negative")
    if value > MAX_COUNT:
        raise OutOfRange(f"{name} is past 2**{MAX_COUNT.bit_length() - 1}")  # never str() it: it may be huge
    return value


def _ms(name: str, value: object, unit: str = "ms") -> float | None:
    """A time as given, in ms: a finite number from 0 to MAX_MS (a decode time's floor is _checked's)."""
    if value is None:
        return None
    if type(value) not in (int, float):
        raise OutOfRange(f"{name} is not a number")
    try:
        ms = float(value) * (1e3 if unit == "s" else 1.0)
    except OverflowError:  # an integer past a float's range
        ms = math.inf
    if math.isnan(ms) or not 0 <= ms <= MAX_MS:
        if isinstance(value, int) and abs(value) >= 10**15:  # never a huge int's digits (str() of one may raise)
            raise OutOfRange(f"{name} is {'-huge' if value < 0 else 'huge'}")
        raise OutOfRange(f"{name} is {f'{value:.3g} {unit}' if math.isfinite(value) else value}")
    return ms


def _checked(e: Evidence) -> Evidence:
    """`e`, where accepted ≤ drafted ≤ what its steps and tokens could draft, in a time its tokens could take."""
    drafted, accepted, generated = e.draft_n, e.draft_n_accepted, e.predicted_n
    if accepted is not None and drafted is None:
        raise OutOfRange("accepted given without drafted")
    if accepted is not None and accepted > drafted:
        raise OutOfRange(f"accepted {accepted} > drafted {drafted}")
    if drafted is not None and generated is not None and drafted > MAX_DRAFT * generated:
        raise OutOfRange(f"{drafted} drafted for {generated} tokens")
    if drafted is not None and e.spec_steps is not None and drafted > MAX_DRAFT * e.spec_steps:
        raise OutOfRange(f"{drafted} drafted in {e.spec_steps} steps")
    if e.predicted_ms == 0:
        e = msgspec.structs.replace(e, predicted_ms=None)  # TabbyAPI rounds to 0.01 s: a fast reply gave no time
    if e.predicted_ms is not None and generated != 0:
        n = generated or 1  # a decode time with no count must still have taken some time
        if e.predicted_ms * MAX_TOKENS_PER_MS < n:
            tokens = "tokens not given" if generated is None else f"{generated} tokens"
            raise OutOfRange(f"decode time {e.predicted_ms:.3g} ms for {tokens}")
    return e


def _positions(given: object, steps: int | None) -> tuple[int, ...]:
    """vLLM's acceptance histogram (index j: steps that accepted exactly j; at most MAX_DRAFT + 1 entries,
    summing to its steps) as steps whose accepted prefix reached past position i: Σ_{j > i} histogram[j]."""
    if given is None:
        return ()
    if isinstance(given, dict):  # {"j": n}: a key past MAX_DRAFT or not a position is no histogram (nor a long list)
        if not all(
            isinstance(j, str) and j.isascii() and j.isdigit() and len(j) <= 4 and int(j) <= MAX_DRAFT for j in given
        ):
            raise OutOfRange("acceptance_histogram has a key that is no draft position")
        counts = {int(j): n for j, n in given.items()}
        given = [counts.get(j, 0) for j in range(max(counts, default=-1) + 1)]
    if not isinstance(given, list) or len(given) > MAX_DRAFT + 1:
        raise OutOfRange("acceptance_histogram is not a histogram")
    dense = [_count("acceptance_histogram entry", n if n is not None else "") for n in given]  # null: no count
    if steps is not None and sum(dense) != steps:
        raise OutOfRange(f"acceptance_histogram sums to {sum(dense)}, not num_spec_steps {steps}")
    return tuple(sum(dense[i + 1 :]) for i in range(len(dense) - 1))
