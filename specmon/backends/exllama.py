"""ExLlamaV2 and ExLlamaV3 target and draft models behind the engine's protocols, one round at a time.

The engines' generators keep only per-job totals, so specmon drives each model's forward itself and
rolls a cache back by writing the next pass at an earlier position: a pass at `past_len` overwrites
whatever a rejected draft left beyond it. One `Runner` per engine says how a model loads and how a
forward is called; the rest is shared. Neither engine is imported here (a runner's `load` is handed
the package), so this runs on the CPU against recording fakes in the tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from specmon.engine.drafters import CachedDrafter, Proposal
from specmon.engine.target import CachedTarget
from specmon.engine.draft_len import MAX_DRAFT_LEN
from specmon.errors import SpecmonError
from specmon.events.schema import Sampling
from specmon.telemetry.memory import vram_bytes

PAGE_SIZE = 256  # ExLlamaV3's flash-attn cache: its length is a whole number of pages (constants.PAGE_SIZE)
CHUNK = 2048  # longest prefill pass, ExLlamaV3's default max_chunk_size
MAX_ROWS = MAX_DRAFT_LEN + 1  # logit rows of the widest verify pass (k drafts and the last context token)
HEAD_DRAFTERS = ("mtp_draft", "dflash_draft", "dflash2_draft", "attach_target")  # ExLlamaV3 caps of draft heads


def cuda_sync() -> None:
    """The engines run on streams of their own: wait for all of them before reading the clock."""
    torch.cuda.synchronize()


def _ids(tokens: Sequence[int]) -> torch.Tensor:
    return torch.tensor([list(tokens)], dtype=torch.long)  # both engines take [batch, q_len] on the CPU


def _rows(logits: torch.Tensor, vocab_size: int) -> np.ndarray:
    """[1, q_len, padded vocab] logits -> fp32 [q_len, tokenizer vocab]."""
    return logits[0, :, :vocab_size].float().cpu().numpy()


class Exl2Runner:
    """ExLlamaV2: `forward(ids, cache, ...)` writes at `cache.current_seq_len` and advances it."""

    def __init__(self, model, cache):
        self.model, self.cache = model, cache
        self.max_len = cache.max_seq_len

    @classmethod
    def load(cls, exl, folder: Path, max_seq_len: int) -> Exl2Runner:
        """The folder as a model with an fp16 cache of max_seq_len positions, split over the visible GPUs."""
        config = exl.ExLlamaV2Config(str(folder))
        config.max_seq_len = max_seq_len
        model = exl.ExLlamaV2(config)
        cache = exl.ExLlamaV2Cache(model, max_seq_len=max_seq_len, lazy=True)
        model.load_autosplit(cache)
        return cls(model, cache)

    def prefill(self, tokens: Sequence[int]) -> None:
        self.cache.current_seq_len = 0
        self.model.forward(_ids(tokens), self.cache, preprocess_only=True)

    def logits(self, tokens: Sequence[int], past_len: int, last_only: bool = False) -> torch.Tensor:
        self.cache.current_seq_len = past_len
        return self.model.forward(_ids(tokens), self.cache, last_id_only=last_only)


class Exl3Runner:
    """ExLlamaV3: `forward(ids, params)` on a one-sequence flash-attn cache, written at `past_len` (1.6.5's
    model.py `prefill`/`forward`, attn.py `prepare_flash_attn`, model_ls.py `last_tokens_only`)."""

    def __init__(self, model, cache):
        self.model, self.cache = model, cache
        self.max_len = cache.max_num_tokens

    @classmethod
    def load(cls, exl, folder: Path, max_seq_len: int) -> Exl3Runner:
        """The folder (EXL3, or unquantised) as a model with an fp16 cache of max_seq_len positions in whole
        pages. Refused before their weights load: models a rejected draft cannot be rolled back on, and draft
        heads (DFlash, Gemma 4's assistant); a target's own MTP layers are not built, its head unused."""
        try:
            config = exl.Config.from_directory(str(folder))
        except (AssertionError, ValueError, KeyError) as exc:  # an architecture or config it does not know
            detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise SpecmonError(f"{folder.name}: exllamav3 cannot load it: {detail}") from None
        # sliding-window layers as plain windowed attention (rolled back by past_len like the rest), not
        # as the recurrent state ExLlamaV3 keeps them in by default (gpt-oss, Gemma 4, ...); others ignore it
        model = exl.Model.from_config(config, swa_full=True)
        arch = getattr(model.config, "architecture", None) or folder.name
        if any(model.caps.get(cap) for cap in HEAD_DRAFTERS):
            raise SpecmonError(
                f"{folder.name}: a draft head ({arch}) that reads the target's hidden states inside ExLlamaV3's "
                'generator; specmon drafts with a separate draft model of the same family or kind = "ngram"'
            )
        if model.get_recurrent_layers() or model.recurrent_state_cls is not None:
            raise SpecmonError(
                f"{folder.name}: {arch} keeps recurrent state, which specmon cannot roll back after a rejected "
                "draft; pick a transformer-only model"
            )
        positions = -(-max_seq_len // PAGE_SIZE) * PAGE_SIZE
        cache = exl.Cache(model, max_num_tokens=positions)
        # loading measures a (1, max_chunk_size) pass against the cache: no longer than the cache holds
        model.load(max_chunk_size=min(CHUNK, positions), max_output_size=MAX_ROWS)
        return cls(model, cache)

    def _params(self, past_len: int) -> dict:
        return {"attn_mode": "flash_attn", "cache": self.cache, "past_len": past_len, "batch_shape": (1, self.max_len)}

    def prefill(self, tokens: Sequence[int], past_len: int = 0) -> None:
        for start in range(0, len(tokens), CHUNK):
            self.model.prefill(_ids(tokens[start : start + CHUNK]), self._params(past_len + start))

    def logits(self, tokens: Sequence[int], past_len: int, last_only: bool = False) -> torch.Tensor:
        if len(tokens) > CHUNK:  # a draft model's first pass is the whole prompt: all but a chunk is prefill
            assert last_only, "a verify pass is never longer than a chunk (MAX_ROWS)"
            head = len(tokens) - CHUNK
            self.prefill(tokens[:head], past_len)
            tokens, past_len = tokens[head:], past_len + head
        params = self._params(past_len)
        if last_only:
            params["last_tokens_only"] = 1
        return self.model.forward(_ids(tokens), params)


Runner = Exl2Runner | Exl3Runner  # how an engine's forward is called (recording fakes in the tests)


class KvTarget(CachedTarget):
    """A model and its cache behind a Runner."""

    def __init__(
        self,
        runner: Runner,
        name: str,
        eos_id: int,
        vocab_size: int,
        sync: Callable[[], None] = cuda_sync,
        cache_bytes: int = 0,
    ):
        super().__init__(name, eos_id, vocab_size, runner.max_len)
        self.runner = runner
        self._sync = sync
        self._cache_bytes = cache_bytes

    def _write(self, tokens: Sequence[int], start: int, logits: bool) -> np.ndarray | None:
        out = self.runner.logits(tokens, start) if logits else self.runner.prefill(tokens)
        self._sync()
        return _rows(out, self.vocab_size) if logits else None

    def memory_bytes(self) -> int:
        """VRAM in use on the device per NVML (all processes); torch's own allocations without a driver."""
        used, _ = vram_bytes()
        return used if used is not None else int(torch.cuda.memory_allocated())

    def cache_bytes(self) -> dict[str, int]:
        return {"target": self._cache_bytes}


class KvDrafter(CachedDrafter):
    """A separate draft model with its own cache, behind a Runner."""

    def __init__(
        self, runner: Runner, name: str, vocab_size: int, sync: Callable[[], None] = cuda_sync, cache_bytes: int = 0
    ):
        super().__init__()
        self.runner, self.name = runner, name
        self.vocab_size = vocab_size
        self._sync = sync
        self._cache_bytes = cache_bytes

    def propose(self, context: Sequence[int], k: int, sampling: Sampling, rng: np.random.Generator) -> Proposal:
        proposal = super().propose(context, k, sampling, rng)
        if k > 0:
            self._sync()  # once a round, before the clock is read
        return proposal

    def _step(self, tokens: list[int], past_len: int) -> np.ndarray:
        return _rows(self.runner.logits(tokens, past_len, last_only=True)[:, -1:], self.vocab_size)

    def cache_bytes(self) -> dict[str, int]:
        return {"draft": self._cache_bytes}
