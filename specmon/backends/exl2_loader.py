"""ExLlamaV2's side of `gpu_pair`: the only module that calls into exllamav2.

A folder becomes an `ExLlamaV2` model with an fp16 `ExLlamaV2Cache` of max_seq_len positions,
split over the visible GPUs by `load_autosplit`."""

from __future__ import annotations

from pathlib import Path

from specmon.backends.exllama import Exl2Runner
from specmon.backends.gpu_pair import GpuEngine


def _load(exl, folder: Path, max_seq_len: int) -> Exl2Runner:
    config = exl.ExLlamaV2Config(str(folder))
    config.max_seq_len = max_seq_len
    model = exl.ExLlamaV2(config)
    cache = exl.ExLlamaV2Cache(model, max_seq_len=max_seq_len, lazy=True)
    model.load_autosplit(cache)
    return Exl2Runner(model, cache)


EXL2 = GpuEngine("exllamav2", "pip install 'specmon[gpu]'", ("hf", "exl2"), _load)
