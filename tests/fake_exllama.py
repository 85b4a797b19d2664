"""Fakes of ExLlamaV2's and ExLlamaV3's model and cache, with the engines' own call signatures, for
the round bookkeeping on the CPU. Their logits depend on everything in the cache: a wrong roll-back
(a stale position left in the cache) changes the next token, so outputs expose it.

Followed: exllamav2 0.3.2 `exllamav2/model.py` (`ExLlamaV2.forward(input_ids, cache, input_mask,
preprocess_only, last_id_only, ...)`, writing at and advancing `cache.current_seq_len`), and
exllamav3 1.6.5 `exllamav3/model/model.py` (`Model.from_config`, `prefill`/`forward(input_ids,
params)`, `load(...)`, `caps`, `get_recurrent_layers`, `recurrent_state_cls`), `cache/cache.py`
(`Cache(model, max_num_tokens, layer_type=None, max_batch_size=16, max_history=0, ...)`),
`modules/attn.py` (`prepare_flash_attn`: `batch_shape` (bsz, max_seq_len) with max_seq_len a
multiple of 256 and bsz * max_seq_len <= the cache's max_num_tokens, `past_len`),
`model/model_ls.py` (`last_tokens_only`) and `model/config.py` (`Config.from_directory` asserts a
known architecture)."""

from __future__ import annotations

import json
import types
from pathlib import Path

import torch

PAGE_SIZE = 256


class FakeLogits:
    """Next-token logits from a hash of the whole cached prefix; `disagree_every` makes a draft that
    picks another token whenever the prefix length is a multiple of it."""

    def __init__(self, vocab: int = 50, disagree_every: int = 0, soft: bool = False):
        self.vocab = vocab
        self.disagree_every = disagree_every
        self.soft = soft
        self.calls: list[dict] = []  # one per pass: where it wrote, what, and whether it returned only the last row

    def next_token(self, prefix: list[int]) -> int:
        token = (sum((i + 1) * t for i, t in enumerate(prefix)) * 31 + len(prefix)) % self.vocab
        if self.disagree_every and len(prefix) % self.disagree_every == 0:
            token = (token + 1) % self.vocab
        return token

    def _pass(self, slots: list, tokens: list[int], start: int, prefill: bool, last_only: bool):
        self.calls.append({"start": start, "tokens": tokens, "preprocess_only": prefill, "last_id_only": last_only})
        if start + len(tokens) > len(slots):
            raise IndexError(f"cache of {len(slots)} positions written at {start} with {len(tokens)}")
        slots[start : start + len(tokens)] = tokens  # what lies past it stays, stale, as in a real cache
        if prefill:
            return None
        rows = []
        for end in range(start + 1, start + len(tokens) + 1):
            row = torch.full(
                (self.vocab + 3,), -4.0 if self.soft else -30.0
            )  # 3 padding columns, as in padded vocabularies
            row[self.next_token(slots[:end])] = 4.0
            rows.append(row)
        logits = torch.stack(rows)[None].half()
        return logits[:, -1:] if last_only else logits


class Exl2Cache:
    def __init__(self, max_seq_len: int = 512):
        self.max_seq_len = max_seq_len
        self.current_seq_len = 0
        self.slots: list[int | None] = [None] * max_seq_len  # the token whose keys/values sit at each position


class Exl2Model(FakeLogits):
    def forward(self, input_ids, cache, input_mask=None, preprocess_only=False, last_id_only=False, **kwargs):
        tokens, start = input_ids[0].tolist(), cache.current_seq_len
        cache.current_seq_len += len(tokens)
        return self._pass(cache.slots, tokens, start, preprocess_only, last_id_only)


class Exl3Cache:
    def __init__(self, model, max_num_tokens: int, layer_type=None, max_batch_size: int = 16, max_history: int = 0):
        assert max_num_tokens % PAGE_SIZE == 0, "max_num_tokens must be a multiple of the page size"
        self.model, self.max_num_tokens = model, max_num_tokens
        self.slots: list[int | None] = [None] * max_num_tokens
        model.caches.append(self)


