"""The llama.cpp backend's round bookkeeping, without the binding: a fake context that behaves
like llama.cpp's KV memory (a batch must start right after the last cached position) and whose
logits depend on everything cached, so a wrong roll-back changes the output."""

import itertools

import numpy as np
import pytest

from specmon.backends.llamacpp import LlamaCppDrafter, LlamaCppTarget
from specmon.engine.draft_len import FixedDraftLen
from specmon.engine.drafters import NgramDrafter, NoDrafter
from specmon.engine.rounds import RoundContext
from specmon.events.schema import Sampling
from roundloop import assert_proposals_follow_the_draft, decode_prompt

VOCAB = 50
GREEDY = Sampling(0.0, 1.0, 0, 0)
PROMPT = [3, 14, 15, 9, 2, 6, 3, 14, 15]


class FakeContext:
    """Sequence 0's cached tokens; next-token logits hash the whole cached prefix."""

    def __init__(self, n_ctx: int = 512, disagree_every: int = 0, soft: bool = False):
        self.n_ctx, self.n_vocab = n_ctx, VOCAB + 3  # 3 padding columns: rows are cut to the tokenizer's
        self.disagree_every, self.soft = disagree_every, soft
        self.cached: list[int] = []
        self.calls: list[tuple] = []

    def next_token(self, prefix: list[int]) -> int:
        token = (sum((i + 1) * t for i, t in enumerate(prefix)) * 31 + len(prefix)) % VOCAB
        if self.disagree_every and len(prefix) % self.disagree_every == 0:
            token = (token + 1) % VOCAB
        return token

    def decode(self, tokens, start, logits):
        if start != len(self.cached):  # llama.cpp: positions must follow the memory's last one
            raise RuntimeError(f"inconsistent position {start}, memory holds {len(self.cached)}")
        self.calls.append(("decode", start, list(tokens), logits))
        rows = []
        for token in tokens:
            self.cached.append(token)
            row = np.full(self.n_vocab, -4.0 if self.soft else -30.0, dtype=np.float32)
            row[self.next_token(self.cached)] = 4.0
            rows.append(row)
        if logits == "none":
            return None
        return np.stack(rows if logits == "all" else rows[-1:])

    def keep(self, length):
        self.calls.append(("keep", length))
        del self.cached[length:]

    def cache_bytes(self):
        return 1234


def _decode(drafter, k, n=40, sampling=GREEDY, context=None):
    target = LlamaCppTarget(context or FakeContext(), "fake", eos_id=-1, vocab_size=VOCAB)
    events = []
    ctx = RoundContext("s", "p", "c", itertools.count())
    run = decode_prompt(target, drafter, PROMPT, FixedDraftLen(k), sampling, n, ctx, events.append)
    return target, run, events


def _plain():
    return _decode(NoDrafter(), 0)[1].generated


@pytest.mark.parametrize("k", [1, 2, 4, 8])
@pytest.mark.parametrize("disagree_every", [0, 3, 7])
def test_greedy_draft_model_rounds_equal_plain(k, disagree_every):
    draft = FakeContext(disagree_every=disagree_every)
    target, run, events = _decode(LlamaCppDrafter(draft, "fake-draft", VOCAB), k)
    assert run.generated == _plain()
    assert_proposals_follow_the_draft(events, PROMPT, draft.next_token, k)
    sequence = PROMPT + run.generated
    assert target.context.cached[: len(sequence) - 1] == sequence[:-1]  # past it: stale, dropped on the next write
    if disagree_every:
        assert any(e.rejection_pos is not None for e in events)
    else:
        assert all(e.accepted == len(e.proposed) for e in events)


@pytest.mark.parametrize("k", [2, 4])
def test_ngram_rounds_equal_plain_and_verify_once_per_round(k):
    target, run, events = _decode(NgramDrafter(), k)
    assert run.generated == _plain()
    decodes = [c for c in target.context.calls if c[0] == "decode"]
    assert decodes[0] == ("decode", 0, PROMPT[:-1], "none")  # prefill, no logits
    context = list(PROMPT)
    for call, event in zip(decodes[1:], events, strict=True):
        # one batch per round: the last context token plus the proposal, logits for every position
        assert call == ("decode", len(context) - 1, [context[-1], *event.proposed], "all")
        context += event.emitted
    assert any(e.proposed for e in events)


def test_a_rejected_draft_is_removed_from_the_memory_before_the_next_write():
    target = LlamaCppTarget(FakeContext(), "fake", eos_id=-1, vocab_size=VOCAB)
    target.prefill([1, 2, 3])
    rows = target.forward([4, 5, 6, 7], 3)
    assert rows.shape == (4, VOCAB) and rows.dtype == np.float32
    target.truncate(5)  # keep [1, 2, 3, 4, 5]: 6 and 7 were rejected
    target.forward([9], 5)
    assert target.context.cached == [1, 2, 3, 4, 5, 9]
    with pytest.raises(RuntimeError, match="holds 6 positions"):
        target.forward([1], 7)  # writing past the valid prefix would leave a hole


def test_all_accepted_round_feeds_the_last_draft_token_with_the_bonus():
    draft = FakeContext()  # agrees with the target everywhere
    drafter = LlamaCppDrafter(draft, "d", VOCAB)
    k = 3
    _, run, events = _decode(drafter, k, n=16)
    assert [e.accepted for e in events] == [k] * len(events)
    feeds = [c for c in draft.calls if c[0] == "decode"]
    assert feeds[0] == ("decode", 0, PROMPT, "last")
    context = list(PROMPT)
    for call, event in zip(feeds[k::k], events):
        assert call == ("decode", len(context) + k - 1, [event.proposed[-1], event.emitted[-1]], "last")
        context += event.emitted
    assert drafter.fed == draft.cached


def test_sampled_rounds_accept_everything_when_draft_and_target_agree():
    sampling = Sampling(0.8, 1.0, 0, 7)
    drafter = LlamaCppDrafter(FakeContext(soft=True), "d", VOCAB)
    _, run, events = _decode(drafter, 4, n=32, sampling=sampling, context=FakeContext(soft=True))
    proposed = sum(len(e.proposed) for e in events)
    assert proposed > 0 and sum(e.accepted for e in events) == proposed  # p = q, so min(1, p/q) = 1
    assert len(run.generated) == 32


def test_a_new_prompt_starts_from_an_empty_memory():
    target = LlamaCppTarget(FakeContext(), "fake", eos_id=-1, vocab_size=VOCAB)
    drafter = LlamaCppDrafter(FakeContext(), "d", VOCAB)
    ctx = RoundContext("s", "p", "c", itertools.count())
    first = decode_prompt(target, drafter, PROMPT, FixedDraftLen(3), GREEDY, 12, ctx, lambda e: None)
    decode_prompt(target, drafter, [7, 7, 7], FixedDraftLen(3), GREEDY, 12, ctx, lambda e: None)
    again = decode_prompt(target, drafter, PROMPT, FixedDraftLen(3), GREEDY, 12, ctx, lambda e: None)
    assert again.generated == first.generated
    assert target.cache_bytes() == {"target": 1234} and drafter.cache_bytes() == {"draft": 1234}
