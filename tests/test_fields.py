"""The wire contract, pinned: every event type, every field set, through the codec and the frames;
and each struct's fields in order, since array_like structs encode as arrays in that order."""

import typing

import msgspec
import pytest

from specmon.events.frames import FrameDecoder
from specmon.events.schema import (
    AnyEvent,
    ClassInForce,
    Decision,
    Equivalence,
    GateChoice,
    Recall,
    RouteChoice,
    LogRotated,
    PolicyLoaded,
    PromptFinished,
    PromptStarted,
    QueueSample,
    RequestTimed,
    ServerScraped,
    ResourceSample,
    RoundVerified,
    Sampling,
    SessionFinished,
    SessionStarted,
    StoredReply,
    decode,
    encode,
)
from events import frame, preamble

# Field order is the wire format: a struct only ever gains fields at the end. A change here that
# is not an append breaks every log already written.
FIELDS = {
    SessionStarted: [
        "session_id",
        "t",
        "specmon_version",
        "profile_name",
        "profile_text",
        "backend",
        "target",
        "drafter",
        "dtype",
        "device",
        "host",
        "policy_text",
        "policy_hash",
        "cache_bytes",
        "verify_ms",
        "draft_ms",
        "verify_disturbed",
        "part",
    ],
    PromptStarted: [
        "session_id",
        "t",
        "prompt_id",
        "prompt_class",
        "draft_len",
        "drafter",
        "sampling",
        "prompt_tokens",
        "max_new_tokens",
        "class_rule",
        "bench_k",
    ],
    RoundVerified: [
        "session_id",
        "t",
        "round_id",
        "prompt_id",
        "prompt_class",
        "round_index",
        "draft_len",
        "proposed",
        "accepted",
        "rejection_pos",
        "emitted",
        "draft_ms",
        "verify_ms",
        "overhead_ms",
        "target_probs",
        "alpha_hat",
        "margins",
        "sampling",
        "mem_bytes",
        "accepted_text",
        "final_text",
        "matched",
        "host_stall_ms",
        "explored",
        "cut",
    ],
    PromptFinished: [
        "session_id",
        "t",
        "prompt_id",
        "prompt_class",
        "draft_len",
        "rounds",
        "generated",
        "text",
        "stop_reason",
        "prefill_ms",
        "decode_ms",
        "equivalence",
        "drafter",
        "sampling",
    ],
    ResourceSample: ["session_id", "t", "rss_bytes", "vram_used_bytes", "vram_total_bytes", "gpu_others"],
    SessionFinished: ["session_id", "t", "rounds", "reason"],
    PolicyLoaded: ["session_id", "t", "source", "sha256", "text", "accepted", "error", "classes", "changed"],
    Decision: [
        "session_id",
        "t",
        "decision_id",
        "prompt_class",
        "speculate_from",
        "speculate_to",
        "k_from",
        "k_to",
        "rule_key",
        "rule_line",
        "retired_inputs",
        "retired_thresholds",
        "round_ids",
        "applied",
        "policy_sha256",
        "reason",
        "match_from",
        "match_to",
        "request_ids",
        "rule",
    ],
    QueueSample: ["session_id", "t", "waiting", "request_id", "endpoint", "arrived"],
    ServerScraped: [
        "session_id",
        "t",
        "url",
        "kind",
        "drafts",
        "draft_tokens",
        "accepted",
        "accepted_per_pos",
        "generation_tokens",
        "running",
        "waiting",
        "error",
    ],
    RequestTimed: [
        "session_id",
        "t",
        "request_id",
        "prompt_class",
        "class_rule",
        "upstream",
        "endpoint",
        "status",
        "stream",
        "prompt_n",
        "prompt_ms",
        "predicted_n",
        "predicted_ms",
        "draft_n",
        "draft_n_accepted",
        "first_byte_ms",
        "total_ms",
        "family",
        "spec_steps",
        "accepted_per_pos",
        "upstream_url",
        "routed",
        "unmeasured",
    ],
    Sampling: ["temperature", "top_p", "top_k", "seed"],
    Equivalence: ["verdict", "first_divergence", "margin", "near_tie_margin"],
    ClassInForce: ["name", "speculate", "draft_len", "min_match"],
    GateChoice: [
        "rates",
        "tried",
        "taken",
        "steps",
        "prior",
        "prior_weight",
        "shared_weight",
        "min_gain",
        "min_match",
        "positional",
        "curve_disturbed",
        "kept_from",
        "kept_to",
        "recalled",
    ],
    Recall: ["session_id", "rounds", "tried", "taken", "pool_tried", "pool_taken"],
    RouteChoice: [
        "side_from",
        "side_to",
        "explore_share",
        "ratio",
        "low",
        "high",
        "spec_requests",
        "plain_requests",
        "min_requests",
        "window",
        "clock",
        "borrowed",
        "recalled",
    ],
    StoredReply: ["session_id", "request_id", "side", "clock", "tokens", "ms"],
    LogRotated: ["session_id", "t", "part", "next_name", "next_log_id"],
}
# The tag is the first element of an event's array: renaming one orphans it in old logs too.
TAGS = {
    SessionStarted: "session",
    PromptStarted: "prompt",
    RoundVerified: "round",
    PromptFinished: "prompt_done",
    ResourceSample: "resource",
    SessionFinished: "session_done",
    PolicyLoaded: "policy",
    Decision: "decision",
    QueueSample: "queue",
    ServerScraped: "scrape",
    RequestTimed: "request",
    Sampling: None,
    Equivalence: None,
    ClassInForce: None,
    GateChoice: "gate",
    Recall: None,
    RouteChoice: "route",
    StoredReply: None,
    LogRotated: "rotated",
}

