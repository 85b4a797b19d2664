"""ExLlamaV2 target and draft model behind the engine's protocols, one round at a time.

ExLlamaV2's generators keep only per-job totals, so specmon drives `model.forward` itself and
rolls each cache back by setting `cache.current_seq_len`. The model and cache are used only
through `forward(ids, cache, ...)` and `current_seq_len`, so this bookkeeping runs on the CPU
against a recording fake in the tests; exllamav2 itself is imported only by `exl2_loader`.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch

from specmon.engine.draft_cache import CacheLedger, choose_draft_token
from specmon.engine.drafters import Proposal
from specmon.events.schema import Sampling
from specmon.telemetry.memory import vram_bytes


def cuda_sync() -> None:
    """ExLlamaV2 runs on its own streams: wait for all of them before reading the clock."""
    torch.cuda.synchronize()


def _ids(tokens: Sequence[int]) -> torch.Tensor:
    return torch.tensor([list(tokens)], dtype=torch.long)  # ExLlamaV2 takes [batch, q_len] on the CPU


def _rows(logits: torch.Tensor, vocab_size: int) -> np.ndarray:
    """[1, q_len, padded vocab] half logits -> fp32 [q_len, tokenizer vocab]."""
    return logits[0, :, :vocab_size].float().cpu().numpy()


class Exl2Target:
    """An ExLlamaV2 model and its cache; positions [0, current_seq_len) hold valid keys/values."""

    def __init__(
        self,
        model,
        cache,
        name: str,
        eos_id: int,
        vocab_size: int,
        sync: Callable[[], None] = cuda_sync,
        cache_bytes: int = 0,
    ):
        self.model, self.cache, self.name = model, cache, name
        self.eos_id = eos_id
        self.vocab_size = vocab_size  # the tokenizer's; a config's may be padded wider
        self.max_len = cache.max_seq_len
        self._sync = sync
        self._cache_bytes = cache_bytes

    def prefill(self, tokens: Sequence[int]) -> None:
        self.cache.current_seq_len = 0
        if tokens:
            self.model.forward(_ids(tokens), self.cache, preprocess_only=True)
        self._sync()

    def forward(self, tokens: Sequence[int], start: int) -> np.ndarray:
        if start > self.cache.current_seq_len:
            raise RuntimeError(f"target cache holds {self.cache.current_seq_len} positions, asked to write at {start}")
        self.cache.current_seq_len = start  # drop positions a rejected draft left behind
        if not tokens:
            return np.zeros((0, self.vocab_size), dtype=np.float32)
        logits = self.model.forward(_ids(tokens), self.cache)
        self._sync()
        return _rows(logits, self.vocab_size)

    def truncate(self, length: int) -> None:
        self.cache.current_seq_len = min(self.cache.current_seq_len, length)

    def memory_bytes(self) -> int:
        """VRAM in use on the device per NVML (all processes); torch's own allocations without a driver."""
        used, _ = vram_bytes()
        return used if used is not None else int(torch.cuda.memory_allocated())

    def cache_bytes(self) -> dict[str, int]:
        return {"target": self._cache_bytes}


class Exl2Drafter:
    """A separate ExLlamaV2 draft model with its own cache: k single-token forwards per round.

    The cache is rolled back to the longest prefix it shares with the context, so after a round
    where all k drafts were accepted it is fed the last draft token (never fed: its logits were
    not needed) together with the target's bonus token."""

    def __init__(
        self, model, cache, name: str, vocab_size: int, sync: Callable[[], None] = cuda_sync, cache_bytes: int = 0
    ):
        self.model, self.cache, self.name = model, cache, name
        self.vocab_size = vocab_size
        self.ledger = CacheLedger()
        self._sync = sync
        self._cache_bytes = cache_bytes

    def begin(self, prompt: Sequence[int]) -> None:
        self.ledger.reset()
        self.cache.current_seq_len = 0

    def propose(self, context: Sequence[int], k: int, sampling: Sampling, rng: np.random.Generator) -> Proposal:
        if k <= 0:
            return Proposal([], None)
        keep, pending = self.ledger.plan(context)
        self.cache.current_seq_len = keep
        tokens: list[int] = []
        rows: list[np.ndarray] = []
        for _ in range(k):
            logits = self.model.forward(_ids(pending), self.cache, last_id_only=True)
            self.ledger.feed(pending)
            token, q_row = choose_draft_token(_rows(logits[:, -1:], self.vocab_size), sampling, rng)
            tokens.append(token)
            if q_row is not None:
                rows.append(q_row)
            pending = [token]
        self._sync()
        return Proposal(tokens, np.stack(rows) if rows else None)

    def cache_bytes(self) -> dict[str, int]:
        return {"draft": self._cache_bytes}
