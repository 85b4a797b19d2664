"""Verify passes over MKL-packed weights (profile key packed_rows): the same logits as the plain
fp32 kernels, and a cache written through a padded pass rolls back like any other."""

import numpy as np
import pytest
import torch

from specmon.backends.llama import MIN_PACKED_ROWS, Llama, can_pack, choose_pad_from
from specmon.backends.loader import cached_weights
from specmon.backends.torch_backend import TorchTarget
from tests.tinymodel import write_tiny_gguf

pytestmark = pytest.mark.skipif(not can_pack("cpu", torch.float32), reason="this torch has no MKL packed gemm")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return cached_weights(write_tiny_gguf(tmp_path_factory.mktemp("packed") / "tiny.gguf", dim=64))


def _target(tiny, packed_rows: int, pad_from: int = MIN_PACKED_ROWS) -> TorchTarget:
    cfg, weights = tiny
    return TorchTarget(Llama(cfg, weights, torch.float32, "cpu", 256, packed_rows, pad_from), "tiny", 2)


@pytest.mark.parametrize("pad_from", [2, 3, 4])
def test_padded_passes_give_the_plain_kernels_logits(tiny, pad_from):
    plain, packed = _target(tiny, 0), _target(tiny, 9, pad_from)
    assert packed.model.packed_rows == 9 and plain.model.packed_rows == 0
    rng = np.random.default_rng(1)
    context = rng.integers(3, 200, size=40).tolist()
    for target in (plain, packed):
        target.forward(context, 0)
    for rows in range(1, 10):
        tokens = rng.integers(3, 200, size=rows).tolist()
        assert packed.model.padded_rows(rows, 40, None) == (9 if rows >= pad_from else rows)
        want, got = plain.forward(tokens, 40), packed.forward(tokens, 40)
        assert got.shape == want.shape == (rows, packed.vocab_size)
        assert np.abs(got - want).max() < 1e-4 * max(1.0, np.abs(want).max())
        assert packed.cached_len == plain.cached_len == 40 + rows  # the padding is not counted as cached


def test_a_cache_written_by_padded_passes_rolls_back(tiny):
    """Accept part of each padded pass, roll back, go on: the logits equal a fresh prefill's."""
    target = _target(tiny, 9, pad_from=2)
    rng = np.random.default_rng(2)
    context = rng.integers(3, 200, size=20).tolist()
    target.forward(context[:-1], 0)
    for _ in range(10):
        drafts = rng.integers(3, 200, size=int(rng.integers(1, 9))).tolist()  # 2..9 positions, all padded
        target.forward([context[-1], *drafts], len(context) - 1)
        accepted = int(rng.integers(0, len(drafts) + 1))
        target.truncate(len(context) + accepted)
        context += drafts[:accepted] + [int(rng.integers(3, 200))]
    probe = rng.integers(3, 200, size=5).tolist()
    rolled = target.forward([context[-1], *probe], len(context) - 1)
    fresh = _target(tiny, 0)
    fresh.forward(context[:-1], 0)
    assert np.abs(rolled - fresh.forward([context[-1], *probe], len(context) - 1)).max() < 1e-4


def test_no_padding_past_the_cache_or_for_a_layer_skip_pass(tiny):
    model = _target(tiny, 9).model
    assert model.padded_rows(5, 256 - 9, None) == 9
    assert model.padded_rows(5, 256 - 8, None) == 5  # the padding would not fit the cache
    assert model.padded_rows(5, 10, 1) == 5  # a drafter's first layers only: no packed head after them
    assert model.padded_rows(12, 10, None) == 12  # longer than the packed shape (a prefill): plain kernels


def test_packing_is_for_fp32_on_the_cpu_only(tiny):
    cfg, weights = tiny
    assert Llama(cfg, weights, torch.float64, "cpu", 64, 9).packed_rows == 0
    assert Llama(cfg, weights, torch.float32, "cpu", 64, 3).packed_rows == 0  # 3 rows: nothing to gain
    assert not can_pack("cuda", torch.float32)


