"""Load an ExLlamaV2 or ExLlamaV3 target/draft pair: every check first, then one engine's loading.

Every check a user can fail (CUDA, folders, their format, vocabularies, the extension build, VRAM)
is made before anything large is loaded, in that order, each one a single SpecmonError line. What differs
per engine is a `GpuEngine`; this is the only module that imports an engine.
"""

from __future__ import annotations

import importlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from specmon.backends.exllama import Exl2Runner, Exl3Runner, KvDrafter, KvTarget, Runner
from specmon.backends.hf_folder import folder_for_gguf, folder_format, read_hf_config, wrong_format
from specmon.backends.pair import Pair, check_same_vocab, simple_drafter
from specmon.backends.profiles import DrafterSpec, ModelRef, Profile, resolve_model_path
from specmon.backends.tokenizer import ChatTokenizer, load_hf_tokenizer
from specmon.engine.drafters import Drafter
from specmon.errors import SpecmonError

GIB = 2**30
RESERVE_BYTES = 512 * 2**20  # activations, logits and the engine's own scratch space


@dataclass(frozen=True)
class GpuEngine:
    backend: str  # the profile's `backend` and the package imported
    install: str  # how to get the package
    formats: tuple[str, ...]  # folder formats it loads (hf_folder.folder_format)
    load: Callable[[object, Path, int], Runner]  # (package, folder, max_seq_len) -> a loaded model's Runner


EXL2 = GpuEngine("exllamav2", "pip install 'specmon[gpu]'", ("hf", "exl2"), Exl2Runner.load)
EXL3 = GpuEngine("exllamav3", "pip install 'specmon[exl3]'", ("hf", "exl3"), Exl3Runner.load)


def load_gpu_pair(profile: Profile, spec: DrafterSpec, engine: GpuEngine) -> Pair:
    require_cuda(engine.backend)  # first: without a GPU no other fix helps (nor a model download)
    target_dir = model_folder(profile.target, profile, engine)
    tokenizer = load_hf_tokenizer(target_dir)
    draft_dir = draft_folder(spec, profile, tokenizer, engine)
    package = import_engine(engine)  # after the folders: the import may compile for minutes
    folders = [target_dir] + ([draft_dir] if draft_dir else [])
    count = torch.cuda.device_count()  # both engines split layers over every visible GPU
    free, total = (sum(got) for got in zip(*(torch.cuda.mem_get_info(i) for i in range(count))))
    name = torch.cuda.get_device_name(0)
    check_fits(folders, profile.max_seq_len, free, total, name if count == 1 else f"{count} GPUs ({name}, ...)")
    vocab = min([tokenizer.vocab_size] + [read_hf_config(f).get("vocab_size", tokenizer.vocab_size) for f in folders])
    runner, size = _loaded(engine, package, target_dir, profile.max_seq_len)
    target = KvTarget(runner, profile.target.describe(), tokenizer.eos_id, vocab, cache_bytes=size)
    loaded: dict[Path, KvDrafter] = {}

    def make(other: DrafterSpec) -> Drafter:
        """The profile's drafter, or another one on the same target (sweeps)."""
        if other.kind != "model":
            return simple_drafter(other, profile, engine.backend, "a draft folder")
        folder = draft_folder(other, profile, tokenizer, engine)
        if folder not in loaded:
            runner, size = _loaded(engine, package, folder, profile.max_seq_len)
            loaded[folder] = KvDrafter(runner, f"model:{other.target.describe()}", vocab, cache_bytes=size)
        return loaded[folder]

    return Pair(target, make(spec), tokenizer, make)


def _loaded(engine: GpuEngine, package, folder: Path, max_seq_len: int) -> tuple[Runner, int]:
    """The folder's model and cache, loaded, and the cache's size in bytes."""
    try:
        return engine.load(package, folder, max_seq_len), cache_bytes(read_hf_config(folder), max_seq_len)
    except (torch.cuda.OutOfMemoryError, RuntimeError) as exc:
        # both engines' autosplit catch CUDA's out-of-memory and try the next GPU; past the last one
        # they raise RuntimeError("Insufficient VRAM ...")
        if not isinstance(exc, torch.cuda.OutOfMemoryError) and "Insufficient VRAM" not in str(exc):
            raise
        raise SpecmonError(f"{folder.name}: ran out of VRAM while loading; lower max_seq_len") from None


