"""The embedded model: pulled from the installed wheel, checked by sha256, refused when damaged."""

import pytest

from specmon.backends import modelstore
from specmon.errors import SpecmonError


def test_pull_copies_a_checked_gguf_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECMON_CACHE", str(tmp_path))
    seen = []
    path = modelstore.pull(modelstore.SMOLLM2.name, lambda done, total: seen.append((done, total)))
    assert path == tmp_path / "models" / "smollm2-135m-instruct" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert modelstore.sha256_file(path) == modelstore.SMOLLM2.gguf_sha256
    assert seen[-1][0] == seen[-1][1] == path.stat().st_size  # the progress bar reached the end
    assert modelstore.resolve(modelstore.SMOLLM2.name) == path


def test_a_damaged_cached_model_is_refused_and_pull_repairs_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECMON_CACHE", str(tmp_path))
    path = modelstore.pull(modelstore.SMOLLM2.name)
    with open(path, "r+b") as fh:
        fh.seek(1000)
        fh.write(b"\x00\x01\x02")
    with pytest.raises(SpecmonError, match="damaged"):
        modelstore.resolve(modelstore.SMOLLM2.name)
    modelstore.pull(modelstore.SMOLLM2.name)
    assert modelstore.resolve(modelstore.SMOLLM2.name) == path


def test_unknown_model_name():
    with pytest.raises(SpecmonError, match="embedded models: smollm2-135m-instruct"):
        modelstore.resolve("llama-70b")


def test_the_wheels_dependencies_are_not_installed():
    import importlib.metadata
    import importlib.util

    assert importlib.util.find_spec("llm") is None
    # llama-cpp-python comes only with the llamacpp extra, never with the model's wheel or the base install
    base = [r for r in importlib.metadata.requires("specmon") or [] if "extra ==" not in r]
    assert not [r for r in base if r.lower().startswith(("llama-cpp-python", "llm"))]
    assert importlib.util.find_spec("llama_cpp") is None or any(
        "llama-cpp-python" in r and 'extra == "llamacpp"' in r for r in importlib.metadata.requires("specmon")
    )