SAMPLING = Sampling(temperature=0.7, top_p=0.9, top_k=40, seed=1234)
EQUIVALENCE = Equivalence(verdict="near-tie", first_divergence=17, margin=0.125, near_tie_margin=0.5)
SESSION = dict(session_id="20250101-120000-abc123", t=1_700_000_000.25)
SHA = "c0ffee" * 10 + "abcd"

# One of each event type, every field (nested ones too) away from its default and from zero/empty.
SAMPLES = [
    SessionStarted(
        **SESSION,
        specmon_version="0.4.0",
        profile_name="smollm2-cpu",
        profile_text='name = "smollm2-cpu"\n',
        backend="torch",
        target="SmolLM2-135M-Instruct",
        drafter="ngram",
        dtype="float32",
        device="cpu",
        host={"hostname": "box", "cpus": "16"},
        policy_text='[policy]\nmode = "enforce"\n',
        policy_hash=SHA,
        cache_bytes={"target": 1 << 24, "draft": 1 << 20},
        verify_ms=[40.5, 44.25, 60.0],
        draft_ms=0.75,
        verify_disturbed=2,
        part=3,
    ),
    PromptStarted(
        **SESSION,
        prompt_id="rewrite-2",
        prompt_class="rewrite",
        draft_len=7,
        drafter="ngram",
        sampling=SAMPLING,
        prompt_tokens=93,
        max_new_tokens=128,
        class_rule="classes[1].match.keywords (line 41); k=7: policy",
        bench_k=6,
    ),
    RoundVerified(
        **SESSION,
        round_id=4242,
        prompt_id="rewrite-2",
        prompt_class="rewrite",
        round_index=12,
        draft_len=4,
        proposed=[11, 12, 13, 14],
        accepted=2,
        rejection_pos=2,
        emitted=[11, 12, 99],
        draft_ms=0.25,
        verify_ms=41.5,
        overhead_ms=1.75,
        target_probs=[0.875, 0.5, 0.0625, 0.03125],
        alpha_hat=0.625,
        margins=[3.5, 2.25, 0.75],
        sampling=SAMPLING,
        mem_bytes=3 << 30,
        accepted_text=" the cat",
        final_text=" sat",
        matched=3,
        host_stall_ms=2.5,
        explored=True,
        cut=[13, 14],
    ),
    PromptFinished(
        **SESSION,
        prompt_id="rewrite-2",
        prompt_class="rewrite",
        draft_len=7,
        rounds=31,
        generated=[11, 12, 99, 2],
        text="the cat sat.",
        stop_reason="eos",
        prefill_ms=12.5,
        decode_ms=640.25,
        equivalence=EQUIVALENCE,
        drafter="layerskip-4",
        sampling=SAMPLING,
    ),
    ResourceSample(**SESSION, rss_bytes=512 << 20, vram_used_bytes=6 << 30, vram_total_bytes=80 << 30, gpu_others=2),
    SessionFinished(**SESSION, rounds=4243, reason="interrupted"),
    PolicyLoaded(
        **SESSION,
        source="policies/default.toml",
        sha256=SHA,
        text='[policy]\nmode = "sometimes"\n',
        accepted=False,
        error="policies/default.toml:2:8: Invalid enum value 'sometimes'",
        classes=[ClassInForce(name="chat", speculate=True, draft_len=5, min_match=3)],
        changed=["chat", "policy"],
    ),
    Decision(
        **SESSION,
        decision_id=3,
        prompt_class="chat",
        speculate_from=True,
        speculate_to=False,
        k_from=2,
        k_to=1,
        rule_key="policy.min_gain",
        rule_line=17,
        retired_inputs={"goodput_k0": 0.05, "goodput_k2": 0.0375, "ratio": 0.75},
        retired_thresholds={"min_gain": 0.03, "hysteresis": 0.05},
        round_ids=[0, 1, 2, 100, 101],
        applied=True,
        policy_sha256=SHA,
        reason="k=2 loses to plain decoding",
        match_from=2,
        match_to=3,
        request_ids=["3f9a2b1c0d4e5f60", "0d4e5f603f9a2b1c"],
        rule=GateChoice(
            [0.31, 0.5, 0.62],
            [12, 8, 5],
            [4, 4, 3],
            [1.0, 1.25, 1.5],
            [0.33, 0.5, 0.6],
            4.0,
            8.0,
            0.03,
            2,
            True,
            3,
            [0, 4, 8],
            [0, 2, 8],
            Recall("20261206T201500-4d2a", 40, [4.0, 2.5, 0.0], [1.0, 2.0, 0.0], [6.0, 2.5, 1.0], [2.0, 2.0, 0.5]),
        ),
    ),
    QueueSample(
        **SESSION,
        waiting=3,
        request_id="chatcmpl-3f9a2b1c0d4e5f60718293a4",
        endpoint="completion",
        arrived=1_699_999_999.5,
    ),
    ServerScraped(
        **SESSION,
        url="http://127.0.0.1:8080",
        kind="llama-server",
        drafts=40,
        draft_tokens=160,
        accepted=97,
        accepted_per_pos=[36, 29, 20, 12],
        generation_tokens=517,
        running=1,
        waiting=2,
        error="down: connection refused",
    ),
    RequestTimed(
        **SESSION,
        request_id="chatcmpl-7",
        prompt_class="code-edit",
        class_rule="classes.code-edit.match",
        upstream="plain",
        endpoint="chat",
        status=200,
        stream=True,
        prompt_n=41,
        prompt_ms=120.5,
        predicted_n=64,
        predicted_ms=820.25,
        draft_n=48,
        draft_n_accepted=30,
        first_byte_ms=131.0,
        total_ms=960.75,
        family="vllm",
        spec_steps=22,
        accepted_per_pos=[18, 9, 3],
        upstream_url="http://127.0.0.1:8081",
        routed="spec",
        unmeasured="accepted 49 > drafted 48",
    ),
    LogRotated(**SESSION, part=2, next_name="proxy.specmon", next_log_id="9f3c2a"),
]

