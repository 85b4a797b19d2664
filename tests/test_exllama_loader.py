"""The ExLlamaV2 and ExLlamaV3 backends' checks, which run before anything needs a GPU, and their one-line errors."""

import json
import re
import sys

import pytest
import torch

from specmon.backends import gpu_pair
from specmon.backends.gpu_pair import build_failure, cache_bytes, check_fits, require_cuda
from specmon.backends.loader import load_pair
from specmon.backends.hf_folder import export_hf_folder
from specmon.errors import SpecmonError
from specmon.backends.profiles import load_profile
from specmon.data import shipped
from specmoncli import specmon
from test_cli import assert_one_line_error, write_profile
from tinymodel import write_tiny_gguf

BACKENDS = ("exllamav2", "exllamav3")


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def head(backend: str) -> str:
    return f'name = "g"\nbackend = "{backend}"\ndevice = "cuda"\nmax_new_tokens = 8\n'


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("exl2")
    target = export_hf_folder(write_tiny_gguf(tmp / "t.gguf", layers=2), tmp / "target")
    draft = export_hf_folder(write_tiny_gguf(tmp / "t.gguf", layers=2), tmp / "draft", layers=1)
    other = export_hf_folder(write_tiny_gguf(tmp / "o.gguf", vocab=["a", "b", "c", "d"]), tmp / "other")
    return target, draft, other


def _run(tmp_path, body):
    return specmon("run", "--headless", "--profile", str(write_profile(tmp_path, body)))


@pytest.fixture
def cuda_here(monkeypatch, backend):
    """A machine with CUDA but without the engine installed: loading stops at the import, after
    every check of the profile's folders."""
    monkeypatch.setattr(gpu_pair, "require_cuda", lambda backend: None)
    monkeypatch.setitem(sys.modules, backend, None)


def _refusal(tmp_path, body) -> str:
    with pytest.raises(SpecmonError) as raised:
        load_pair(load_profile(str(write_profile(tmp_path, body))))
    assert "\n" not in str(raised.value)
    return str(raised.value)


def test_a_gpu_backend_needs_a_cuda_device_in_the_profile(tmp_path, folders, backend):
    body = head(backend).replace('"cuda"', '"cpu"') + f'[target]\npath = "{folders[0]}"\n'
    assert_one_line_error(_run(tmp_path, body), f'backend = "{backend}"', 'device = "cuda"')


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message a machine without CUDA gets")
def test_no_cuda_is_one_line_before_anything_is_read_or_written(tmp_path, monkeypatch, backend):
    monkeypatch.setenv("SPECMON_CACHE", str(tmp_path / "cache"))
    body = head(backend) + f'[target]\npath = "{tmp_path / "nowhere"}"\n'  # not there either: CUDA is said first
    assert_one_line_error(_run(tmp_path, body), "needs an NVIDIA GPU", "CPU build", "download.pytorch.org")
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf", layers=2)
    assert_one_line_error(_run(tmp_path, head(backend) + f'[target]\npath = "{gguf}"\n'), "needs an NVIDIA GPU")
    assert not (tmp_path / "cache" / "hf").exists()  # no folder written out for a GPU this machine lacks


def test_a_gguf_is_written_out_as_folders_once_then_the_engine_is_imported(tmp_path, monkeypatch, backend, cuda_here):
    monkeypatch.setenv("SPECMON_CACHE", str(tmp_path / "cache"))
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf", layers=2)
    body = (
        head(backend)
        + f'[target]\npath = "{gguf}"\n[drafter]\nkind = "model"\n[drafter.target]\npath = "{gguf}"\nlayers = 1\n'
    )
    assert f"{backend} is not installed" in _refusal(tmp_path, body)
    written = sorted((tmp_path / "cache" / "hf").iterdir())
    layers = {
        re.sub(r"-[0-9a-f]{10}$", "", p.name): json.loads((p / "config.json").read_text())["num_hidden_layers"]
        for p in written
    }
    assert layers == {"tiny": 2, "tiny-1l": 1}
    stamps = [p.stat().st_mtime_ns for p in written]
    assert f"{backend} is not installed" in _refusal(tmp_path, body)
    assert [p.stat().st_mtime_ns for p in sorted((tmp_path / "cache" / "hf").iterdir())] == stamps  # not rewritten


