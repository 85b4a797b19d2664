"""A rolled-back KV cache gives the logits of a cache built afresh on the accepted tokens."""

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def target64(model_path, pair):
    """float64, so batch-shape rounding (~1e-5 in fp32) cannot hide or fake a rollback error."""
    from specmon.backends.llama import Llama
    from specmon.backends.loader import cached_weights
    from specmon.backends.torch_backend import TorchTarget

    cfg, weights = cached_weights(model_path)
    return TorchTarget(Llama(cfg, weights, torch.float64, "cpu", 512), "fp64", pair.tokenizer.eos_id)


def test_rollback_after_random_rejections_matches_a_fresh_cache(pair, target64):
    target = target64
    rng = np.random.default_rng(0)
    prompt = pair.tokenizer.encode_chat("Tell me about rivers.")
    context = list(prompt)
    target.forward(context[:-1], 0)
    for _ in range(12):
        k = int(rng.integers(0, 7))
        drafts = rng.integers(0, target.vocab_size, size=k).tolist()
        target.forward([context[-1], *drafts], len(context) - 1)
        accepted = int(rng.integers(0, k + 1))  # any pattern of rejections
        target.truncate(len(context) + accepted)
        context += drafts[:accepted] + [int(rng.integers(0, target.vocab_size))]
    probe = rng.integers(0, target.vocab_size, size=3).tolist()
    rolled = target.forward([context[-1], *probe], len(context) - 1)
    target.forward(context[:-1], 0)  # a fresh cache: the accepted tokens in one prefill
    fresh = target.forward([context[-1], *probe], len(context) - 1)
    assert np.abs(rolled - fresh).max() < 1e-5


def test_truncate_only_shortens(pair):
    target = pair.target
    target.forward([1, 2, 3, 4], 0)
    target.truncate(2)
    target.truncate(10)
    assert target.cached_len == 2
