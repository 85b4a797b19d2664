"""Events for tests, built from one set of defaults: a test names only the fields it is about.

session_started(): session "s" of profile "p", the torch backend on the CPU, target "t", drafter "ngram".
prompt_started(): prompt "p" of class "chat" in session "s", decoded plain (k=0), 5 prompt tokens, 64 new.
round_verified(): a plain round (no draft, one token emitted) of prompt "p", class "chat", in session "s".
policy_loaded(): a policy "p.toml" taken (accepted), with no classes listed.
request_timed(): a streamed-off chat request the spec side answered 200, with no timings.
The defaults are fresh objects on each call, so a test may change a list it was given."""

from __future__ import annotations

import zlib

from specmon.events.frames import FRAME_V1, MAGIC, PREAMBLE
from specmon.events.schema import (
    PolicyLoaded,
    PromptStarted,
    RequestTimed,
    RoundVerified,
    Sampling,
    SessionStarted,
    encode,
)
from specmon.proxy.tally import Tally


def preamble() -> bytes:
    """Format 1's preamble: with `frame`, a format-1 log (LogWriter writes format 2)."""
    return PREAMBLE.pack(MAGIC, 1)


def frame(event) -> bytes:
    """One event as a format-1 frame: length, CRC-32, msgpack payload (unnumbered)."""
    payload = encode(event)
    return FRAME_V1.pack(len(payload), zlib.crc32(payload)) + payload


def session_started(**fields) -> SessionStarted:
    """A SessionStarted with `fields` over the defaults (every required field has one)."""
    defaults = dict(
        session_id="s",
        t=0.0,
        specmon_version="0",
        profile_name="p",
        profile_text="",
        backend="torch",
        target="t",
        drafter="ngram",
        dtype="float32",
        device="cpu",
    )
    return SessionStarted(**(defaults | fields))


def prompt_started(**fields) -> PromptStarted:
    """A PromptStarted with `fields` over the defaults (every required field has one)."""
    defaults = dict(
        session_id="s",
        t=0.0,
        prompt_id="p",
        prompt_class="chat",
        draft_len=0,
        drafter="ngram",
        sampling=Sampling(),
        prompt_tokens=5,
        max_new_tokens=64,
    )
    return PromptStarted(**(defaults | fields))


def round_verified(**fields) -> RoundVerified:
    """A RoundVerified with `fields` over the defaults (every required field has one)."""
    defaults = dict(
        session_id="s",
        t=0.0,
        round_id=0,
        prompt_id="p",
        prompt_class="chat",
        round_index=0,
        draft_len=0,
        proposed=[],
        accepted=0,
        rejection_pos=None,
        emitted=[7],
        draft_ms=0.0,
        verify_ms=10.0,
        overhead_ms=0.0,
        target_probs=[],
        alpha_hat=None,
        margins=[],
        sampling=Sampling(),
        mem_bytes=0,
    )
    return RoundVerified(**(defaults | fields))


def policy_loaded(**fields) -> PolicyLoaded:
    """A PolicyLoaded with `fields` over the defaults (every required field has one)."""
    defaults = dict(session_id="s", t=0.0, source="p.toml", sha256="a" * 64, text="", accepted=True)
    return PolicyLoaded(**(defaults | fields))


def request_timed(**fields) -> RequestTimed:
    """A RequestTimed with `fields` over the defaults (every required field has one)."""
    defaults = dict(
        session_id="s",
        t=0.0,
        request_id="r",
        prompt_class="chat",
        class_rule="",
        upstream="spec",
        endpoint="chat",
        status=200,
        stream=False,
    )
    return RequestTimed(**(defaults | fields))


def tally_of(events) -> Tally:
    """A proxy's Tally of a whole list of events (the end table's, fed every event at once)."""
    tally = Tally()
    for ev in events:
        tally.add(ev)
    return tally