@pytest.mark.parametrize(
    "which, table, fragments",
    [
        (0, "layers = 1\n", ["`layers` cuts a GGUF model"]),
        (0, '[drafter]\nkind = "layerskip"\n', ["layerskip", "torch backend only"]),
        (
            0,
            '[drafter]\nkind = "model"\n[drafter.target]\npath = "OTHER"\n',
            ["draft vocabulary (4 tokens, other)", "259 tokens"],
        ),
        ("file", "", ["config.json is neither a model folder nor a .gguf file"]),
    ],
)
def test_a_profile_s_folders_are_checked_before_the_engine_is_imported(
    tmp_path, folders, backend, cuda_here, which, table, fragments
):
    target = folders[0] / "config.json" if which == "file" else folders[which]
    body = head(backend) + f'[target]\npath = "{target}"\n' + table.replace("OTHER", str(folders[2]))
    message = _refusal(tmp_path, body)
    assert all(f in message for f in fragments), message


def test_cuda_problems_are_named():
    with pytest.raises(SpecmonError, match="backend exllamav2 needs an NVIDIA GPU: this torch .* is a CPU build"):
        require_cuda("exllamav2", None, 0)
    with pytest.raises(SpecmonError, match="no CUDA device"):
        require_cuda("exllamav2", "13.0", 0)
    assert require_cuda("exllamav2", "13.0", 1) is None


def test_build_failure_names_what_is_missing():
    boom = RuntimeError(
        "Error building extension 'exllamav2_ext'\n[1/40] nvcc ...\nq_matrix.cu(12): error: identifier undefined"
    )
    none = lambda tool: None  # noqa: E731
    every = lambda tool: f"/usr/bin/{tool}"  # noqa: E731
    assert build_failure("exllamav2", boom, which=none, env={}, torch_cuda="13.0") == (
        "exllamav2's CUDA extension cannot be built: missing nvcc (install the CUDA toolkit matching torch's "
        "CUDA, or set CUDA_HOME); ninja (pip install ninja)"
    )
    assert "a CUDA build of torch" in build_failure("exllamav2", boom, which=every, env={}, torch_cuda=None)
    assert "nvcc" not in build_failure(
        "exllamav2", boom, "13.0", which=lambda t: None if t == "nvcc" else t, env={"CUDA_HOME": "/usr/local/cuda"}
    )
    assert build_failure("exllamav2", boom, which=every, env={}, torch_cuda="13.0") == (
        "exllamav2's CUDA extension failed to build or load: Error building extension 'exllamav2_ext'"
    )


def test_cache_size_and_fit(folders):
    llama8b = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096}
    assert cache_bytes(llama8b, 8192) == 2 * 32 * 8 * 128 * 8192 * 2 == 2**30  # 1 GiB of fp16 keys and values
    target, draft, _ = folders
    check_fits([target, draft], 4096, free=2**30, total=2**30, gpu="test GPU")  # a tiny pair fits
    with pytest.raises(
        SpecmonError, match=r"target \+ draft need about 0\.5 GiB .* but 0\.1 of 24\.0 GiB is free on RTX"
    ):
        check_fits([target, draft], 4096, free=2**27, total=24 * 2**30, gpu="RTX")


@pytest.mark.parametrize("name", shipped("profiles"))
def test_every_shipped_profile_loads_by_name(name):
    profile = load_profile(name)
    assert profile.name == name and profile.backend in ("torch", "exllamav2", "exllamav3", "llamacpp")
    if profile.backend.startswith("exllama"):
        assert profile.device == "cuda" and profile.drafter.kind == "model"
