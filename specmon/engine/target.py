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
