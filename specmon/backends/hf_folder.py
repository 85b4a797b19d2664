"""Hugging Face model folders (config.json, *.safetensors, tokenizer.json): write one from a GGUF,
read one into the torch backend. ExLlamaV2 loads the same folders, so the embedded SmolLM2 can
run on both backends from one copy of its weights."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from specmon.backends import modelstore
from specmon.backends.gguf_weights import LlamaConfig, load_gguf_llama
from specmon.errors import SpecmonError
from specmon.backends.tokenizer import load_tokenizer

_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def hf_name(key: str) -> str:
    """Our weight key (`blk.3.attn_q`) as a Hugging Face llama tensor name."""
    if key in _TOP_NAMES:
        return f"{_TOP_NAMES[key]}.weight"
    _, layer, part = key.split(".")
    return f"model.layers.{layer}.{_LAYER_NAMES[part]}.weight"


def config_json(cfg: LlamaConfig, eos_id: int, dtype: str) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": cfg.dim,
        "intermediate_size": cfg.ffn_dim,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim,
        "vocab_size": cfg.vocab_size,
        "rms_norm_eps": cfg.norm_eps,
        "rope_theta": cfg.rope_theta,
        "max_position_embeddings": 8192,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "eos_token_id": eos_id,
        "torch_dtype": dtype,
    }


def export_hf_folder(gguf_path: Path, out: Path, layers: int = 0, dtype: str = "float16") -> Path:
    """Write a GGUF llama (optionally its first `layers` layers) as a Hugging Face folder, atomically."""
    cfg, weights = load_gguf_llama(gguf_path)
    if layers:
        if not 0 < layers <= cfg.n_layers:
            raise SpecmonError(f"--layers {layers}: {gguf_path.name} has {cfg.n_layers} layers")
        cfg = dataclasses.replace(cfg, n_layers=layers)
        weights = {k: v for k, v in weights.items() if not k.startswith("blk.") or int(k.split(".")[1]) < layers}
    tokenizer = load_tokenizer(gguf_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.") as tmp:  # gone if writing fails
        staged = Path(tmp) / out.name
        staged.mkdir()
        tensors = {hf_name(k): v.to(DTYPES[dtype]).clone() for k, v in weights.items()}  # tied head: own copy
        save_file(tensors, str(staged / "model.safetensors"), metadata={"format": "pt"})
        (staged / "config.json").write_text(json.dumps(config_json(cfg, tokenizer.eos_id, dtype), indent=2))
        tokenizer.tokenizer.save(str(staged / "tokenizer.json"))
        eos = tokenizer.tokenizer.id_to_token(tokenizer.eos_id)
        (staged / "tokenizer_config.json").write_text(
            json.dumps({"chat_template": tokenizer.chat_template, "eos_token": eos}, indent=2)
        )
        if out.exists():
            shutil.rmtree(out)
        os.replace(staged, out)
    return out


def folder_for_gguf(gguf_path: Path, layers: int = 0) -> Path:
    """A Hugging Face copy of a GGUF (first `layers` layers), written once into the model cache."""
    stat = gguf_path.stat()
    stamp = hashlib.sha256(f"{gguf_path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:10]
    folder = modelstore.cache_dir() / "hf" / f"{gguf_path.stem}{f'-{layers}l' if layers else ''}-{stamp}"
    if not (folder / "config.json").exists():
        export_hf_folder(gguf_path, folder, layers)
    return folder


def read_hf_config(folder: Path) -> dict:
    try:
        return json.loads((folder / "config.json").read_text())
    except OSError:
        raise SpecmonError(f"{folder}: no config.json; expected a Hugging Face, EXL2 or EXL3 model folder") from None
    except ValueError as exc:
        raise SpecmonError(f"{folder}/config.json: not valid JSON ({exc})") from None


def folder_format(folder: Path) -> str:
    """ "hf" (unquantised), "exl2", "exl3", or another quant_method a config names."""
    quant = read_hf_config(folder).get("quantization_config")
    method = quant.get("quant_method") if isinstance(quant, dict) else None
    if method:
        return str(method).lower()
    return "exl2" if quant is not None or (folder / "measurement.json").exists() else "hf"


def wrong_format(where: str, kind: str) -> SpecmonError:
    """A folder this backend does not load, and the backend that does."""
    engine = {"exl2": "exllamav2", "exl3": "exllamav3"}.get(kind)
    use = f'run it with backend = "{engine}"' if engine else "specmon runs unquantised, EXL2 and EXL3 folders"
    return SpecmonError(f"{where}: a quantised ({kind.upper()}) folder; {use}")


def load_hf_llama(folder: Path) -> tuple[LlamaConfig, dict[str, torch.Tensor]]:
    """An unquantised llama folder's weights as float32, keyed like `load_gguf_llama`'s."""
    raw = read_hf_config(folder)
    if raw.get("model_type") != "llama":
        raise SpecmonError(f"{folder}: model_type {raw.get('model_type')!r}; the torch backend runs llama models")
    kind = folder_format(folder)
    if kind != "hf":
        raise wrong_format(str(folder), kind)
    cfg = LlamaConfig(
        n_layers=raw["num_hidden_layers"],
        dim=raw["hidden_size"],
        ffn_dim=raw["intermediate_size"],
        n_heads=raw["num_attention_heads"],
        n_kv_heads=raw.get("num_key_value_heads", raw["num_attention_heads"]),
        vocab_size=raw["vocab_size"],
        rope_theta=float(raw.get("rope_theta", 10000.0)),
        norm_eps=float(raw.get("rms_norm_eps", 1e-5)),
    )
    layers = (f"blk.{i}.{part}" for i in range(cfg.n_layers) for part in _LAYER_NAMES)
    ours = {hf_name(key): key for key in [*_TOP_NAMES, *layers]}  # tensors the torch backend does not use are left
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise SpecmonError(f"{folder}: no *.safetensors files")
    weights = {ours[name]: t.float() for file in files for name, t in load_file(str(file)).items() if name in ours}
    weights.setdefault("output", weights["token_embd"])  # tie_word_embeddings
    return cfg, weights
