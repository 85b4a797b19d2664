"""The torch backend: the target and model-based drafters on the CPU (or CUDA when present)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from specmon.backends.llama import KVCache, Llama
from specmon.engine.drafters import CachedDrafter
from specmon.engine.target import CachedTarget
from specmon.telemetry.memory import rss_bytes


class TorchTarget(CachedTarget):
    """A llama model plus its rollable KV cache."""

    def __init__(self, model: Llama, name: str, eos_id: int):
        super().__init__(name, eos_id, model.cfg.vocab_size, model.max_len)
        self.model = model
        self.cache: KVCache = model.new_cache()

    def fork(self) -> TorchTarget:
        """The same model (weights shared, packed copy included) with a KV cache of its own."""
        return TorchTarget(self.model, self.name, self.eos_id)

    def _write(self, tokens: Sequence[int], start: int, logits: bool) -> np.ndarray:
        ids = torch.tensor(tokens, dtype=torch.long, device=self.model.device)
        return self.model.forward(ids, start, self.cache).cpu().numpy()  # the copy to the host is also the device sync

    def host_facts(self) -> dict[str, str]:
        """What this host's kernels decided at load: a confident draft's length depends on pad_from."""
        if not self.model.packed_rows:
            return {}
        return {"packed_rows": str(self.model.packed_rows), "pad_from": str(self.model.pad_from)}

    def verify_rows(self, n_tok: int, start: int) -> int:
        """Rows a pass of n_tok positions at `start` computes: packed_rows where it is padded."""
        return self.model.padded_rows(n_tok, start, None) if self.model.packed_rows else n_tok

    def memory_bytes(self) -> int:
        if self.model.device.startswith("cuda"):
            return int(torch.cuda.memory_allocated())
        return rss_bytes() or 0

    def cache_bytes(self) -> dict[str, int]:
        return {"target": self.cache.keys.nbytes * 2}


class _TorchDraft(CachedDrafter):
    """A drafter that runs a llama model (its first `n_layers`) on `cache`."""

    def __init__(self, model: Llama, name: str, cache: KVCache, n_layers: int | None = None):
        super().__init__()
        self.model, self.name, self.cache, self.n_layers = model, name, cache, n_layers

    def _step(self, tokens: list[int], start: int) -> np.ndarray:
        ids = torch.tensor(tokens, dtype=torch.long, device=self.model.device)
        return self.model.forward(ids, start, self.cache, self.n_layers)[-1:].cpu().numpy()


class ModelDrafter(_TorchDraft):
    """A separate draft model (same tokenizer as the target) with its own KV cache."""

    def __init__(self, model: Llama, name: str = "model"):
        super().__init__(model, name, model.new_cache())

    def fork(self) -> ModelDrafter:
        """The same draft model with a KV cache of its own."""
        return ModelDrafter(self.model, self.name)

    def cache_bytes(self) -> dict[str, int]:
        return {"draft": self.cache.keys.nbytes * 2}


class LayerSkipDrafter(_TorchDraft):
    """Self-draft: the target's first N layers, its final norm and head, in the target's own cache (its
    verify pass rewrites the same positions with identical values, so no second cache is needed)."""

    def __init__(self, target: TorchTarget, n_layers: int):
        super().__init__(target.model, f"layerskip-{n_layers}", target.cache, n_layers)
        self.target = target

    def _plan(self, context: Sequence[int]) -> tuple[int, list[int]]:
        valid = min(self.target.cached_len, len(context) - 1)  # the target's cache says what was fed
        return valid, list(context[valid:])
