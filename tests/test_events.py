"""Every event round-trips through the codec; logs read back whole or stop at the damage."""

import msgspec
import pytest
from hypothesis import given, settings, strategies as st

from specmon.events import schema
from specmon.events.log import LogDamaged, LogWriter, read_log
from specmon.events.schema import (
    Equivalence,
    PromptFinished,
    PromptStarted,
    QueueSample,
    ResourceSample,
    RoundVerified,
    Sampling,
    SessionStarted,
)
from specmon.errors import SpecmonError
from events import round_verified

finite = st.floats(allow_nan=False, allow_infinity=False)
ids = st.lists(st.integers(0, 2**31 - 1), max_size=9)
sampling = st.builds(Sampling, finite, finite, st.integers(0, 1000), st.integers(0, 2**63 - 1))
common = dict(session_id=st.text(max_size=20), t=finite)

rounds = st.builds(
    RoundVerified,
    **common,
    round_id=st.integers(0, 2**40),
    prompt_id=st.text(max_size=10),
    prompt_class=st.text(max_size=10),
    round_index=st.integers(0, 10**6),
    draft_len=st.integers(0, 64),
    proposed=ids,
    accepted=st.integers(0, 64),
    rejection_pos=st.none() | st.integers(0, 63),
    emitted=ids,
    draft_ms=finite,
    verify_ms=finite,
    overhead_ms=finite,
    target_probs=st.lists(finite, max_size=9),
    alpha_hat=st.none() | finite,
    margins=st.lists(finite, max_size=9),
    sampling=sampling,
    mem_bytes=st.integers(0, 2**50),
)
events = st.one_of(
    rounds,
    st.builds(
        SessionStarted,
        **common,
        specmon_version=st.text(),
        profile_name=st.text(),
        profile_text=st.text(),
        backend=st.text(),
        target=st.text(),
        drafter=st.text(),
        dtype=st.text(),
        device=st.text(),
        host=st.dictionaries(st.text(), st.text(), max_size=3),
    ),
    st.builds(
        PromptStarted,
        **common,
        prompt_id=st.text(),
        prompt_class=st.text(),
        draft_len=st.integers(0, 64),
        drafter=st.text(),
        sampling=sampling,
        prompt_tokens=st.integers(0, 10**6),
        max_new_tokens=st.integers(1, 10**6),
        class_rule=st.text(),
    ),
    st.builds(
        PromptFinished,
        **common,
        prompt_id=st.text(),
        prompt_class=st.text(),
        draft_len=st.integers(0, 64),
        rounds=st.integers(0, 10**6),
        generated=ids,
        text=st.text(),
        stop_reason=st.sampled_from(["eos", "max_new_tokens"]),
        prefill_ms=finite,
        decode_ms=finite,
        equivalence=st.builds(
            Equivalence,
            st.sampled_from(["identical", "near-tie", "diverged"]),
            st.none() | st.integers(0, 99),
            st.none() | finite,
            finite,
        ),
    ),
    st.builds(
        ResourceSample,
        **common,
        rss_bytes=st.none() | st.integers(0, 2**50),
        vram_used_bytes=st.none() | st.integers(0, 2**50),
        vram_total_bytes=st.none() | st.integers(0, 2**50),
    ),
    st.builds(
        QueueSample,
        **common,
        waiting=st.integers(0, 10**4),
        request_id=st.text(max_size=40),
        endpoint=st.sampled_from(["", "chat", "completion"]),
        arrived=finite,
    ),
)


@settings(max_examples=400, deadline=None)
@given(events)
def test_every_event_round_trips(event):
    assert schema.decode(schema.encode(event)) == event


@settings(max_examples=50, deadline=None)
@given(st.lists(events, min_size=1, max_size=20))
def test_a_log_reads_back_every_event_in_order(tmp_path_factory, batch):
    path = tmp_path_factory.mktemp("log") / "s.specmon"
    with LogWriter(path) as log:
        for event in batch:
            log.write(event)
    assert list(read_log(path)) == batch


def _round(i: int) -> RoundVerified:
    return round_verified(
        t=1.0 + i,
        round_id=i,
        prompt_class="c",
        round_index=i,
        draft_len=4,
        proposed=[1, 2, 3, 4],
        accepted=i % 5,
        rejection_pos=(i % 5) if i % 5 < 4 else None,
        emitted=[7] * (i % 5 + 1),
        draft_ms=0.1,
        verify_ms=40.0,
        overhead_ms=0.5,
        target_probs=[0.5] * 4,
        alpha_hat=0.5,
        margins=[1.0],
        mem_bytes=1 << 20,
    )


