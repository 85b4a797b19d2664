"""Verify passes over MKL-packed weights (profile key packed_rows): the same logits as the plain
fp32 kernels, and a cache written through a padded pass rolls back like any other."""

import numpy as np
import pytest
import torch

from specmon.backends.llama import Llama, can_pack
from specmon.backends.loader import cached_weights
from specmon.backends.torch_backend import TorchTarget
from tests.tinymodel import write_tiny_gguf

pytestmark = pytest.mark.skipif(not can_pack("cpu", torch.float32), reason="this torch has no MKL packed gemm")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return cached_weights(write_tiny_gguf(tmp_path_factory.mktemp("packed") / "tiny.gguf", dim=64))


def _target(tiny, packed_rows: int) -> TorchTarget:
    cfg, weights = tiny
    return TorchTarget(Llama(cfg, weights, torch.float32, "cpu", 256, packed_rows), "tiny", 2)


def test_padded_passes_give_the_plain_kernels_logits(tiny):
    plain, packed = _target(tiny, 0), _target(tiny, 9)
    assert packed.model.packed_rows == 9 and plain.model.packed_rows == 0
    rng = np.random.default_rng(1)
    context = rng.integers(3, 200, size=40).tolist()
    for target in (plain, packed):
        target.forward(context, 0)
    for rows in range(1, 10):
        tokens = rng.integers(3, 200, size=rows).tolist()
        assert packed.model.padded_rows(rows, 40, None) == (9 if rows >= 4 else rows)
        want, got = plain.forward(tokens, 40), packed.forward(tokens, 40)
        assert got.shape == want.shape == (rows, packed.vocab_size)
        assert np.abs(got - want).max() < 1e-4 * max(1.0, np.abs(want).max())
        assert packed.cached_len == plain.cached_len == 40 + rows  # the padding is not counted as cached


def test_a_cache_written_by_padded_passes_rolls_back(tiny):
    """Accept part of each padded pass, roll back, go on: the logits equal a fresh prefill's."""
    target = _target(tiny, 9)
    rng = np.random.default_rng(2)
    context = rng.integers(3, 200, size=20).tolist()
    target.forward(context[:-1], 0)
    for _ in range(10):
        drafts = rng.integers(3, 200, size=int(rng.integers(3, 9))).tolist()
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
