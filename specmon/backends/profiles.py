"""Model-pair profiles: which backend, target, drafter, dtype and device a run uses (TOML)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

import msgspec

from specmon.data import resolve
from specmon.engine.draft_len import check_draft_len
from specmon.errors import SpecmonError
from specmon.events.schema import Sampling

DEFAULT_PROFILE = "smollm2-cpu"


class ModelRef(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """An embedded model by name, or a local file/folder by path (relative to the profile)."""

    model: str = ""
    path: str = ""
    layers: int = 0  # keep only the first N layers (0 keeps all); makes a small draft model

    def describe(self) -> str:
        text = self.model or self.path
        return f"{text}[:{self.layers}]" if self.layers else text


class DrafterSpec(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    kind: Literal["ngram", "layerskip", "model", "none"] = "ngram"
    draft_len: int = 4
    ngram_sizes: list[int] = msgspec.field(default_factory=lambda: [3, 2])
    layers: int = 4  # layerskip: how many of the target's layers the draft runs
    target: ModelRef | None = None  # kind = "model": the separate draft model


class SamplingSpec(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """TOML form of the sampling settings (the event form is a compact array)."""

    temperature: float = 0.0  # 0 is greedy
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0

    def to_event(self) -> Sampling:
        return Sampling(self.temperature, self.top_p, self.top_k, self.seed)


class Profile(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    name: str
    target: ModelRef
    backend: Literal["torch", "exllamav2"] = "torch"
    device: str = "cpu"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    max_seq_len: int = 2048
    max_new_tokens: int = 96
    near_tie_margin: float = -1.0  # below this logit gap a divergence is a near-tie; -1 picks by dtype
    drafter: DrafterSpec = DrafterSpec()
    sampling: SamplingSpec = SamplingSpec()
    source: str = ""  # where it was read from (filled in by load_profile)
    text: str = ""

    @property
    def tie_margin(self) -> float:
        """fp32 kernels agree to ~1e-5; bf16 one- vs multi-token kernels round apart by ~0.3."""
        if self.near_tie_margin >= 0:
            return self.near_tie_margin
        return 1e-4 if self.dtype == "float32" else 0.5


def profile_path(name_or_path: str) -> Path:
    """A path, or a profile name: from the working directory first, then the shipped profiles."""
    return resolve("profiles", name_or_path)


def load_profile(name_or_path: str = DEFAULT_PROFILE) -> Profile:
    """Read and check a profile; every problem is one SpecmonError line naming the file."""
    path = profile_path(name_or_path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecmonError(f"profile {path}: cannot read it ({exc.strerror})") from None
    try:
        raw = tomllib.loads(text)
        profile = msgspec.convert(raw, Profile)
    except tomllib.TOMLDecodeError as exc:
        raise SpecmonError(f"profile {path}: invalid TOML ({exc})") from None
    except msgspec.ValidationError as exc:
        raise SpecmonError(f"profile {path}: {exc}") from None
    _check(profile, path)
    return msgspec.structs.replace(profile, source=str(path), text=text)


def _check(profile: Profile, path: Path) -> None:
    spec = profile.drafter
    check_draft_len(spec.draft_len, f"profile {path}: drafter.draft_len")
    if spec.kind == "model" and spec.target is None:
        raise SpecmonError(f"profile {path}: drafter.kind = \"model\" needs a [drafter.target] table")
    if not (profile.target.model or profile.target.path):
        raise SpecmonError(f"profile {path}: [target] needs `model` (embedded name) or `path`")
    if profile.backend == "exllamav2" and not profile.device.startswith("cuda"):
        raise SpecmonError(f"profile {path}: backend = \"exllamav2\" runs on an NVIDIA GPU; set device = \"cuda\"")
    if profile.sampling.temperature < 0 or not 0 < profile.sampling.top_p <= 1:
        raise SpecmonError(f"profile {path}: sampling needs temperature >= 0 and 0 < top_p <= 1")


def resolve_model_path(ref: ModelRef, profile: Profile) -> Path:
    """Local path of a model reference; embedded names come from the model store."""
    from specmon.backends import modelstore

    if ref.model:
        return modelstore.resolve(ref.model)
    path = Path(ref.path).expanduser()
    if not path.is_absolute() and profile.source:
        path = Path(profile.source).parent / path
    if not path.exists():
        raise SpecmonError(f"profile {profile.source}: model file {path} does not exist")
    return path
