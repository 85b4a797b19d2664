"""What each stored figure depends on, as a memory store's key (memory.store): change any of it and the
store is not read."""

from __future__ import annotations

from specmon.backends.profiles import DrafterSpec, ModelRef, Profile, resolve_model_path
from specmon.errors import SpecmonError


def model_identity(ref: ModelRef, profile: Profile) -> str:
    """An embedded model by name (its file is pinned by hash); a file by its path, size and mtime."""
    if ref.model:
        return ref.describe()
    try:
        path = resolve_model_path(ref, profile).resolve()
        stat = path.stat()
    except (OSError, SpecmonError):
        return ref.describe()
    return f"{path}:{stat.st_size}:{stat.st_mtime_ns}:{ref.layers}"


def engine_key(profile: Profile, drafter_name: str, spec: DrafterSpec | None = None) -> dict[str, str]:
    """The engine, its models and its drafter's settings (`spec`: the command line's drafter, over the profile's)."""
    d = spec or profile.drafter
    return {
        "backend": profile.backend,
        "device": profile.device,
        "dtype": profile.dtype,
        "packed_rows": str(profile.packed_rows),
        "target": model_identity(profile.target, profile),
        "drafter": drafter_name,
        "draft": model_identity(d.target, profile) if d.kind == "model" else "",
        "ngram_sizes": ",".join(map(str, d.ngram_sizes)) if d.kind == "ngram" else "",
    }
