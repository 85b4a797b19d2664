"""The ExLlamaV3 backend without a GPU: its loader against a stand-in `exllamav3` package that
follows the real classes (tests/fake_exllama.py names the files), the models it refuses, the
folders it tells apart, and the shipped template on a machine without CUDA."""

import itertools
import json
import os
import sys

import pytest
import torch

import fake_exllama
from specmon.backends import gpu_pair
from specmon.backends.exllama import MAX_ROWS, Exl3Runner
from specmon.backends.hf_folder import export_hf_folder
from specmon.backends.loader import load_pair
from specmon.backends.profiles import DrafterSpec, ModelRef, load_profile
from specmon.engine.drafters import NoDrafter
from specmon.engine.draft_len import FixedDraftLen
from specmon.engine.rounds import RoundContext
from specmon.errors import SpecmonError
from specmon.events.schema import Sampling
from roundloop import decode_prompt
from specmoncli import specmon
from test_cli import assert_one_line_error, write_profile
from tinymodel import write_tiny_gguf

GREEDY = Sampling(0.0, 1.0, 0, 0)


def _mark(folder, **config):
    """Rewrite a folder's config.json with these keys (an architecture, a quantisation)."""
    raw = json.loads((folder / "config.json").read_text())
    raw.update(config)
    (folder / "config.json").write_text(json.dumps(raw))
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("exl3")
    gguf = write_tiny_gguf(tmp / "t.gguf", layers=2)
    exl3 = {"quantization_config": {"quant_method": "exl3", "bits": 4.0}}
    return {
        "target": _mark(export_hf_folder(gguf, tmp / "target"), **exl3),
        "draft": _mark(export_hf_folder(gguf, tmp / "draft", layers=1), **exl3),
        "hybrid": _mark(export_hf_folder(gguf, tmp / "hybrid"), architectures=["Qwen3NextForCausalLM"]),
        "assistant": _mark(export_hf_folder(gguf, tmp / "assistant"), architectures=["Gemma4AssistantForCausalLM"]),
        "dflash": _mark(export_hf_folder(gguf, tmp / "dflash"), architectures=["DFlashDraftModel"]),
        "windowed": _mark(export_hf_folder(gguf, tmp / "windowed"), architectures=["GptOssForCausalLM"]),
        "unknown": _mark(export_hf_folder(gguf, tmp / "unknown"), architectures=["NoSuchForCausalLM"]),
        "exl2": _mark(export_hf_folder(gguf, tmp / "exl2"), quantization_config={"quant_method": "exl2"}),
    }


@pytest.fixture
def fake_engine(monkeypatch):
    """A CUDA machine with exllamav3 installed, as far as specmon's loader can tell."""
    monkeypatch.setitem(sys.modules, "exllamav3", fake_exllama.exllamav3_module())
    monkeypatch.setattr(gpu_pair, "require_cuda", lambda backend: None)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (8 * 2**30, 8 * 2**30))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "fake GPU")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)


@pytest.mark.parametrize("max_seq_len, pages", [(1000, 4), (2048, 8), (5000, 20)])
def test_a_folder_loads_with_its_cache_in_whole_pages_and_room_for_the_widest_verify(folders, max_seq_len, pages):
    runner = Exl3Runner.load(fake_exllama.exllamav3_module(), folders["target"], max_seq_len)
    assert isinstance(runner, Exl3Runner)
    assert runner.cache.max_num_tokens == runner.max_len == pages * 256  # rounded up to whole pages
    # the cache is attached before the weights load, whose measuring pass fits it
    assert runner.model.loaded == {"max_chunk_size": min(2048, pages * 256), "max_output_size": MAX_ROWS, "caches": 1}


def test_sliding_window_layers_load_as_windowed_attention_not_refused_as_recurrent_state(folders):
    runner = Exl3Runner.load(fake_exllama.exllamav3_module(), folders["windowed"], 512)
    assert runner.model.recurrent_state_cls is None and runner.model.loaded is not None


@pytest.mark.parametrize(
    "which, fragments",
    [
        ("hybrid", ("Qwen3NextForCausalLM keeps recurrent state", "roll back")),
        ("assistant", ("draft head (Gemma4AssistantForCausalLM)", "separate draft model")),
        ("dflash", ("draft head (DFlashDraftModel)", "separate draft model")),
        ("unknown", ("exllamav3 cannot load it", "Unknown architecture NoSuchForCausalLM")),
    ],
)
def test_models_it_cannot_roll_back_or_read_are_one_line_before_their_weights(folders, which, fragments):
    module = fake_exllama.exllamav3_module()
    loads = []
    module.Model = type("Model", (fake_exllama.Exl3Model,), {"load": lambda self, **kw: loads.append(kw)})
    module.Model.from_config = staticmethod(lambda config, **kw: module.Model(config, swa_full=kw.get("swa_full")))
    with pytest.raises(SpecmonError) as raised:
        Exl3Runner.load(module, folders[which], 512)
    message = str(raised.value)
    assert "\n" not in message and all(f in message for f in fragments), message
    assert loads == []