def model_folder(ref: ModelRef, profile: Profile, engine: GpuEngine) -> Path:
    """The engines load folders; a GGUF (the embedded model) is written out as an FP16 one once."""
    path = resolve_model_path(ref, profile)
    if path.suffix == ".gguf":
        return folder_for_gguf(path, ref.layers)
    if ref.layers:
        raise SpecmonError(
            f"profile {profile.source}: `layers` cuts a GGUF model; for a folder, "
            "point the draft at a smaller model of the same family"
        )
    if not path.is_dir():
        raise SpecmonError(f"profile {profile.source}: {path} is neither a model folder nor a .gguf file")
    kind = folder_format(path)
    if kind not in engine.formats:
        raise wrong_format(f"profile {profile.source}: {path.name}", kind)
    return path


def draft_folder(spec: DrafterSpec, profile: Profile, tokenizer: ChatTokenizer, engine: GpuEngine) -> Path | None:
    """The draft model's folder, checked to share the target's vocabulary."""
    if simple_drafter(spec, profile, engine.backend, "a draft folder") is not None:  # refuses layerskip first
        return None
    folder = model_folder(spec.target, profile, engine)
    check_same_vocab(tokenizer, load_hf_tokenizer(folder), folder, profile)
    return folder


def require_cuda(backend: str, torch_cuda: str | None = torch.version.cuda, devices: int | None = None) -> None:
    """Refuse a torch without CUDA, or one that sees no device, before anything loads."""
    if torch_cuda is None:
        problem = (
            f"this torch ({torch.__version__}) is a CPU build; install a CUDA one, e.g. "
            "pip install torch --index-url https://download.pytorch.org/whl/cu128"
        )
    elif (torch.cuda.device_count() if devices is None else devices) == 0:
        problem = "torch sees no CUDA device (check nvidia-smi and CUDA_VISIBLE_DEVICES)"
    else:
        return
    raise SpecmonError(f"backend {backend} needs an NVIDIA GPU: {problem}")


def build_failure(package: str, exc: BaseException, torch_cuda: str | None, which=shutil.which, env=os.environ) -> str:
    """What stopped an engine's JIT extension build, named by the missing tool where we can tell."""
    missing = []
    if torch_cuda is None:
        missing.append("a CUDA build of torch")
    if not which("nvcc") and not env.get("CUDA_HOME"):
        missing.append("nvcc (install the CUDA toolkit matching torch's CUDA, or set CUDA_HOME)")
    if not which("ninja"):
        missing.append("ninja (pip install ninja)")
    if missing:
        return f"{package}'s CUDA extension cannot be built: missing " + "; ".join(missing)
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    detail = (errors or lines or [type(exc).__name__])[0][:200]
    return f"{package}'s CUDA extension failed to build or load: {detail}"


def import_engine(engine: GpuEngine):
    """Import on first use: the import compiles the extension (minutes, once per machine)."""
    try:
        return importlib.import_module(engine.backend)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] == engine.backend:
            raise SpecmonError(f"{engine.backend} is not installed: {engine.install}") from None
        raise SpecmonError(f"{engine.backend} needs the {exc.name} package: pip install {exc.name}") from None
    except Exception as exc:  # the JIT build raises RuntimeError, OSError or subprocess errors
        raise SpecmonError(build_failure(engine.backend, exc, torch.version.cuda)) from None


def cache_bytes(config: dict, max_seq_len: int) -> int:
    """Keys and values in fp16 for every layer and position (both engines' unquantised caches)."""
    heads = config.get("num_attention_heads", 1)
    head_dim = config.get("head_dim") or config.get("hidden_size", 0) // heads
    kv_heads = config.get("num_key_value_heads", heads)
    return 2 * config.get("num_hidden_layers", 0) * kv_heads * head_dim * max_seq_len * 2


def check_fits(folders: list[Path], max_seq_len: int, free: int, total: int, gpu: str) -> None:
    """Refuse before loading when weights plus caches cannot fit in the free VRAM."""
    weights = sum(f.stat().st_size for folder in folders for f in folder.glob("*.safetensors"))
    caches = sum(cache_bytes(read_hf_config(f), max_seq_len) for f in folders)
    needed = weights + caches + RESERVE_BYTES
    if needed > free:
        names = " + ".join(f.name for f in folders)
        raise SpecmonError(
            f"{names} need about {needed / GIB:.1f} GiB of VRAM (weights {weights / GIB:.1f}, caches "
            f"{caches / GIB:.1f} at max_seq_len {max_seq_len}) but {free / GIB:.1f} of {total / GIB:.1f} GiB "
            f"is free on {gpu}; lower max_seq_len or pick a smaller quantisation"
        )
