"""The ExLlamaV2 backend's round bookkeeping on the CPU, against a fake model that records every
forward call and whose logits depend on everything in its cache: a wrong roll-back (a stale
position left in the cache) changes the next token, so outputs expose it."""

import itertools

import numpy as np
import pytest
import torch

from specmon.backends.exl2 import Exl2Drafter, Exl2Target
from specmon.engine.drafters import NoDrafter
from specmon.engine.draft_len import FixedDraftLen
from specmon.engine.rounds import RoundContext
from specmon.errors import SpecmonError
from specmon.events.schema import Sampling
from roundloop import decode_prompt

VOCAB = 50
GREEDY = Sampling(0.0, 1.0, 0, 0)


class FakeCache:
    def __init__(self, max_seq_len: int = 512):
        self.max_seq_len = max_seq_len
        self.current_seq_len = 0
        self.slots: list[int | None] = [None] * max_seq_len  # the token whose keys/values sit at each position


class FakeModel:
    """Next-token logits from a hash of the whole cached prefix; `disagree_every` makes a draft that
    picks another token whenever the prefix length is a multiple of it."""

    def __init__(self, disagree_every: int = 0, soft: bool = False):
        self.disagree_every = disagree_every
        self.soft = soft
        self.calls: list[dict] = []

    def next_token(self, prefix: list[int]) -> int:
        token = (sum((i + 1) * t for i, t in enumerate(prefix)) * 31 + len(prefix)) % VOCAB
        if self.disagree_every and len(prefix) % self.disagree_every == 0:
            token = (token + 1) % VOCAB
        return token

    def forward(self, input_ids, cache, preprocess_only=False, last_id_only=False):
        tokens = input_ids[0].tolist()
        start = cache.current_seq_len
        self.calls.append(
            {"start": start, "tokens": tokens, "preprocess_only": preprocess_only, "last_id_only": last_id_only}
        )
        cache.slots[start : start + len(tokens)] = tokens
        cache.current_seq_len += len(tokens)
        if preprocess_only:
            return None
        rows = []
        for end in range(start + 1, start + len(tokens) + 1):
            row = torch.full((VOCAB + 3,), -4.0 if self.soft else -30.0)  # 3 padding columns, as in padded vocabularies
            row[self.next_token(cache.slots[:end])] = 4.0
            rows.append(row)
        logits = torch.stack(rows)[None].half()
        return logits[:, -1:] if last_id_only else logits


def _ctx():
    return RoundContext("s", "p", "c", itertools.count())


def _decode(target_model, drafter, k, prompt, n=40, sampling=GREEDY):
    target = Exl2Target(target_model, FakeCache(), "fake", eos_id=-1, vocab_size=VOCAB, sync=lambda: None)
    events = []
    run = decode_prompt(target, drafter, prompt, FixedDraftLen(k), sampling, n, _ctx(), events.append)
    return target, run, events


def _draft(model):
    return Exl2Drafter(model, FakeCache(), "fake-draft", VOCAB, sync=lambda: None)


PROMPT = [3, 14, 15, 9, 2, 6]


def _plain():
    return _decode(FakeModel(), NoDrafter(), 0, PROMPT)[1].generated


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("disagree_every", [0, 3, 7])
def test_greedy_speculative_equals_plain(k, disagree_every):
    draft_model = FakeModel(disagree_every)
    target, run, events = _decode(FakeModel(), _draft(draft_model), k, PROMPT)
    assert run.generated == _plain()
    context = list(PROMPT)
    for event in events:  # every proposal is what the draft gives on the true context: no stale cache
        expected = []
        for _ in range(k):
            expected.append(draft_model.next_token(context + expected))
        assert event.proposed == expected
        context += event.emitted
    # the target cache ends holding every token but the last (which the next round would feed);
    # a last round cut short by max_new_tokens may leave accepted tokens past it, all valid
    sequence = PROMPT + run.generated
    assert target.cache.current_seq_len >= len(sequence) - 1
    assert target.cache.slots[: len(sequence) - 1] == sequence[:-1]
    if disagree_every == 0:
        assert all(e.accepted == len(e.proposed) for e in events)
    else:
        assert any(e.rejection_pos is not None for e in events)


