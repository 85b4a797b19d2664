"""Model-pair profiles: which backend, target, drafter, dtype and device a run uses (TOML)."""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path
from typing import Annotated, Literal

import msgspec

from specmon.backends import modelstore
from specmon.data import resolve
from specmon.engine.draft_len import check_draft_len
from specmon.errors import SpecmonError
from specmon.textfile import read_user_text
from specmon.events.schema import Sampling

DEFAULT_PROFILE = "smollm2-cpu"
MAX_INT = 2**31 - 1  # counts beyond this are typos, and would not fit every reader
MAX_SEED = 2**63 - 1  # numpy and the log's msgpack both take 0..2**63-1
DEVICE = re.compile(r"cpu|cuda(:\d+)?|mps")  # what the torch backend can be asked for
Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_INT)]
Positive = Annotated[int, msgspec.Meta(ge=1, le=MAX_INT)]
NgramSize = Annotated[int, msgspec.Meta(ge=1, le=64)]


class ModelRef(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """An embedded model by name, or a local file/folder by path (relative to the profile)."""

    model: str = ""
    path: str = ""
    layers: Count = 0  # keep only the first N layers (0 keeps all); makes a small draft model

    def describe(self) -> str:
        text = self.model or self.path
        return f"{text}[:{self.layers}]" if self.layers else text


class DrafterSpec(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    kind: Literal["ngram", "layerskip", "model", "none"] = "ngram"
    draft_len: int = 4
    ngram_sizes: Annotated[list[NgramSize], msgspec.Meta(min_length=1)] = msgspec.field(default_factory=lambda: [3, 2])
    layers: Positive = 4  # layerskip: how many of the target's layers the draft runs
    target: ModelRef | None = None  # kind = "model": the separate draft model


class SamplingSpec(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """TOML form of the sampling settings (the event form is a compact array)."""

    temperature: float = 0.0  # 0 is greedy
    top_p: float = 1.0
    top_k: Count = 0  # 0: no top-k cut
    seed: Annotated[int, msgspec.Meta(ge=0, le=MAX_SEED)] = 0

    def to_event(self) -> Sampling:
        return Sampling(self.temperature, self.top_p, self.top_k, self.seed)


class Profile(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    name: str
    target: ModelRef
    backend: Literal["torch", "exllamav2", "exllamav3", "llamacpp"] = "torch"
    device: str = "cpu"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    max_seq_len: Positive = 2048
    max_new_tokens: Positive = 96
    near_tie_margin: float = -1.0  # below this logit gap a divergence is a near-tie; -1 picks by dtype
    # torch, CPU fp32: verify passes padded to this many rows, with packed weights
    packed_rows: Annotated[int, msgspec.Meta(ge=0, le=64)] = 0
    pad_from: Annotated[int, msgspec.Meta(ge=0, le=4)] = 0  # fewest positions padded to packed_rows; 0: measured
    # a policy's round costs: a pass over T = 1, 2, ... positions in plain steps (1.0 first); empty: timed at load
    verify_costs: list[float] = []
    # with verify_costs and a drafter that runs a model: its cost per draft token, in the same plain steps
    draft_cost: float = -1.0
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


def load_profile(name_or_path: str = DEFAULT_PROFILE) -> Profile:
    """Read and check a profile; every problem is one SpecmonError line naming the file (and the
    line, where the problem is a key's value)."""
    path = resolve("profiles", name_or_path)  # a path, or a name: the working directory's, then a shipped one
    text = read_user_text(path, "profile")
    try:
        profile = msgspec.convert(tomllib.loads(text), Profile)
    except tomllib.TOMLDecodeError as exc:
        raise SpecmonError(f"profile {path}: invalid TOML ({exc})") from None
    except RecursionError:
        raise SpecmonError(f"profile {path}: invalid TOML (nested too deeply)") from None
    except msgspec.ValidationError as exc:
        reason, _, where = str(exc).partition(" - at `$.")
        key, reason = where.rstrip("`"), reason[:1].lower() + reason[1:]
        raise SpecmonError(f"profile {path}{_line_of(text, key)}: {key + ': ' if key else ''}{reason}") from None
    _check(profile, path, text)
    return msgspec.structs.replace(profile, source=str(path), text=text)


def _line_of(text: str, key: str) -> str:
    """`, line N` where dotted `key` (e.g. sampling.top_k, drafter.ngram_sizes[0]) is set; else ""."""
    *tables, name = re.sub(r"\[\d+\]", "", key).split(".") if key else [""]
    table = ""
    for number, line in enumerate(text.splitlines(), 1):
        header = re.match(r"\s*\[([^\[\]]+)\]", line)
        if header:
            table = header.group(1).strip()
        elif re.match(rf"\s*{re.escape(name)}\s*=", line) and table == ".".join(tables):
            return f", line {number}"
    return ""


def _check(profile: Profile, path: Path, text: str) -> None:
    spec = profile.drafter

    def fail(key: str, reason: str):
        raise SpecmonError(f"profile {path}{_line_of(text, key)}: {key}: {reason}")

    check_draft_len(spec.draft_len, f"profile {path}{_line_of(text, 'drafter.draft_len')}: drafter.draft_len")
    if spec.kind == "model" and spec.target is None:
        raise SpecmonError(f'profile {path}: drafter.kind = "model" needs a [drafter.target] table')
    if not (profile.target.model or profile.target.path):
        raise SpecmonError(f"profile {path}: [target] needs `model` (embedded name) or `path`")
    if not DEVICE.fullmatch(profile.device):
        fail("device", f'{profile.device!r} is not a device; use "cpu", "cuda", "cuda:N" or "mps"')
    if profile.backend.startswith("exllama") and not profile.device.startswith("cuda"):
        raise SpecmonError(f'profile {path}: backend = "{profile.backend}" runs on an NVIDIA GPU; set device = "cuda"')
    if profile.backend == "llamacpp" and profile.device != "cpu":
        fail("device", 'backend = "llamacpp" runs llama.cpp\'s CPU build; set device = "cpu"')
    sampling = profile.sampling
    if not (math.isfinite(sampling.temperature) and sampling.temperature >= 0):
        fail("sampling.temperature", f"must be a finite number >= 0 (0 is greedy), not {sampling.temperature}")
    if not (math.isfinite(sampling.top_p) and 0 < sampling.top_p <= 1):
        fail("sampling.top_p", f"must be > 0 and <= 1, not {sampling.top_p}")
    if profile.pad_from == 1:
        fail(
            "pad_from", "must be 0 (measured at load) or 2-4 (passes of that many positions or more are padded), not 1"
        )
    costs = profile.verify_costs
    if costs and (costs[0] != 1.0 or len(costs) < 2 or not all(math.isfinite(c) and c > 0 for c in costs)):
        fail(
            "verify_costs",
            "must be plain steps for T = 1, 2, ... positions, starting at 1.0, each > 0 "
            f"(or empty: timed at load), not {costs}",
        )
    if costs and spec.kind in ("model", "layerskip") and profile.draft_cost < 0:
        fail(
            "verify_costs",
            f'pins the target\'s costs, but drafter.kind = "{spec.kind}" runs a model whose drafts cost time too: '
            "add draft_cost (plain steps per draft token), or remove verify_costs to time both at load",
        )
    if not (profile.draft_cost == -1.0 or (math.isfinite(profile.draft_cost) and profile.draft_cost >= 0)):
        fail("draft_cost", f"must be plain steps per draft token, >= 0, not {profile.draft_cost}")
    if not math.isfinite(profile.near_tie_margin):
        fail("near_tie_margin", f"must be a finite number (-1 picks by dtype), not {profile.near_tie_margin}")


def resolve_model_path(ref: ModelRef, profile: Profile) -> Path:
    """Local path of a model reference; embedded names come from the model store."""
    if ref.model:
        return modelstore.resolve(ref.model)
    path = Path(ref.path).expanduser()
    if not path.is_absolute() and profile.source:
        path = Path(profile.source).parent / path
    if not path.exists():
        raise SpecmonError(f"profile {profile.source}: model file {path} does not exist")
    return path


def overrides(args, profile: Profile) -> tuple[Sampling, DrafterSpec]:
    """The profile's sampling and drafter with the command line's flags (None where not given) over them;
    a drafter the profile cannot build is refused here, before anything loads."""
    given = {name: getattr(args, name) for name in Sampling.__struct_fields__ if getattr(args, name) is not None}
    sampling = msgspec.structs.replace(profile.sampling.to_event(), **given)
    d = profile.drafter
    spec = msgspec.structs.replace(
        d,
        kind=args.drafter or d.kind,
        draft_len=d.draft_len if args.draft_len is None else check_draft_len(args.draft_len, "--draft-len"),
        layers=d.layers if args.layers is None else args.layers,  # the flag's range is checked when parsed
    )
    check_model_drafter(spec, profile)
    return sampling, spec


def check_model_drafter(spec: DrafterSpec, profile: Profile) -> None:
    if spec.kind == "model" and spec.target is None:
        raise SpecmonError(
            f"--drafter model: profile {profile.source} names no draft model; add a [drafter.target] "
            "table (model = NAME or path = FILE) or pick another drafter"
        )