# a union's other members, each in an event of a type SAMPLES already holds
VARIANTS = [
    msgspec.structs.replace(
        next(e for e in SAMPLES if isinstance(e, Decision)),
        decision_id=4,
        rule=RouteChoice(
            "both",
            "plain",
            0.05,
            0.91,
            0.85,
            0.97,
            8,
            8,
            8,
            8,
            "proxy",
            2,
            [StoredReply("20250101-110000-fed321", "9a8b7c6d5e4f3a2b", "spec", "proxy", 33, 1240.5)],
        ),
    ),
]


def _structs(value):
    """The struct and every struct nested in it."""
    yield value
    for name in value.__struct_fields__:
        field = getattr(value, name)
        for item in field if isinstance(field, list) else [field]:  # a list of structs too (PolicyLoaded.classes)
            if isinstance(item, msgspec.Struct):
                yield from _structs(item)


def _blank(value) -> bool:
    """Zero, empty or None: a value a broken codec could produce by dropping the field. (False is
    kept: a bool's only other value is True.)"""
    return value is None or (not isinstance(value, bool) and value in (0, "", [], {}))


def test_the_samples_are_one_of_each_event_type_with_every_field_set():
    assert [type(e) for e in SAMPLES] == list(typing.get_args(AnyEvent))
    for event in SAMPLES:
        for struct in _structs(event):
            for field in msgspec.structs.fields(struct):
                value = getattr(struct, field.name)
                default = field.default_factory() if field.default_factory is not msgspec.NODEFAULT else field.default
                assert value != default and not _blank(value), f"{type(struct).__name__}.{field.name} = {value!r}"


