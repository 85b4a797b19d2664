"""A minimal llama forward pass with a preallocated KV cache that rolls back by length.

The gpt-fast shape: plain tensors, one cache tensor per layer, and `forward(tokens, start)`
that writes positions start..start+T-1 and attends over 0..start+T-1. Rolling back is only
a smaller `start` on the next call: stale positions beyond it are overwritten before use.
"""

from __future__ import annotations

import itertools
import time

import torch
import torch.nn.functional as F

from specmon.backends.gguf_weights import LlamaConfig

LINEARS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
MIN_PACKED_ROWS = 4  # MKL's fp32 gemm reads the weights once per 3 rows: from 4 rows on, packing pays
_PAD_FROM: dict[tuple, int] = {}  # pad_from measured in this process, by model shape


class KVCache:
    """Keys and values for every layer, [layer, kv_head, position, head_dim]."""

    def __init__(self, cfg: LlamaConfig, max_len: int, dtype: torch.dtype, device: str):
        shape = (cfg.n_layers, cfg.n_kv_heads, max_len, cfg.head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)


class Llama:
    """Weights plus RoPE tables; `forward` runs the first `n_layers` (all by default)."""

    def __init__(
        self,
        cfg: LlamaConfig,
        weights: dict[str, torch.Tensor],
        dtype: torch.dtype,
        device: str,
        max_len: int,
        packed_rows: int = 0,
        pad_from: int = 0,
    ):
        self.cfg = cfg
        self.dtype = dtype
        self.device = device
        cast = lambda t: t.to(device=device, dtype=dtype).contiguous()  # noqa: E731
        self.embed = cast(weights["token_embd"])
        # The output layer stays at least fp32: low-precision heads blur near-ties between top tokens.
        head_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        self.head = weights["output"].to(device=device, dtype=head_dtype).contiguous()
        self.out_norm = cast(weights["output_norm"])
        self.layers = [
            {k.split(".", 2)[2]: cast(v) for k, v in weights.items() if k.startswith(f"blk.{i}.")}
            for i in range(cfg.n_layers)
        ]
        self.cos, self.sin = _rope_tables(cfg, max_len, device, dtype)
        self.max_len = max_len
        self.packed_rows = packed_rows if packed_rows >= MIN_PACKED_ROWS and can_pack(device, dtype) else 0
        self.pad_from = 0
        if self.packed_rows:
            self._pack()
            shape = (cfg, self.packed_rows, dtype, device)
            if not pad_from and shape not in _PAD_FROM:  # every later load of this shape gets the same answer
                _PAD_FROM[shape] = self._measure_pad_from()
            self.pad_from = min(max(pad_from, 2), MIN_PACKED_ROWS) if pad_from else _PAD_FROM[shape]

    def _pack(self) -> None:
        """A second copy of every weight, laid out by MKL for passes of exactly packed_rows rows."""
        for layer in self.layers:
            for name in LINEARS:
                layer[f"{name}#packed"] = torch.ops.mkl._mkl_reorder_linear_weight(layer[name], self.packed_rows)
        self.head_packed = torch.ops.mkl._mkl_reorder_linear_weight(self.head, self.packed_rows)

    def _measure_pad_from(self) -> int:
        """The fewest positions worth padding to packed_rows on this CPU, timed on real passes. Some
        CPUs (MKL on AMD) read the weights once per row for 2-3 rows, where a packed pass is cheaper."""
        saved, self.pad_from = self.pad_from, MIN_PACKED_ROWS  # the short passes as they run unpadded
        cache = KVCache(self.cfg, self.packed_rows, self.dtype, self.device)
        tokens = torch.zeros(self.packed_rows, dtype=torch.long, device=self.device)
        sizes = [*range(2, MIN_PACKED_ROWS), self.packed_rows]
        best = [float("inf")] * len(sizes)  # the floor is what the kernels cost, the rest is noise
        try:
            for rep in range(5):  # interleaved, so drift in the machine's speed falls on all alike; 0 warms up
                for i, n in enumerate(sizes):
                    start = time.perf_counter()
                    self.forward(tokens[:n], 0, cache)
                    if rep:
                        best[i] = min(best[i], time.perf_counter() - start)
        finally:
            self.pad_from = saved
        return choose_pad_from(dict(zip(sizes[:-1], best[:-1])), best[-1])

    def padded_rows(self, n_tok: int, start: int, n_layers: int | None) -> int:
        """Rows to run for n_tok positions: a verify pass of pad_from..packed_rows positions is padded
        to packed_rows, whose packed weights are read once (the padding's keys land past the valid
        length, which the next call overwrites; causal attention keeps them from the real rows)."""
        fits = start + self.packed_rows <= self.max_len and (n_layers or self.cfg.n_layers) == self.cfg.n_layers
        return self.packed_rows if fits and self.pad_from <= n_tok <= self.packed_rows else n_tok

    def new_cache(self) -> KVCache:
        return KVCache(self.cfg, self.max_len, self.dtype, self.device)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, start: int, cache: KVCache, n_layers: int | None = None) -> torch.Tensor:
        """Logits [T, vocab] (fp32, or fp64 for an fp64 model) for `tokens` placed at positions start..start+T-1."""
        real = tokens.shape[0]
        n_tok = self.padded_rows(real, start, n_layers) if self.packed_rows else real
        if n_tok > real:
            tokens = F.pad(tokens, (0, n_tok - real))
        linear = self._packed_linear if self.packed_rows and n_tok == self.packed_rows else _linear
        x = self.embed[tokens]
        cos, sin = self.cos[start : start + n_tok], self.sin[start : start + n_tok]
        mask = _causal_mask(n_tok, start, x.device) if n_tok > 1 else None
        for i, layer in enumerate(self.layers[: n_layers or self.cfg.n_layers]):
            x = x + self._attention(
                layer, _rms_norm(x, layer["attn_norm"], self.cfg.norm_eps), cos, sin, start, cache, i, mask, linear
            )
            h = _rms_norm(x, layer["ffn_norm"], self.cfg.norm_eps)
            x = x + linear(F.silu(linear(h, layer, "ffn_gate")) * linear(h, layer, "ffn_up"), layer, "ffn_down")
        x = _rms_norm(x, self.out_norm, self.cfg.norm_eps).to(self.head.dtype)
        if linear is _linear:
            return F.linear(x, self.head)
        return torch.ops.mkl._mkl_linear(x, self.head_packed, self.head, None, n_tok)[:real]

    def _packed_linear(self, x: torch.Tensor, layer: dict, name: str) -> torch.Tensor:
        return torch.ops.mkl._mkl_linear(x, layer[f"{name}#packed"], layer[name], None, self.packed_rows)

    def _attention(self, layer, h, cos, sin, start, cache, i, mask, linear):
        cfg, n_tok = self.cfg, h.shape[0]
        q = linear(h, layer, "attn_q").view(n_tok, cfg.n_heads, cfg.head_dim).transpose(0, 1)
        k = linear(h, layer, "attn_k").view(n_tok, cfg.n_kv_heads, cfg.head_dim).transpose(0, 1)
        v = linear(h, layer, "attn_v").view(n_tok, cfg.n_kv_heads, cfg.head_dim).transpose(0, 1)
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        end = start + n_tok
        cache.keys[i, :, start:end] = k
        cache.values[i, :, start:end] = v
        out = F.scaled_dot_product_attention(
            q.unsqueeze(0),
            cache.keys[i, :, :end].unsqueeze(0),
            cache.values[i, :, :end].unsqueeze(0),
            attn_mask=mask,
            enable_gqa=True,
        )
        return linear(out[0].transpose(0, 1).reshape(n_tok, cfg.dim), layer, "attn_output")