def test_not_installed_and_a_failed_build_are_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "exllamav3", None)  # an import of it fails as if it were absent
    with pytest.raises(SpecmonError, match=r"^exllamav3 is not installed: pip install 'specmon\[exl3\]'$"):
        gpu_pair.import_engine(gpu_pair.EXL3)
    monkeypatch.delitem(sys.modules, "exllamav3")
    monkeypatch.setattr(
        gpu_pair.importlib, "import_module", lambda name: (_ for _ in ()).throw(RuntimeError("ninja: build stopped"))
    )
    with pytest.raises(SpecmonError, match="^exllamav3's CUDA extension"):
        gpu_pair.import_engine(gpu_pair.EXL3)


def _profile(tmp_path, body):
    return load_profile(str(write_profile(tmp_path, 'name = "g"\nbackend = "exllamav3"\ndevice = "cuda"\n' + body)))


def test_a_pair_loaded_through_the_backend_decodes_speculatively_as_it_does_plainly(tmp_path, folders, fake_engine):
    target, draft = folders["target"], folders["draft"]
    body = f'[target]\npath = "{target}"\n[drafter]\nkind = "model"\n[drafter.target]\npath = "{draft}"\n'
    pair = load_pair(_profile(tmp_path, body))
    assert pair.drafter.name.startswith("model:") and pair.drafter.runner.cache.max_num_tokens == 2048
    prompt = pair.tokenizer.encode_chat("abc abc abc")
    outputs, proposed = [], []
    for drafter, k in ((NoDrafter(), 0), (pair.drafter, 3), (pair.make_drafter(DrafterSpec(kind="ngram")), 3)):
        events = []
        ctx = RoundContext("s", "p", "c", itertools.count())
        run = decode_prompt(pair.target, drafter, prompt, FixedDraftLen(k), GREEDY, 24, ctx, events.append)
        outputs.append(run.generated)
        proposed.append(sum(len(e.proposed) for e in events))
    assert len(outputs[0]) == 24 and outputs[1] == outputs[0] and outputs[2] == outputs[0]
    assert proposed[0] == 0 and proposed[1] > 0  # the draft model drafted, and each draft was verified
    assert pair.make_drafter(DrafterSpec(kind="model", target=ModelRef(path=str(draft)))) is pair.drafter  # loaded once


@pytest.mark.parametrize(
    "backend, which, fragments",
    [
        ("exllamav3", "exl2", ("a quantised (EXL2) folder", 'backend = "exllamav2"')),
        ("exllamav2", "target", ("a quantised (EXL3) folder", 'backend = "exllamav3"')),
        ("torch", "target", ("a quantised (EXL3) folder", 'backend = "exllamav3"')),
    ],
)
def test_a_folder_for_the_other_engine_names_the_backend_that_runs_it(
    tmp_path, folders, monkeypatch, backend, which, fragments
):
    monkeypatch.setattr(gpu_pair, "require_cuda", lambda backend: None)
    device = "cpu" if backend == "torch" else "cuda"
    body = f'name = "g"\nbackend = "{backend}"\ndevice = "{device}"\n[target]\npath = "{folders[which]}"\n'
    with pytest.raises(SpecmonError) as raised:
        load_pair(load_profile(str(write_profile(tmp_path, body))))
    assert all(f in str(raised.value) for f in fragments), raised.value


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what a machine without CUDA is told")
def test_the_shipped_template_without_cuda_is_one_line_naming_what_is_missing(tmp_path):
    """Said before the folders (not downloaded yet, under a stand-in home): no download would help."""
    done = specmon("run", "--headless", "--profile", "exl3-llama3-8b", env={**os.environ, "HOME": str(tmp_path)})
    assert_one_line_error(done, "backend exllamav3 needs an NVIDIA GPU", "CPU build")


def test_models_list_says_how_to_get_exl3_weights_and_where_they_go():
    done = specmon("models", "list", env={**os.environ, "COLUMNS": "80"})
    assert done.returncode == 0
    lines = done.stderr.splitlines()
    command = [line.strip() for line in lines if "huggingface-cli download" in line]
    assert len(command) == 1 and command[0].endswith("exl3-4.0bpw")  # whole, to copy
    assert "profiles/exl3-llama3-8b.toml" in done.stderr and "fetches nothing" in done.stderr
    profile = load_profile("exl3-llama3-8b")
    assert command[0].split("--local-dir ")[1] == profile.target.path  # the folder the template reads


def test_running_out_of_vram_while_loading_is_one_line(tmp_path, folders, fake_engine):
    def out_of_memory(self, **kwargs):  # the autosplit caught CUDA's error on every GPU (model_ls.py)
        raise RuntimeError("Insufficient VRAM in split for model and cache")

    sys.modules["exllamav3"].Model = type("Model", (fake_exllama.Exl3Model,), {"load": out_of_memory})
    sys.modules["exllamav3"].Model.from_config = staticmethod(
        lambda config, **kw: sys.modules["exllamav3"].Model(config)
    )
    with pytest.raises(SpecmonError, match=r"^target: ran out of VRAM while loading; lower max_seq_len$"):
        load_pair(_profile(tmp_path, f'[target]\npath = "{folders["target"]}"\n'))