@pytest.mark.parametrize("event", SAMPLES + VARIANTS, ids=lambda e: type(e).__name__)
def test_every_event_round_trips_through_the_codec(event):
    back = decode(encode(event))
    assert type(back) is type(event) and back == event


@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
def test_every_event_round_trips_through_frames(chunk):
    stream = preamble() + b"".join(frame(e) for e in SAMPLES)
    decoder, got = FrameDecoder("samples"), []
    for start in range(0, len(stream), chunk):
        got.extend(decoder.feed(stream[start : start + chunk]))
    decoder.finish()
    assert [type(e) for e in got] == [type(e) for e in SAMPLES] and got == SAMPLES
    assert decoder.offset == len(stream) and decoder.pending == 0


@pytest.mark.parametrize("struct", list(FIELDS), ids=lambda s: s.__name__)
def test_field_order_and_tag_are_pinned(struct):
    assert [f.name for f in msgspec.structs.fields(struct)] == FIELDS[struct]
    assert list(struct.__struct_fields__) == FIELDS[struct]
    assert struct.__struct_config__.array_like and struct.__struct_config__.tag == TAGS[struct]


def test_every_event_type_and_every_struct_in_one_is_pinned():
    nested = {type(s) for e in SAMPLES + VARIANTS for s in _structs(e)}
    assert set(FIELDS) == set(typing.get_args(AnyEvent)) | nested == set(TAGS)


def _wire(value):
    """What msgpack carries for `value`, built from the pinned lists: [tag, *fields in order]."""
    if isinstance(value, msgspec.Struct):
        fields = [_wire(getattr(value, name)) for name in FIELDS[type(value)]]
        return fields if TAGS[type(value)] is None else [TAGS[type(value)], *fields]
    if isinstance(value, list):
        return [_wire(v) for v in value]
    if isinstance(value, dict):
        return {k: _wire(v) for k, v in value.items()}
    return value


@pytest.mark.parametrize("event", SAMPLES + VARIANTS, ids=lambda e: type(e).__name__)
def test_the_encoded_array_is_the_pinned_fields_in_order(event):
    assert msgspec.msgpack.decode(encode(event)) == _wire(event)