def test_short_passes_are_padded_only_where_the_packed_pass_measured_cheaper():
    """MKL on some CPUs reads the weights once per row for 2-3 rows (2-3 plain steps); elsewhere
    those passes cost ~1.2 and padding them to 9 packed rows (~1.55) would lose."""
    assert choose_pad_from({2: 85.0, 3: 110.0}, packed_ms=89.0) == 3  # a 2-row pass is still cheaper
    assert choose_pad_from({2: 95.0, 3: 110.0}, packed_ms=89.0) == 2
    assert choose_pad_from({2: 64.0, 3: 68.0}, packed_ms=86.0) == 4  # a fast host: no padding
    assert choose_pad_from({2: 95.0, 3: 80.0}, packed_ms=89.0) == 4  # 3 rows cheap: 2 is not padded past it


def test_pad_from_is_measured_at_load_once_per_model_shape(tiny, monkeypatch):
    from specmon.backends import llama

    calls = []
    monkeypatch.setattr(llama, "_PAD_FROM", {})
    monkeypatch.setattr(llama.Llama, "_measure_pad_from", lambda self: calls.append(1) or 3)
    first, second = _target(tiny, 9, pad_from=0).model, _target(tiny, 9, pad_from=0).model
    assert first.pad_from == second.pad_from == 3 and len(calls) == 1
    assert _target(tiny, 9, pad_from=2).model.pad_from == 2 and len(calls) == 1  # the profile pins it
    assert _target(tiny, 0, pad_from=0).model.pad_from == 0  # nothing packed, nothing padded


def test_measuring_leaves_the_model_and_its_caches_as_they_were(tiny):
    target = _target(tiny, 9, pad_from=2)
    target.forward([5, 6, 7, 8], 0)
    before = target.forward([9, 10], 4)
    assert target.model._measure_pad_from() in (2, 3, 4)
    assert target.model.pad_from == 2
    assert np.array_equal(target.forward([9, 10], 4), before)  # its own cache, not the target's


def _decode(target, drafter, prompt, k, n=16):
    import itertools

    from specmon.engine.draft_len import FixedDraftLen
    from roundloop import decode_prompt
    from specmon.engine.rounds import RoundContext
    from specmon.events.schema import Sampling

    events = []
    run = decode_prompt(
        target,
        drafter,
        prompt,
        FixedDraftLen(k),
        Sampling(),
        n,
        RoundContext("s", "p", "c", itertools.count()),
        events.append,
    )
    return run.generated, events


@pytest.mark.parametrize("packed_rows, pad_from, first_draft", [(9, 2, 8), (9, 4, 2), (0, 4, 2)])
def test_a_short_match_drafts_on_through_a_padded_pass_and_decodes_as_plain(tiny, packed_rows, pad_from, first_draft):
    """A 2-token match: where its 3-position pass is padded to 9 rows, the drafter fills them (8
    tokens, the match length still recorded); unpadded, it drafts the match's 2. Either way the
    greedy output is plain decoding's."""
    from specmon.engine.drafters import NgramDrafter, NoDrafter

    prompt = [*range(10, 40), 15, 16]  # "15 16" occurred once before, followed by 17 18 ...
    target = _target(tiny, packed_rows, pad_from)
    drafter = NgramDrafter(verify_rows=target.verify_rows)
    drafter.confident(2, 1)
    generated, events = _decode(target, drafter, prompt, 8)
    assert (len(events[0].proposed), events[0].matched) == (first_draft, 2)
    assert events[0].proposed == list(range(17, 17 + first_draft))
    plain, _ = _decode(_target(tiny, 0), NoDrafter(), prompt, 0)
    assert generated == plain
    assert target.verify_rows(3, 40) == (9 if packed_rows and pad_from <= 3 else 3)
    assert target.verify_rows(3, 250) == 3  # 9 rows would run past the 256-position cache: not padded
    # the session header records what the drafts depend on
    assert target.host_facts() == ({"packed_rows": "9", "pad_from": str(pad_from)} if packed_rows else {})


def test_the_session_header_names_the_pad_from_its_drafts_depend_on(tiny):
    from types import SimpleNamespace

    from specmon.engine.drafters import NgramDrafter
    from specmon.engine.driver import SessionDriver

    profile = SimpleNamespace(name="p", text="", backend="torch", dtype="float32", device="cpu")
    started = SessionDriver("s", _target(tiny, 9, 3), None, lambda ev: None, 0.0).started_event(profile, NgramDrafter())
    assert (started.host["packed_rows"], started.host["pad_from"]) == ("9", "3") and started.host["cpus"]
    plain = SessionDriver("s", _target(tiny, 0), None, lambda ev: None, 0.0).started_event(profile, NgramDrafter())
    assert "pad_from" not in plain.host
