"""Hugging Face folders written from a GGUF: read back by the torch backend, they give the same
logits and the same tokens as the GGUF they came from (this is what ExLlamaV2 loads on a GPU)."""

import json

import numpy as np
import pytest
import torch
from safetensors import safe_open

from specmon.backends.gguf_weights import load_gguf_llama
from specmon.backends.hf_folder import export_hf_folder, load_hf_llama
from specmon.backends.llama import Llama
from specmon.backends.tokenizer import load_hf_tokenizer, load_tokenizer
from specmoncli import decoded, finished_prompts, specmon
from test_cli import assert_one_line_error
from tinymodel import write_tiny_gguf


@pytest.fixture
def tiny(tmp_path):
    return write_tiny_gguf(tmp_path / "tiny.gguf", layers=3)


def _logits(cfg, weights, tokens):
    model = Llama(cfg, weights, torch.float32, "cpu", 64)
    return model.forward(torch.tensor(tokens), 0, model.new_cache()).numpy()


def test_fp32_folder_gives_the_ggufs_logits_exactly(tiny, tmp_path):
    folder = export_hf_folder(tiny, tmp_path / "hf", dtype="float32")
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    config = json.loads((folder / "config.json").read_text())
    assert (config["num_hidden_layers"], config["hidden_size"], config["num_key_value_heads"]) == (3, 32, 2)
    tokens = [5, 80, 81, 90, 7, 3]
    want = _logits(*load_gguf_llama(tiny), tokens)
    got = _logits(*load_hf_llama(folder), tokens)
    np.testing.assert_array_equal(got, want)


def test_first_layers_make_the_draft_folder(tiny, tmp_path):
    folder = export_hf_folder(tiny, tmp_path / "draft", layers=1, dtype="float32")
    with safe_open(str(folder / "model.safetensors"), "pt") as fh:
        names = set(fh.keys())
    assert "model.layers.0.self_attn.q_proj.weight" in names
    assert not any(n.startswith("model.layers.1.") for n in names)
    cfg, weights = load_gguf_llama(tiny)
    model = Llama(cfg, weights, torch.float32, "cpu", 64)
    want = model.forward(torch.tensor([5, 6, 7]), 0, model.new_cache(), n_layers=1).numpy()
    np.testing.assert_array_equal(_logits(*load_hf_llama(folder), [5, 6, 7]), want)


def test_fp16_folder_is_close_and_half_the_size(tiny, tmp_path):
    half = export_hf_folder(tiny, tmp_path / "f16")
    full = export_hf_folder(tiny, tmp_path / "f32", dtype="float32")
    size = lambda f: (f / "model.safetensors").stat().st_size  # noqa: E731
    assert size(half) < 0.55 * size(full)
    tokens = [5, 80, 81, 90]
    np.testing.assert_allclose(
        _logits(*load_hf_llama(half), tokens), _logits(*load_hf_llama(full), tokens), atol=0.05
    )  # fp16 keeps ~3 significant digits of each weight


def test_tokenizer_and_chat_template_survive(tiny, tmp_path):
    folder = export_hf_folder(tiny, tmp_path / "hf")
    ours, theirs = load_tokenizer(tiny), load_hf_tokenizer(folder)
    text = "def f(x):\n    return x + 1  # héllo"
    assert theirs.encode(text) == ours.encode(text)
    assert theirs.encode_chat("hi there") == ours.encode_chat("hi there")
    assert (theirs.eos_id, theirs.vocab_size) == (ours.eos_id, ours.vocab_size)


def test_torch_backend_runs_a_folder_like_its_gguf(tiny, tmp_path):
    folder = export_hf_folder(tiny, tmp_path / "hf", dtype="float32")
    outputs = []
    for path in (tiny, folder):
        profile = tmp_path / f"{path.name}.toml"
        profile.write_text(f'name = "t"\nmax_new_tokens = 12\n[target]\npath = "{path}"\n')
        events = decoded(tmp_path / f"{path.name}.specmon", "--profile", profile, "--prompts", _prompts(tmp_path))
        outputs.append([(e.draft_len, e.generated) for e in finished_prompts(events)])
    assert outputs[0] == outputs[1]
    assert len(outputs[0]) == 2 and len(outputs[0][0][1]) == 12


def _prompts(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": "a", "prompt": "copy: abc abc abc"}\n')
    return path


def test_export_cli_errors_are_one_line(tmp_path):
    assert_one_line_error(
        specmon("models", "export", str(tmp_path / "missing.gguf"), str(tmp_path / "o")), "missing.gguf", "no such file"
    )
    write_tiny_gguf(tmp_path / "t.gguf", layers=2)
    assert_one_line_error(
        specmon("models", "export", str(tmp_path / "t.gguf"), str(tmp_path / "o"), "--layers", "5"),
        "--layers 5",
        "2 layers",
    )
    assert not (tmp_path / "o").exists()
