"""The ExLlamaV2 and ExLlamaV3 backends' round bookkeeping on the CPU, each against a fake of its
engine's model and cache (tests/fake_exllama.py) that records every pass and whose logits depend on
everything in its cache: a wrong roll-back (a stale position left in the cache) changes the next
token, so outputs expose it."""

import itertools

import numpy as np
import pytest

from fake_exllama import Exl2Cache, Exl2Model, Exl3Cache, Exl3Model
from specmon.backends.exllama import CHUNK, Exl2Runner, Exl3Runner, KvDrafter, KvTarget
from specmon.engine.drafters import NoDrafter
from specmon.engine.draft_len import FixedDraftLen
from specmon.engine.rounds import RoundContext
from specmon.errors import SpecmonError
from specmon.events.schema import Sampling
from roundloop import assert_proposals_follow_the_draft, decode_prompt

VOCAB = 50
GREEDY = Sampling(0.0, 1.0, 0, 0)


def _exl2(model, positions=512):
    return Exl2Runner(model, Exl2Cache(positions))


def _exl3(model, positions=512):
    return Exl3Runner(model, Exl3Cache(model, positions))


ENGINES = {"exl2": (Exl2Model, _exl2), "exl3": (Exl3Model, _exl3)}


@pytest.fixture(params=sorted(ENGINES))
def engine(request):
    return request.param


def fake(engine, disagree_every=0, soft=False):
    return ENGINES[engine][0](vocab=VOCAB, disagree_every=disagree_every, soft=soft)


def runner(engine, model, positions=512):
    return ENGINES[engine][1](model, positions)


def slots(runner_):
    return runner_.cache.slots


def _ctx():
    return RoundContext("s", "p", "c", itertools.count())


def _target(model, engine, sync=lambda: None, positions=512):
    return KvTarget(runner(engine, model, positions), "fake", eos_id=-1, vocab_size=VOCAB, sync=sync)


def _decode(engine, target_model, drafter, k, prompt, n=40, sampling=GREEDY):
    target = _target(target_model, engine)
    events = []
    run = decode_prompt(target, drafter, prompt, FixedDraftLen(k), sampling, n, _ctx(), events.append)
    return target, run, events


def _draft(engine, model, sync=lambda: None):
    return KvDrafter(runner(engine, model), "fake-draft", VOCAB, sync=sync)


PROMPT = [3, 14, 15, 9, 2, 6]


def _plain(engine):
    return _decode(engine, fake(engine), NoDrafter(), 0, PROMPT)[1].generated


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("disagree_every", [0, 3, 7])
def test_greedy_speculative_equals_plain(engine, k, disagree_every):
    draft_model = fake(engine, disagree_every)
    target, run, events = _decode(engine, fake(engine), _draft(engine, draft_model), k, PROMPT)
    assert run.generated == _plain(engine)
    assert_proposals_follow_the_draft(events, PROMPT, draft_model.next_token, k)
    # the target cache ends holding every token but the last (which the next round would feed);
    # a last round cut short by max_new_tokens may leave accepted tokens past it, all valid
    sequence = PROMPT + run.generated
    assert target.cached_len >= len(sequence) - 1
    assert slots(target.runner)[: len(sequence) - 1] == sequence[:-1]
    if disagree_every == 0:
        assert all(e.accepted == len(e.proposed) for e in events)
    else:
        assert any(e.rejection_pos is not None for e in events)


def test_target_calls_are_one_prefill_then_one_verify_per_round(engine):
    model = fake(engine)
    _, run, events = _decode(engine, model, _draft(engine, fake(engine, 3)), 4, PROMPT)
    assert model.calls[0] == {"start": 0, "tokens": PROMPT[:-1], "preprocess_only": True, "last_id_only": False}
    verifies = model.calls[1:]
    assert len(verifies) == len(events) == run.rounds
    context = list(PROMPT)
    for call, event in zip(verifies, events):
        # each verify writes the last context token plus the k proposals right after the kept prefix
        assert call["start"] == len(context) - 1
        assert call["tokens"] == [context[-1], *event.proposed]
        assert not call["last_id_only"]  # every position's logits are checked
        context += event.emitted


def test_all_accepted_round_feeds_the_last_draft_token_with_the_bonus(engine):
    draft_model = fake(engine)  # agrees with the target everywhere: every round accepts all k
    drafter = _draft(engine, draft_model)
    k = 3
    _, run, events = _decode(engine, fake(engine), drafter, k, PROMPT, n=16)
    assert [e.accepted for e in events] == [k] * len(events)
    first = draft_model.calls[0]
    assert first["start"] == 0 and first["tokens"] == PROMPT and first["last_id_only"]  # the draft's own prefill
    round_starts = [i for i, c in enumerate(draft_model.calls) if i % k == 0]
    context = list(PROMPT)
    for index, event in zip(round_starts[1:], events):
        call = draft_model.calls[index]
        # the cache never saw the k-th draft token (its logits were not needed), so it is fed
        # again together with the target's bonus token, right after the k-1 drafts it did see
        assert call["tokens"] == [event.proposed[-1], event.emitted[-1]]
        assert call["start"] == len(context) + k - 1
        context += event.emitted
    assert drafter.fed == (PROMPT + run.generated)[: len(drafter.fed)]


