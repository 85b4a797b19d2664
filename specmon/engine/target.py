"""What the round loop needs from a target model, whatever runs it (torch, ExLlamaV2)."""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np


class Target(Protocol):
    name: str
    vocab_size: int
    max_len: int  # positions the KV cache holds
    eos_id: int

    def prefill(self, tokens: Sequence[int]) -> None:
        """Fill cache positions [0, len(tokens)) from scratch; no logits are needed."""

    def forward(self, tokens: Sequence[int], start: int) -> np.ndarray:
        """fp32 logits [len(tokens), vocab] for tokens at positions start...; returns after a device sync."""

    def truncate(self, length: int) -> None:
        """Keep cache positions [0, length); later positions are stale and will be overwritten."""

    def memory_bytes(self) -> int:
        """Memory in use by this model's device right now (RSS on the CPU)."""

    def cache_bytes(self) -> dict[str, int]:
        """Size of each KV cache this pair holds (e.g. {"target": ..., "draft": ...})."""


class CachedTarget:
    """A target's KV cache bookkeeping, whatever runs it: positions [0, cached_len) hold valid keys and
    values, and a write at `start` (at most cached_len) overwrites whatever a rejected draft left there."""

    def __init__(self, name: str, eos_id: int, vocab_size: int, max_len: int):
        self.name, self.eos_id, self.max_len = name, eos_id, max_len
        self.vocab_size = vocab_size  # the tokenizer's: a model's wider (padded) rows are cut to it
        self.cached_len = 0

    def _write(self, tokens: Sequence[int], start: int, logits: bool) -> np.ndarray | None:
        """Write `tokens` (one or more) at positions start...; with `logits`, their rows, after a device sync."""
        raise NotImplementedError

    def prefill(self, tokens: Sequence[int]) -> None:
        self.cached_len = 0
        if tokens:
            self._write(tokens, 0, logits=False)
        self.cached_len = len(tokens)

    def forward(self, tokens: Sequence[int], start: int) -> np.ndarray:
        if start > self.cached_len:
            raise RuntimeError(f"target cache holds {self.cached_len} positions, asked to write at {start}")
        self.cached_len = start
        if not tokens:
            return np.zeros((0, self.vocab_size), dtype=np.float32)
        rows = self._write(tokens, start, logits=True)
        self.cached_len = start + len(tokens)
        return rows[:, : self.vocab_size]

    def truncate(self, length: int) -> None:
        self.cached_len = min(self.cached_len, length)
