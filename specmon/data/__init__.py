"""Files that ship inside the package: the model-pair profiles and the default policy.

A name without a path (`smollm2-cpu`, `default.toml`) is looked for in the working directory
first, then here, so an installed wheel finds its own files from anywhere."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Literal

Kind = Literal["profiles", "policies"]


def shipped(kind: Kind) -> list[str]:
    """Names of the shipped files of one kind, without `.toml`."""
    folder = resources.files(__name__) / kind
    return sorted(entry.name.removesuffix(".toml") for entry in folder.iterdir() if entry.name.endswith(".toml"))


def resolve(kind: Kind, name: str) -> Path:
    """A path as given if it exists; else, for a bare name, NAME or NAME.toml here, then shipped."""
    path = Path(name).expanduser()
    if path.exists():
        return path.absolute()  # a hot reload re-reads this very file, wherever the run was started
    if len(path.parts) > 1:
        return path
    file_name = name if name.endswith(".toml") else f"{name}.toml"
    if Path(file_name).exists():
        return Path(file_name).absolute()
    packaged = resources.files(__name__) / kind / file_name
    return Path(str(packaged)) if packaged.is_file() else path


def read_shipped(kind: Kind, name: str) -> str:
    return (resources.files(__name__) / kind / f"{name}.toml").read_text(encoding="utf-8")