def _linear(x: torch.Tensor, layer: dict, name: str) -> torch.Tensor:
    return F.linear(x, layer[name])


def choose_pad_from(short_ms: dict[int, float], packed_ms: float) -> int:
    """The least n for which passes of n..MIN_PACKED_ROWS-1 rows each measured dearer than the packed
    pass; MIN_PACKED_ROWS where none did (nothing short is padded)."""
    dearer = itertools.takewhile(lambda rows: short_ms[rows] > packed_ms, sorted(short_ms, reverse=True))
    return min(dearer, default=MIN_PACKED_ROWS)


def can_pack(device: str, dtype: torch.dtype) -> bool:
    """MKL's packed fp32 gemm is there (x86 CPU builds of torch), for fp32 on the CPU."""
    if device != "cpu" or dtype != torch.float32 or not torch.backends.mkl.is_available():
        return False
    try:
        weight = torch.ones(2, 2)
        packed = torch.ops.mkl._mkl_reorder_linear_weight(weight, MIN_PACKED_ROWS)
        return bool(
            torch.ops.mkl._mkl_linear(torch.ones(MIN_PACKED_ROWS, 2), packed, weight, None, MIN_PACKED_ROWS).eq(2).all()
        )
    except (AttributeError, RuntimeError):
        return False


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def _rope_tables(cfg: LlamaConfig, max_len: int, device: str, dtype: torch.dtype):
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float64) / cfg.head_dim))
    angles = torch.outer(torch.arange(max_len, dtype=torch.float64), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(device, dtype), angles.sin().to(device, dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def _causal_mask(n_tok: int, start: int, device) -> torch.Tensor:
    """Query t (at position start+t) sees keys 0..start+t."""
    return torch.ones(n_tok, start + n_tok, dtype=torch.bool, device=device).tril(start)