def test_rejection_rolls_the_draft_cache_back_to_the_accepted_prefix(engine):
    draft_model = fake(engine, disagree_every=2)
    drafter = _draft(engine, draft_model)
    _, _, events = _decode(engine, fake(engine), drafter, 4, PROMPT, n=24)
    rejected = [e for e in events if e.rejection_pos is not None]
    assert rejected
    assert all(e.accepted < len(e.proposed) for e in rejected)
    # after every round the draft cache's valid prefix is a prefix of the true sequence
    fed = drafter.fed
    assert slots(drafter.runner)[: len(fed)] == fed


def test_sampled_rounds_accept_everything_when_draft_and_target_agree(engine):
    sampling = Sampling(0.8, 1.0, 0, 7)
    drafter = _draft(engine, fake(engine, soft=True))
    _, run, events = _decode(engine, fake(engine, soft=True), drafter, 4, PROMPT, n=32, sampling=sampling)
    proposed = sum(len(e.proposed) for e in events)
    # p = q exactly (same fake logits), so min(1, p/q) = 1 for every draft token
    assert proposed > 0 and sum(e.accepted for e in events) == proposed
    assert len(run.generated) == 32


def test_logits_are_cut_to_the_tokenizer_vocabulary(engine):
    target = _target(fake(engine), engine)
    target.prefill([1, 2])
    rows = target.forward([3, 4, 5], 2)
    assert rows.shape == (3, VOCAB) and rows.dtype == np.float32
    target.truncate(3)
    assert target.cached_len == 3
    with pytest.raises(RuntimeError, match="holds 3 positions"):
        target.forward([1], 4)  # writing past the valid prefix would leave a hole


def test_syncs_once_per_phase(engine):
    syncs = []
    target = _target(fake(engine), engine, sync=lambda: syncs.append("t"))
    drafter = _draft(engine, fake(engine), sync=lambda: syncs.append("d"))
    events = []
    decode_prompt(target, drafter, PROMPT, FixedDraftLen(3), GREEDY, 6, _ctx(), events.append)
    assert syncs == ["t"] + ["d", "t"] * len(events)  # prefill, then draft and verify each round


def test_a_context_longer_than_the_caches_is_one_error_before_any_forward(engine):
    model = fake(engine)
    target = _target(model, engine, positions=256)
    with pytest.raises(
        SpecmonError, match="200 prompt \\+ 52 new \\+ 4 draft \\+ 1 verify positions exceed the cache's 256"
    ):
        decode_prompt(
            target, _draft(engine, fake(engine)), list(range(200)), FixedDraftLen(4), GREEDY, 52, _ctx(), lambda e: None
        )
    assert model.calls == []


def test_exl3_prefills_a_long_prompt_in_chunks_and_the_draft_its_head():
    """ExLlamaV3 prefills at most max_chunk_size positions a pass; a draft model's first pass (the
    whole prompt) is split the same way, with only its last chunk a forward."""
    prompt = [t % VOCAB for t in range(2 * CHUNK + 300)]
    model, draft_model = fake("exl3"), fake("exl3")
    positions = 3 * CHUNK
    target = _target(model, "exl3", positions=positions)
    drafter = KvDrafter(runner("exl3", draft_model, positions), "d", VOCAB, sync=lambda: None)
    run = decode_prompt(target, drafter, prompt, FixedDraftLen(2), GREEDY, 4, _ctx(), lambda e: None)
    prefills = [(c["start"], len(c["tokens"])) for c in model.calls if c["preprocess_only"]]
    assert prefills == [(0, CHUNK), (CHUNK, CHUNK), (2 * CHUNK, 299)]
    head = [(c["start"], len(c["tokens"]), c["preprocess_only"]) for c in draft_model.calls[:3]]
    assert head == [(0, CHUNK, True), (CHUNK, 300, True), (CHUNK + 300, CHUNK, False)]  # all but a chunk prefilled
    assert (
        run.generated
        == decode_prompt(
            _target(fake("exl3"), "exl3", positions=positions),
            NoDrafter(),
            prompt,
            FixedDraftLen(0),
            GREEDY,
            4,
            _ctx(),
            lambda e: None,
        ).generated
    )