def test_target_calls_are_one_prefill_then_one_verify_per_round():
    model = FakeModel()
    _, run, events = _decode(model, _draft(FakeModel(3)), 4, PROMPT)
    assert model.calls[0] == {"start": 0, "tokens": PROMPT[:-1], "preprocess_only": True, "last_id_only": False}
    verifies = model.calls[1:]
    assert len(verifies) == len(events) == run.rounds
    context = list(PROMPT)
    for call, event in zip(verifies, events):
        # each verify writes the last context token plus the k proposals right after the kept prefix
        assert call["start"] == len(context) - 1
        assert call["tokens"] == [context[-1], *event.proposed]
        context += event.emitted


def test_all_accepted_round_feeds_the_last_draft_token_with_the_bonus():
    draft_model = FakeModel()  # agrees with the target everywhere: every round accepts all k
    drafter = _draft(draft_model)
    k = 3
    _, run, events = _decode(FakeModel(), drafter, k, PROMPT, n=16)
    assert [e.accepted for e in events] == [k] * len(events)
    first = draft_model.calls[0]
    assert first["start"] == 0 and first["tokens"] == PROMPT  # the draft's own prefill, last id only
    round_starts = [i for i, c in enumerate(draft_model.calls) if i % k == 0]
    context = list(PROMPT)
    for index, event in zip(round_starts[1:], events):
        call = draft_model.calls[index]
        # the cache never saw the k-th draft token (its logits were not needed), so it is fed
        # again together with the target's bonus token, right after the k-1 drafts it did see
        assert call["tokens"] == [event.proposed[-1], event.emitted[-1]]
        assert call["start"] == len(context) + k - 1
        context += event.emitted
    assert drafter.ledger.fed == (PROMPT + run.generated)[: len(drafter.ledger.fed)]


def test_rejection_rolls_the_draft_cache_back_to_the_accepted_prefix():
    draft_model = FakeModel(disagree_every=2)
    drafter = _draft(draft_model)
    _, _, events = _decode(FakeModel(), drafter, 4, PROMPT, n=24)
    rejected = [e for e in events if e.rejection_pos is not None]
    assert rejected
    assert all(e.accepted < len(e.proposed) for e in rejected)
    # after every round the draft cache's valid prefix is a prefix of the true sequence
    fed = drafter.ledger.fed
    assert drafter.cache.slots[: len(fed)] == fed


def test_sampled_rounds_accept_everything_when_draft_and_target_agree():
    sampling = Sampling(0.8, 1.0, 0, 7)
    _, run, events = _decode(FakeModel(soft=True), _draft(FakeModel(soft=True)), 4, PROMPT, n=32, sampling=sampling)
    proposed = sum(len(e.proposed) for e in events)
    # p = q exactly (same fake logits), so min(1, p/q) = 1 for every draft token
    assert proposed > 0 and sum(e.accepted for e in events) == proposed
    assert len(run.generated) == 32


def test_logits_are_cut_to_the_tokenizer_vocabulary():
    target = Exl2Target(FakeModel(), FakeCache(), "fake", eos_id=-1, vocab_size=VOCAB, sync=lambda: None)
    target.prefill([1, 2])
    rows = target.forward([3, 4, 5], 2)
    assert rows.shape == (3, VOCAB) and rows.dtype == np.float32
    target.truncate(3)
    assert target.cache.current_seq_len == 3
    with pytest.raises(RuntimeError, match="holds 3 positions"):
        target.forward([1], 4)  # writing past the valid prefix would leave a hole


def test_syncs_once_per_phase():
    syncs = []
    target = Exl2Target(FakeModel(), FakeCache(), "fake", eos_id=-1, vocab_size=VOCAB, sync=lambda: syncs.append("t"))
    drafter = Exl2Drafter(FakeModel(), FakeCache(), "d", VOCAB, sync=lambda: syncs.append("d"))
    events = []
    decode_prompt(target, drafter, PROMPT, FixedDraftLen(3), GREEDY, 6, _ctx(), events.append)
    assert syncs == ["t"] + ["d", "t"] * len(events)  # prefill, then draft and verify each round


def test_a_context_longer_than_the_caches_is_one_error_before_any_forward():
    model = FakeModel()
    target = Exl2Target(model, FakeCache(max_seq_len=64), "fake", eos_id=-1, vocab_size=VOCAB, sync=lambda: None)
    with pytest.raises(
        SpecmonError, match="40 prompt \\+ 24 new \\+ 4 draft \\+ 1 verify positions exceed the cache's 64"
    ):
        decode_prompt(
            target, _draft(FakeModel()), list(range(40)), FixedDraftLen(4), GREEDY, 24, _ctx(), lambda e: None
        )
    assert model.calls == []
