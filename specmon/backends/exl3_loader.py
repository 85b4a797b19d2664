"""ExLlamaV3's side of `gpu_pair`: the only module that calls into exllamav3.

A folder (EXL3, or unquantised) becomes a `Model` with an fp16 `Cache` of max_seq_len positions
rounded up to whole pages, loaded over the visible GPUs. Follows exllamav3 1.6.5's
`model/config.py` (`Config.from_directory`), `model/model.py` (`Model.from_config`, `load`,
`get_recurrent_layers`, `caps`) and `cache/cache.py` (`Cache(model, max_num_tokens)`).
Models a rejected draft cannot be rolled back on are refused before their weights load: recurrent
and hybrid ones (GDN, linear attention, ...), and the draft heads that read a target's hidden states
inside ExLlamaV3's generator (DFlash draft models, Gemma 4's assistant). A target's own MTP layers
are a component `from_config` does not build: such a target loads, its head unused."""

from __future__ import annotations

from pathlib import Path

from specmon.backends.exllama import CHUNK, MAX_ROWS, PAGE_SIZE, Exl3Runner
from specmon.backends.gpu_pair import GpuEngine
from specmon.errors import SpecmonError

HEAD_DRAFTERS = ("mtp_draft", "dflash_draft", "dflash2_draft", "attach_target")  # caps of draft heads


def cache_len(max_seq_len: int) -> int:
    return -(-max_seq_len // PAGE_SIZE) * PAGE_SIZE


def refuse_unrollable(model, folder: Path) -> None:
    """Refuse a model a rejected draft cannot be rolled back on (see the module's doc), before its weights load."""
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


def _load(exl, folder: Path, max_seq_len: int) -> Exl3Runner:
    try:
        config = exl.Config.from_directory(str(folder))
    except (AssertionError, ValueError, KeyError) as exc:  # an architecture or config it does not know
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise SpecmonError(f"{folder.name}: exllamav3 cannot load it: {detail}") from None
    # sliding-window layers as plain windowed attention (rolled back by past_len like the rest), not
    # as the recurrent state ExLlamaV3 keeps them in by default (gpt-oss, Gemma 4, ...); others ignore it
    model = exl.Model.from_config(config, swa_full=True)
    refuse_unrollable(model, folder)
    positions = cache_len(max_seq_len)
    cache = exl.Cache(model, max_num_tokens=positions)
    # loading measures a (1, max_chunk_size) pass against the cache: no longer than the cache holds
    model.load(max_chunk_size=min(CHUNK, positions), max_output_size=MAX_ROWS)
    return Exl3Runner(model, cache)


EXL3 = GpuEngine("exllamav3", "pip install 'specmon[exl3]'", ("hf", "exl3"), _load)
