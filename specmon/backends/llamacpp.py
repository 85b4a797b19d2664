"""llama.cpp target and draft model behind the engine's protocols, one round at a time (llamacpp_loader says
how specmon drives llama.cpp and alone imports it). The bookkeeping talks to a `Context` (one llama.cpp context
and its memory), so it runs on the CPU against a recording fake in the tests."""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from specmon.engine.drafters import CachedDrafter
from specmon.engine.target import CachedTarget
from specmon.telemetry.memory import rss_bytes


class Context(Protocol):
    """One llama.cpp context: a model's KV memory for sequence 0, and batch decode into it."""

    n_ctx: int

    def decode(self, tokens: Sequence[int], start: int, logits: str) -> np.ndarray | None:
        """Write `tokens` at positions start...; `logits` is "all", "last" or "none" (returns None).
        Positions from `start` on must already be free (see `keep`)."""

    def keep(self, length: int) -> None:
        """Drop every cached position >= length from the memory."""

    def cache_bytes(self) -> int:
        """Size of this context's KV memory."""


class LlamaCppTarget(CachedTarget):
    """A llama.cpp model and its context. llama.cpp refuses a batch whose first position does not follow
    the last one in memory, so every write first drops what lies at and after its start."""

    def __init__(self, context: Context, name: str, eos_id: int, vocab_size: int):
        super().__init__(name, eos_id, vocab_size, context.n_ctx)
        self.context = context

    def _write(self, tokens: Sequence[int], start: int, logits: bool) -> np.ndarray | None:
        self.context.keep(start)
        return self.context.decode(tokens, start, "all" if logits else "none")

    def memory_bytes(self) -> int:
        return rss_bytes() or 0

    def cache_bytes(self) -> dict[str, int]:
        return {"target": self.context.cache_bytes()}


class LlamaCppDrafter(CachedDrafter):
    """A separate draft model in its own llama.cpp context."""

    def __init__(self, context: Context, name: str, vocab_size: int):
        super().__init__()
        self.context, self.name = context, name
        self.vocab_size = vocab_size

    def _plan(self, context: Sequence[int]) -> tuple[int, list[int]]:
        start, pending = super()._plan(context)  # a new prompt's first plan keeps nothing
        self.context.keep(start)
        return start, pending

    def _step(self, tokens: list[int], start: int) -> np.ndarray:
        return self.context.decode(tokens, start, "last")[:, : self.vocab_size]

    def cache_bytes(self) -> dict[str, int]:
        return {"draft": self.context.cache_bytes()}