def test_truncated_log_yields_whole_events_then_names_the_offset(tmp_path):
    path = tmp_path / "s.specmon"
    with LogWriter(path) as log:
        for i in range(10):
            log.write(_round(i))
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.truncate(size - 3)
    got = []
    with pytest.raises(LogDamaged) as damage:
        for event in read_log(path):
            got.append(event)
    assert got == [_round(i) for i in range(9)]
    with LogWriter(tmp_path / "nine.specmon") as log:
        for i in range(9):
            log.write(_round(i))
    assert damage.value.offset == (tmp_path / "nine.specmon").stat().st_size  # where frame 10 began
    assert "truncated" in str(damage.value)


def test_a_flipped_bit_is_caught_by_the_checksum(tmp_path):
    path = tmp_path / "s.specmon"
    with LogWriter(path) as log:
        for i in range(3):
            log.write(_round(i))
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 0x10
    path.write_bytes(bytes(raw))
    got = []
    with pytest.raises(LogDamaged, match="checksum"):
        got.extend(read_log(path))
    assert got == [_round(0), _round(1)]


def test_newer_format_and_foreign_files_are_refused(tmp_path):
    newer = tmp_path / "new.specmon"
    newer.write_bytes(b"SPECMON\x00" + (schema.FORMAT_VERSION + 1).to_bytes(2, "big"))
    with pytest.raises(SpecmonError, match="newer than this specmon"):
        list(read_log(newer))
    foreign = tmp_path / "x.specmon"
    foreign.write_text("hello")
    with pytest.raises(SpecmonError, match="not a specmon session log"):
        list(read_log(foreign))


def test_an_older_event_without_new_trailing_fields_still_decodes():
    """Schema evolution: a PromptStarted written before `class_rule` (and `bench_k`) existed."""
    old = msgspec.msgpack.encode(["prompt", "s", 1.0, "p", "c", 4, "ngram", [0.0, 1.0, 0, 0], 12, 32])
    assert PromptStarted.__struct_fields__[-2:] == ("class_rule", "bench_k")  # the fields this old event lacks
    event = schema.decode(old)
    assert isinstance(event, PromptStarted) and event.class_rule == "" and event.max_new_tokens == 32
    assert event.bench_k is None and schema.bench_fixed_k(event) is None


def test_a_bench_fixed_k_decode_is_known_by_its_field_and_in_older_logs_by_its_class_rule():
    old = msgspec.msgpack.encode(
        ["prompt", "s", 1.0, "p", "c", 4, "ngram", [0.0, 1.0, 0, 0], 12, 32, "bench: fixed k=7"]
    )
    assert schema.bench_fixed_k(schema.decode(old)) == 7
    new = msgspec.msgpack.encode(["prompt", "s", 1.0, "p", "c", 0, "ngram", [0.0, 1.0, 0, 0], 12, 32, "x", 0])
    assert schema.bench_fixed_k(schema.decode(new)) == 0
    policy = msgspec.msgpack.encode(["prompt", "s", 1.0, "p", "c", 4, "ngram", [0.0, 1.0, 0, 0], 12, 32, "k=4: policy"])
    assert schema.bench_fixed_k(schema.decode(policy)) is None


def test_a_stop_reason_or_verdict_outside_the_contract_is_refused():
    """stop_reason and verdict are Literal types: a typo'd value cannot reach a log unnoticed."""
    done = schema.PromptFinished(
        session_id="s",
        t=1.0,
        prompt_id="p",
        prompt_class="c",
        draft_len=4,
        rounds=1,
        generated=[1],
        text="a",
        stop_reason="eos",
        prefill_ms=1.0,
        decode_ms=1.0,
        equivalence=schema.Equivalence("identical"),
    )
    assert schema.decode(schema.encode(done)) == done
    for bad in (
        msgspec.structs.replace(done, stop_reason="finished"),
        msgspec.structs.replace(done, equivalence=schema.Equivalence("same")),
    ):
        with pytest.raises(msgspec.ValidationError):
            schema.decode(schema.encode(bad))
