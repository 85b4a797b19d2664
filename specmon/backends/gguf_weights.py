"""Read llama weights out of a GGUF file into torch tensors, in Hugging Face layout."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
import torch

from specmon.errors import SpecmonError
from specmon.backends.tokenizer import open_gguf


@dataclass(frozen=True)
class LlamaConfig:
    n_layers: int
    dim: int
    ffn_dim: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    rope_theta: float
    norm_eps: float

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


def read_config(reader: gguf.GGUFReader) -> LlamaConfig:
    f = reader.fields
    arch = f["general.architecture"].contents()
    if arch != "llama":
        raise SpecmonError(f"GGUF architecture {arch!r} is not supported; only llama is")
    get = lambda key: f[f"llama.{key}"].contents()  # noqa: E731
    vocab = f["llama.vocab_size"].contents() if "llama.vocab_size" in f else len(f["tokenizer.ggml.tokens"].data)
    return LlamaConfig(
        n_layers=int(get("block_count")),
        dim=int(get("embedding_length")),
        ffn_dim=int(get("feed_forward_length")),
        n_heads=int(get("attention.head_count")),
        n_kv_heads=int(get("attention.head_count_kv")),
        vocab_size=int(vocab),
        rope_theta=float(get("rope.freq_base")),
        norm_eps=float(get("attention.layer_norm_rms_epsilon")),
    )


def load_gguf_llama(path: Path) -> tuple[LlamaConfig, dict[str, torch.Tensor]]:
    """Dequantise every tensor to float32; keys are GGUF's tensor names less `.weight` (`blk.3.attn_q`)."""
    reader = open_gguf(path)
    cfg = read_config(reader)
    weights: dict[str, torch.Tensor] = {}
    for tensor in reader.tensors:
        array = np.asarray(gguf.quants.dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
        key = tensor.name.removesuffix(".weight")
        part = key.rpartition(".")[2]
        if part in ("attn_q", "attn_k"):  # llama.cpp's row permutation undone, so rotate-half RoPE applies
            heads = cfg.n_heads if part == "attn_q" else cfg.n_kv_heads
            array = array.reshape(heads, -1, 2, *array.shape[1:]).swapaxes(1, 2).reshape(array.shape)
        weights[key] = torch.from_numpy(np.array(array, dtype=np.float32, order="C"))
    weights.setdefault("output", weights["token_embd"])  # tied embeddings when there is no output.weight
    return cfg, weights
