"""Build a (target, drafter, tokenizer) triple from a profile. The only door into torch."""

from __future__ import annotations

import dataclasses
import functools
import gc
from pathlib import Path

import torch

from specmon.backends.gguf_weights import load_gguf_llama
from specmon.backends.hf_folder import DTYPES, load_hf_llama, read_hf_config
from specmon.backends.llama import Llama
from specmon.backends.pair import Pair, check_same_vocab, check_trained_len
from specmon.backends.torch_backend import LayerSkipDrafter, ModelDrafter, TorchTarget
from specmon.engine.drafters import Drafter, NgramDrafter, NoDrafter
from specmon.errors import SpecmonError
from specmon.backends.profiles import DrafterSpec, ModelRef, Profile, resolve_model_path
from specmon.backends.tokenizer import ChatTokenizer, open_gguf, tokenizer_at


def set_threads(threads: int) -> int:
    """CPU threads torch decodes with (0: torch's default); how many that is."""
    if threads:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def load_pair(profile: Profile, drafter_spec: DrafterSpec | None = None) -> Pair:
    """Load the profile's target and drafter; `drafter_spec` overrides the profile's drafter.

    What loading built (modules, tokenizer tables: ~700k objects for the embedded model) lives all
    session, so it is frozen out of the garbage collector: a full collection, once the session's
    events had piled up enough to trigger one, walked it in 100-180 ms inside whichever round it fell on."""
    pair = _load_pair(profile, drafter_spec or profile.drafter)
    gc.collect()
    gc.freeze()
    return pair


def _load_pair(profile: Profile, spec: DrafterSpec) -> Pair:
    if profile.backend == "llamacpp":
        from specmon.backends.llamacpp_loader import load_llamacpp_pair  # llama_cpp only when asked for

        return load_llamacpp_pair(profile, spec, torch.get_num_threads())
    if profile.backend.startswith("exllama"):
        from specmon.backends.gpu_pair import EXL2, EXL3, load_gpu_pair  # it imports the engine only when loading

        return load_gpu_pair(profile, spec, EXL2 if profile.backend == "exllamav2" else EXL3)
    if profile.device.startswith("cuda") and not torch.cuda.is_available():
        raise SpecmonError(
            f'device {profile.device!r} asked for, but this torch has no CUDA device; use device = "cpu"'
        )
    target_path = resolve_model_path(profile.target, profile)
    tokenizer = cached_tokenizer(target_path)
    if spec.kind == "model":  # a draft vocabulary that differs is said before the target's weights load
        draft_path = resolve_model_path(spec.target, profile)
        check_same_vocab(tokenizer, cached_tokenizer(draft_path), draft_path, profile)
    model = _model(profile, profile.target, target_path, profile.packed_rows)  # only the target verifies many rows
    target = TorchTarget(model, profile.target.describe(), tokenizer.eos_id)
    make = functools.partial(build_drafter, profile=profile, target=target, tokenizer=tokenizer)
    return Pair(target, make(spec), tokenizer, make)


def build_drafter(spec: DrafterSpec, profile: Profile, target: TorchTarget, tokenizer: ChatTokenizer) -> Drafter:
    if spec.kind == "none":
        return NoDrafter()
    if spec.kind == "ngram":
        return NgramDrafter(spec.ngram_sizes, target.verify_rows)  # a padded pass's spare rows draft for free
    n_layers = target.model.cfg.n_layers
    if spec.kind == "layerskip" and not 0 < spec.layers < n_layers:
        # a depth that differs from the profile's came from --layers: blame the flag, not the file
        origin = f"profile {profile.source}: drafter.layers" if spec.layers == profile.drafter.layers else "--layers"
        raise SpecmonError(
            f"{origin} = {spec.layers}, but a layer-skip draft of {target.name} needs "
            f"1..{n_layers - 1} layers (the target has {n_layers})"
        )
    if spec.kind == "layerskip":
        return LayerSkipDrafter(target, spec.layers)
    draft_path = resolve_model_path(spec.target, profile)
    check_same_vocab(tokenizer, cached_tokenizer(draft_path), draft_path, profile)
    return ModelDrafter(_model(profile, spec.target, draft_path), name=f"model:{spec.target.describe()}")


def _model(profile: Profile, ref: ModelRef, path: Path, packed_rows: int = 0) -> Llama:
    check_trained_len(profile, path.name, context_length(path))
    cfg, weights = cached_weights(path)
    if ref.layers:
        if not 0 < ref.layers <= cfg.n_layers:
            raise SpecmonError(f"profile {profile.source}: layers = {ref.layers} but {path.name} has {cfg.n_layers}")
        cfg = dataclasses.replace(cfg, n_layers=ref.layers)
    return Llama(
        cfg, weights, DTYPES[profile.dtype], profile.device, profile.max_seq_len, packed_rows, profile.pad_from
    )


@functools.lru_cache(maxsize=4)
def cached_weights(path: Path):
    """A GGUF file, or an unquantised Hugging Face folder."""
    return load_hf_llama(path) if path.is_dir() else load_gguf_llama(path)


@functools.lru_cache(maxsize=4)
def context_length(path: Path) -> int | None:
    """The longest sequence the model was trained for; None when its file does not say."""
    if path.is_dir():
        value = read_hf_config(path).get("max_position_embeddings")
    else:
        field = open_gguf(path).fields.get("llama.context_length")
        value = field.contents() if field is not None else None
    return int(value) if isinstance(value, (int, float)) and value > 0 else None


cached_tokenizer = functools.lru_cache(maxsize=4)(tokenizer_at)
