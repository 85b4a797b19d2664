"""Load a llama.cpp target/draft pair from a profile: the only module that imports llama_cpp.

llama-cpp-python is used through its low-level API only (llama.h as ctypes): one context per
model, batch decode with logits for the positions asked for, and `llama_memory_seq_rm` to roll
the KV memory back by length. Its high-level `Llama` class samples and caches on its own terms,
which would hide the round.
"""

from __future__ import annotations

import functools
import logging
import weakref
from pathlib import Path
from typing import Sequence

import numpy as np

from specmon.backends.llamacpp import LlamaCppDrafter, LlamaCppTarget
from specmon.backends.pair import Pair, check_same_vocab, check_trained_len, simple_drafter
from specmon.backends.profiles import DrafterSpec, ModelRef, Profile, resolve_model_path
from specmon.backends.tokenizer import ChatTokenizer, load_tokenizer
from specmon.engine.drafters import Drafter
from specmon.errors import SpecmonError

SEQ = 0  # specmon decodes one sequence per context
BATCH = 512  # tokens per llama_decode call; a longer prefill is split, a verify (k+1 <= 65) never is
INSTALL = (
    "pip install 'specmon[llamacpp]' (builds llama.cpp from source: needs cmake and a C++ "
    "compiler, and takes minutes; in a checkout, bash scripts/setup-llamacpp builds it for this CPU)"
)
PROBE = "Héllo wörld 12345, <|im_start|>user\n  tabs\tand spaces; 東京 🙂<|im_end|>"


@functools.cache  # one backend start per process
def import_llama_cpp():
    """The binding, on first use; quiet unless llama.cpp reports an error."""
    try:
        import llama_cpp
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] == "llama_cpp":
            raise SpecmonError(f"llama-cpp-python is not installed: {INSTALL}") from None
        raise SpecmonError(f"llama-cpp-python needs the {exc.name} package: pip install {exc.name}") from None
    except (OSError, RuntimeError) as exc:  # the shared library failed to load
        raise SpecmonError(
            f"llama-cpp-python is installed but its library does not load ({exc}); "
            "reinstall it with: pip install --force-reinstall --no-cache-dir llama-cpp-python"
        ) from None
    logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)
    llama_cpp.llama_backend_init()
    return llama_cpp


