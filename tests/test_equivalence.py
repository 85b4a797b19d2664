"""Greedy speculative decoding in fp32 is token-identical to plain greedy decoding.

Every drafter at k = 2 and 8: a short draft and one longer than most accepted prefixes (k = 4 between
them takes the same paths). The n-gram drafter decodes every built-in prompt. The drafters that run
layers use 29 of the target's 30: SmolLM2's early exits are rejected at the first position in nearly
every round (4 layers: 77 of 78 rounds), which leaves their caches' partial-accept and bonus paths
untested; 29 layers take every path, and the test asserts that they did. They decode one prompt of each
class, which takes every path at a quarter of the time. A mismatch is tolerated only at a near-tie:
where plain decoding's top-1 and top-2 logits differ by less than 1e-4.
"""

import itertools

import pytest

from specmon.engine.drafters import NgramDrafter, NoDrafter
from specmon.engine.driver import compare
from specmon.engine.prompts import builtin_suite
from specmon.engine.draft_len import FixedDraftLen
from specmon.engine.rounds import RoundContext
from specmon.events.schema import Sampling
from roundloop import decode_prompt

pytestmark = pytest.mark.slow
NEW_TOKENS = 16
DRAFT_LAYERS = 29  # of SmolLM2-135M's 30: close enough to the target that some drafts are accepted whole
GREEDY = Sampling()
PROMPTS = builtin_suite()
ONE_OF_EACH_CLASS = [p for p in PROMPTS if p.id == f"{p.prompt_class}-0"]  # each class's first


def _decode(target, drafter, tokens, k, prompt_id="p", emit=None):
    ctx = RoundContext("s", prompt_id, "c", itertools.count())
    return decode_prompt(target, drafter, tokens, FixedDraftLen(k), GREEDY, NEW_TOKENS, ctx, emit or (lambda e: None))


@pytest.fixture(scope="module")
def plain_runs(pair):
    runs = {}
    for prompt in PROMPTS:
        tokens = pair.tokenizer.encode_chat(prompt.text)
        runs[prompt.id] = (tokens, _decode(pair.target, NoDrafter(), tokens, 0))
    return runs


@pytest.fixture(scope="module")
def drafters(pair, model_path):
    from specmon.backends.llama import Llama
    from specmon.backends.loader import cached_weights
    from specmon.backends.torch_backend import LayerSkipDrafter, ModelDrafter
    import dataclasses
    import torch

    cfg, weights = cached_weights(model_path)
    small = Llama(dataclasses.replace(cfg, n_layers=DRAFT_LAYERS), weights, torch.float32, "cpu", 2048)
    return {
        "ngram": NgramDrafter(),
        "layerskip": LayerSkipDrafter(pair.target, DRAFT_LAYERS),
        "model": ModelDrafter(small, f"model:smollm2[:{DRAFT_LAYERS}]"),
    }


def _path(r) -> str:
    """Which way a round's bookkeeping went."""
    if not r.proposed:
        return "no draft"
    return "all accepted" if r.rejection_pos is None else "rejected first" if r.rejection_pos == 0 else "rejected later"


@pytest.mark.parametrize("k", [2, 8])
@pytest.mark.parametrize("name", ["ngram", "layerskip", "model"])
def test_greedy_speculation_equals_plain_decoding(pair, plain_runs, drafters, name, k):
    verdicts = {}
    rounds = []
    for prompt in PROMPTS if name == "ngram" else ONE_OF_EACH_CLASS:
        tokens, plain = plain_runs[prompt.id]
        spec = _decode(pair.target, drafters[name], tokens, k, emit=rounds.append)
        verdicts[prompt.id] = compare(plain.generated, plain.margins, spec.generated, True, 1e-4)
    bad = {pid: v for pid, v in verdicts.items() if v.verdict not in ("identical", "near-tie")}
    assert not bad, f"{name} k={k} diverged beyond a near-tie: {bad}"
    assert all(len(r.proposed) <= k and r.accepted <= len(r.proposed) for r in rounds)
    paths = {_path(r) for r in rounds}
    assert {"rejected first", "rejected later"} <= paths  # the draft caches were rolled back, from every depth
    if k == 2 or name == "ngram":  # and caught up after a whole draft and its bonus token
        assert "all accepted" in paths


def test_plain_runs_stop_at_the_token_budget_or_eos(pair, plain_runs):
    for tokens, run in plain_runs.values():
        assert run.rounds == len(run.generated) <= NEW_TOKENS
        assert run.stop_reason == "eos" or len(run.generated) == NEW_TOKENS
        assert len(run.margins) == len(run.generated)


def test_what_loading_built_is_frozen_out_of_the_garbage_collector(profile):
    """A full collection would walk the embedded model's ~700k loaded objects (100-180 ms) inside
    whichever round it fell on; after load_pair, none of them is left for it to walk."""
    import gc

    from specmon.backends.loader import load_pair

    pair = load_pair(profile)
    walked = gc.get_objects()  # what a full collection walks now
    assert len(walked) < 5_000
    assert not any(o is pair.target or o is pair.target.model or o is pair.tokenizer for o in walked)