class Exl3Model(FakeLogits):
    def __init__(self, config=None, vocab: int = 50, disagree_every: int = 0, soft: bool = False, swa_full=False):
        super().__init__(config.vocab_size if config else vocab, disagree_every, soft)
        self.config = config
        caps, state, layers, swa = KNOWN[config.architecture] if config else ({}, None, [], False)
        self.caps = {"supports_tp": True, **caps}
        # sliding-window layers are recurrent state unless swa_full (gpt_oss.py, gemma4.py)
        self.recurrent_state_cls = "SWAState" if swa and not swa_full else state
        self.recurrent_layers = layers
        self.caches: list[Exl3Cache] = []
        self.loaded: dict | None = None  # load's arguments, and the caches attached by then

    @staticmethod
    def from_config(config, component: str = "text", **kwargs):
        return Exl3Model(config, swa_full=kwargs.get("swa_full", False))

    def get_recurrent_layers(self):
        return self.recurrent_layers

    def load(self, device=None, max_chunk_size: int = 2048, max_output_size: int = 32, **kwargs):
        for cache in self.caches:  # the autosplit's measuring pass: batch_shape (1, max_chunk_size) on the cache
            assert max_chunk_size % PAGE_SIZE == 0, f"cache seq len must be a multiple of {PAGE_SIZE}"
            assert max_chunk_size <= cache.max_num_tokens, "Cache too small for batch shape"
        self.loaded = {"max_chunk_size": max_chunk_size, "max_output_size": max_output_size, "caches": len(self.caches)}

    def _where(self, input_ids, params: dict) -> tuple[Exl3Cache, list[int], int]:
        cache = params["cache"]
        assert params["attn_mode"] == "flash_attn"
        bsz, max_seq_len = params["batch_shape"]
        assert max_seq_len % PAGE_SIZE == 0, f"cache seq len must be a multiple of {PAGE_SIZE}"
        assert input_ids.shape[0] * max_seq_len <= cache.max_num_tokens, "Cache too small for batch shape"
        return cache, input_ids[0].tolist(), params["past_len"]

    def prefill(self, input_ids, params=None):
        cache, tokens, start = self._where(input_ids, params)
        return self._pass(cache.slots, tokens, start, True, False)

    def forward(self, input_ids, params=None):
        cache, tokens, start = self._where(input_ids, params)
        return self._pass(cache.slots, tokens, start, False, bool(params.get("last_tokens_only")))


KNOWN = {  # architecture -> (caps, recurrent_state_cls, recurrent layers, sliding-window layers) as set
    "LlamaForCausalLM": ({}, None, [], False),
    "Qwen3NextForCausalLM": ({"recurrent_states": True}, "GDNState", ["linear_attn"], False),  # qwen3_next.py
    "GptOssForCausalLM": ({}, None, [], True),  # gpt_oss.py: SWAState unless swa_full
    "Gemma4AssistantForCausalLM": ({"mtp_draft": True}, None, [], False),  # gemma4_assistant.py
    "DFlashDraftModel": ({"dflash_draft": True, "attach_target": True}, None, [], False),  # dflash.py
}


class Exl3Config:
    def __init__(self, directory: str):
        raw = json.loads((Path(directory) / "config.json").read_text())
        arch = raw["architectures"][0]
        assert arch in KNOWN, f"Unknown architecture {arch} in {directory}/config.json"
        self.architecture, self.vocab_size = arch, raw["vocab_size"]

    @staticmethod
    def from_directory(directory: str, **kwargs):
        return Exl3Config(directory)


def exllamav3_module() -> types.ModuleType:
    """A stand-in `exllamav3` package: the three names specmon uses."""
    module = types.ModuleType("exllamav3")
    module.Config, module.Model, module.Cache = Exl3Config, Exl3Model, Exl3Cache
    return module