@functools.lru_cache(maxsize=4)  # read once per process: each model load and bench prompt asks
def cpu_has_amx(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """The CPU has AMX tiles, so a native build repacks weights for ggml's AMX kernels: on such CPUs
    a verify pass (a batch of k+1 positions) crashed the process in them, on Q4_1 SmolLM2."""
    try:
        with cpuinfo.open() as lines:
            return any(line.startswith("flags") and "amx_int8" in line.split() for line in lines)
    except OSError:
        return False


def use_extra_bufts(lib) -> bool:
    """llama.cpp's extra buffer types (weights repacked for batched matmul) unless they would be its AMX
    kernels (a native build on an AMX CPU): a build without AMX (scripts/setup-llamacpp) keeps the CPU repacks."""
    return not (cpu_has_amx() and "AMX_INT8 = 1" in lib.llama_print_system_info().decode(errors="replace"))


class LlamaCppModel:
    """Weights loaded once (memory-mapped), shared by every context made on them."""

    def __init__(self, lib, path: Path):
        self.lib, self.path = lib, path
        params = lib.llama_model_default_params()
        params.n_gpu_layers = 0
        params.use_extra_bufts = use_extra_bufts(lib)  # ggml's AMX matmul crashes on batches (llama.cpp#20824)
        self.ptr = lib.llama_model_load_from_file(str(path).encode(), params)
        if not self.ptr:
            raise SpecmonError(f"{path}: llama.cpp could not load this GGUF (see its error above)")
        weakref.finalize(self, lib.llama_model_free, self.ptr)
        self.vocab = lib.llama_model_get_vocab(self.ptr)
        self.n_vocab = lib.llama_vocab_n_tokens(self.vocab)
        self.n_layer = lib.llama_model_n_layer(self.ptr)
        self.n_ctx_train = lib.llama_model_n_ctx_train(self.ptr)
        head_dim = lib.llama_model_n_embd(self.ptr) // lib.llama_model_n_head(self.ptr)
        self.kv_row = head_dim * lib.llama_model_n_head_kv(self.ptr)  # keys (or values) per position per layer

    def tokenize(self, text: str) -> list[int]:
        """llama.cpp's own tokenizer, special tokens parsed, no BOS: to check specmon's against."""
        raw = text.encode()
        room = len(raw) + 8
        out = (self.lib.llama_token * room)()
        n = self.lib.llama_tokenize(self.vocab, raw, len(raw), out, room, False, True)
        return list(out[:n])


class LlamaCppContext:
    """One context on a model: KV memory for sequence 0 and a reusable batch (the Context protocol)."""

    def __init__(self, model: LlamaCppModel, n_ctx: int, n_threads: int):
        lib = self.lib = model.lib
        self.model = model  # keeps the weights alive as long as the context
        params = lib.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = n_ctx, BATCH, BATCH
        params.n_seq_max = 1
        params.n_threads = params.n_threads_batch = n_threads
        params.no_perf = True
        self.ptr = lib.llama_init_from_model(model.ptr, params)
        if not self.ptr:
            raise SpecmonError(f"{model.path}: llama.cpp could not make a context of {n_ctx} positions")
        self.batch = lib.llama_batch_init(BATCH, 0, 1)
        weakref.finalize(self, lib.llama_free, self.ptr)
        weakref.finalize(self, lib.llama_batch_free, self.batch)
        self.memory = lib.llama_get_memory(self.ptr)
        self.n_ctx = lib.llama_n_ctx(self.ptr)

    def decode(self, tokens: Sequence[int], start: int, logits: str) -> np.ndarray | None:
        batch = self.batch
        for offset in range(0, len(tokens), BATCH):  # only the last batch's logits are asked for
            chunk = tokens[offset : offset + BATCH]
            want = logits if offset + BATCH >= len(tokens) else "none"
            batch.n_tokens = n = len(chunk)
            for i, token in enumerate(chunk):
                batch.token[i], batch.pos[i] = token, start + offset + i
                batch.n_seq_id[i], batch.seq_id[i][0] = 1, SEQ
                batch.logits[i] = want == "all" or (want == "last" and i == n - 1)
            status = self.lib.llama_decode(self.ptr, batch)
            if status != 0:
                raise RuntimeError(f"llama_decode returned {status} writing {n} tokens at position {start + offset}")
        if logits == "none" or not tokens:
            return None
        n_out = n if logits == "all" else 1
        array = np.ctypeslib.as_array(self.lib.llama_get_logits(self.ptr), shape=(n_out * self.model.n_vocab,))
        return array.reshape(n_out, self.model.n_vocab).copy()

    def keep(self, length: int) -> None:
        self.lib.llama_memory_seq_rm(self.memory, SEQ, length, -1)

    def cache_bytes(self) -> int:
        return 2 * self.model.n_layer * self.n_ctx * self.model.kv_row * 2  # keys and values, f16


def load_llamacpp_pair(profile: Profile, spec: DrafterSpec, n_threads: int) -> Pair:
    target_path = gguf_path(profile.target, profile)
    tokenizer = load_tokenizer(target_path)
    if simple_drafter(spec, profile, "llamacpp", "a draft GGUF") is None:  # layerskip refused before anything loads
        gguf_path(spec.target, profile)  # a draft model's file checked before either model loads
    lib = import_llama_cpp()

    @functools.cache  # weights loaded once, shared by the target's and a draft's contexts
    def model(path: Path) -> LlamaCppModel:
        loaded = LlamaCppModel(lib, path)
        check_model(loaded, tokenizer, profile)
        return loaded

    context = LlamaCppContext(model(target_path), profile.max_seq_len, n_threads)
    target = LlamaCppTarget(context, f"{profile.target.describe()} (llama.cpp)", tokenizer.eos_id, tokenizer.vocab_size)
    drafters: dict[Path, LlamaCppDrafter] = {}

    def make(other: DrafterSpec) -> Drafter:
        """The profile's drafter, or another one on the same target (sweeps)."""
        if other.kind != "model":
            return simple_drafter(other, profile, "llamacpp", "a draft GGUF")
        path = gguf_path(other.target, profile)
        if path not in drafters:
            check_same_vocab(tokenizer, load_tokenizer(path), path, profile)
            draft = LlamaCppContext(model(path), profile.max_seq_len, n_threads)
            drafters[path] = LlamaCppDrafter(draft, f"model:{other.target.describe()}", tokenizer.vocab_size)
        return drafters[path]

    return Pair(target, make(spec), tokenizer, make)


def gguf_path(ref: ModelRef, profile: Profile) -> Path:
    path = resolve_model_path(ref, profile)
    if path.is_dir() or path.suffix != ".gguf":
        raise SpecmonError(f'profile {profile.source}: backend = "llamacpp" loads .gguf files; {path} is not one')
    if ref.layers:
        raise SpecmonError(
            f"profile {profile.source}: `layers` (a cut model) runs on the torch backend only; "
            "with llamacpp point the draft at a smaller GGUF of the same family"
        )
    return path


def check_model(model: LlamaCppModel, tokenizer: ChatTokenizer, profile: Profile) -> None:
    """The KV memory fits the trained context, and llama.cpp's tokenizer gives specmon's ids."""
    check_trained_len(profile, model.path.name, model.n_ctx_train)
    if model.n_vocab != tokenizer.vocab_size:
        raise SpecmonError(
            f"{model.path.name}: llama.cpp sees {model.n_vocab} tokens, specmon's tokenizer "
            f"{tokenizer.vocab_size}; this GGUF's vocabulary is not supported"
        )
    if model.tokenize(PROBE) != tokenizer.encode(PROBE):
        raise SpecmonError(
            f"{model.path.name}: llama.cpp and specmon tokenize this GGUF differently; use the torch backend for it"
        )
