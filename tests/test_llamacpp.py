"""The llama.cpp backend on the real binding (skipped, with the reason, when llama-cpp-python is
not installed): tokenizer agreement, KV rollback, greedy speculative output equal to its own
plain output, and divergence from fp32 torch reported with its logit margin."""

import itertools
import sys

import numpy as np
import pytest

from specmon.backends.profiles import DrafterSpec, ModelRef, load_profile
from specmon.engine.draft_len import FixedDraftLen
from specmon.engine.drafters import NgramDrafter, NoDrafter
from specmon.engine.driver import compare
from specmon.engine.prompts import builtin_suite
from specmon.engine.rounds import RoundContext
from specmon.errors import SpecmonError
from specmon.events.schema import Sampling
from roundloop import decode_prompt
from tests.tinymodel import tiny_profile, write_tiny_gguf

GREEDY = Sampling()
NO_BINDING = "llama-cpp-python is not installed (pip install 'specmon[llamacpp]')"


def _has_binding() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except Exception:
        return False
    return True


needs_binding = pytest.mark.skipif(not _has_binding(), reason=NO_BINDING)


def _llamacpp_profile(tmp_path, **drafter):
    path = tiny_profile(tmp_path, **drafter)
    write_tiny_gguf(tmp_path / "tiny.gguf", for_llamacpp=True)  # llama.cpp needs the trained length
    path.write_text(path.read_text().replace('name = "tiny"', 'name = "tiny"\nbackend = "llamacpp"'))
    return load_profile(str(path))


def _decode(target, drafter, tokens, k, n=24, sampling=GREEDY, emit=None):
    ctx = RoundContext("s", "p", "c", itertools.count())
    return decode_prompt(target, drafter, tokens, FixedDraftLen(k), sampling, n, ctx, emit or (lambda e: None))


# --- without the binding ---------------------------------------------------------------------


def test_a_missing_binding_is_one_line_naming_the_extra(tmp_path, monkeypatch):
    from specmon.backends.loader import load_pair

    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp now fails as if absent
    with pytest.raises(SpecmonError, match=r"llama-cpp-python is not installed: pip install 'specmon\[llamacpp\]'"):
        load_pair(_llamacpp_profile(tmp_path))


def test_cpus_with_amx_are_told_apart_from_proc_cpuinfo(tmp_path):
    """On them specmon loads without llama.cpp's extra buffer types: its AMX matmul crashed a verify pass."""
    from specmon.backends.llamacpp_loader import cpu_has_amx

    flags = "fpu vme avx2 avx512f avx512_vnni"
    (tmp_path / "amx").write_text(f"processor\t: 0\nflags\t\t: {flags} amx_bf16 amx_tile amx_int8\n")
    (tmp_path / "plain").write_text(f"processor\t: 0\nflags\t\t: {flags} amx_tile_x\nbugs\t\t: amx_int8\n")
    assert cpu_has_amx(tmp_path / "amx") is True
    assert cpu_has_amx(tmp_path / "plain") is False  # a flag of another name, or the word outside flags
    assert cpu_has_amx(tmp_path / "absent") is False


def test_extra_buffer_types_are_off_only_where_the_build_has_amx_kernels_and_the_cpu_runs_them(monkeypatch):
    """A build without AMX (scripts/setup-llamacpp on an AMX CPU) keeps llama.cpp's CPU weight repacks."""
    from types import SimpleNamespace

    from specmon.backends import llamacpp_loader

    native = "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | AVX512_VNNI = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 | REPACK = 1 | "
    portable = native.replace("AMX_INT8 = 1 | ", "")
    for cpu_amx, info, extra in [
        (True, native, False),
        (True, portable, True),
        (False, native, True),
        (False, portable, True),
    ]:
        monkeypatch.setattr(llamacpp_loader, "cpu_has_amx", lambda cpu_amx=cpu_amx: cpu_amx)
        lib = SimpleNamespace(llama_print_system_info=lambda info=info: info.encode())
        assert llamacpp_loader.use_extra_bufts(lib) is extra, (cpu_amx, info)


def test_llamacpp_profiles_are_checked_before_loading(tmp_path):
    from specmon.backends.loader import load_pair

    profile = _llamacpp_profile(tmp_path, kind="layerskip")
    with pytest.raises(SpecmonError, match='layerskip" runs on the torch backend only'):
        load_pair(profile)
    cut = DrafterSpec(kind="model", target=ModelRef(path=str(tmp_path / "tiny.gguf"), layers=1))
    with pytest.raises(SpecmonError, match="`layers` .* torch backend only"):
        load_pair(_llamacpp_profile(tmp_path), cut)
    bad = tmp_path / "gpu.toml"
    bad.write_text(
        _llamacpp_profile(tmp_path).text.replace('backend = "llamacpp"', 'backend = "llamacpp"\ndevice = "cuda"')
    )
    with pytest.raises(SpecmonError, match='device: backend = "llamacpp" runs llama.cpp\'s CPU build'):
        load_profile(str(bad))
    assert load_profile("smollm2-llamacpp").backend == "llamacpp"


# --- on the binding, tiny model ----------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    if not _has_binding():
        pytest.skip(NO_BINDING)
    from specmon.backends.loader import load_pair

    tmp = tmp_path_factory.mktemp("tiny-llamacpp")
    write_tiny_gguf(tmp / "draft.gguf", seed=1, for_llamacpp=True)
    return load_pair(_llamacpp_profile(tmp), DrafterSpec(kind="model", target=ModelRef(path=str(tmp / "draft.gguf"))))


@needs_binding
def test_tokenizer_ids_agree_with_llama_cpp_on_the_tiny_model(tiny_pair):
    model = tiny_pair.target.context.model
    for prompt in builtin_suite():
        text = tiny_pair.tokenizer.encode_chat(prompt.text)
        assert model.tokenize(tiny_pair.tokenizer.decode(text)) == text


@needs_binding
def test_rollback_by_length_gives_the_same_logits_as_a_fresh_decode(tiny_pair):
    target = tiny_pair.target
    target.prefill([10, 11, 12])
    fresh = target.forward([13, 14], 3)
    target.forward([40, 41, 42, 43], 3)  # a proposal, all rejected
    target.truncate(3)
    again = target.forward([13, 14], 3)
    np.testing.assert_array_equal(again, fresh)
    assert fresh.shape == (2, tiny_pair.tokenizer.vocab_size) and fresh.dtype == np.float32


@needs_binding
@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("drafter", ["ngram", "model"])
def test_tiny_greedy_speculation_equals_its_own_plain_decoding(tiny_pair, drafter, k):
    spec_drafter = NgramDrafter() if drafter == "ngram" else tiny_pair.drafter
    rounds = []
    for prompt in builtin_suite():
        tokens = tiny_pair.tokenizer.encode_chat(prompt.text)
        plain = _decode(tiny_pair.target, NoDrafter(), tokens, 0)
        spec = _decode(tiny_pair.target, spec_drafter, tokens, k, emit=rounds.append)
        assert spec.generated == plain.generated, (
            prompt.id,
            compare(plain.generated, plain.margins, spec.generated, True, 0),
        )
    assert sum(len(r.proposed) for r in rounds) > 0
    assert all(len(r.proposed) <= k and r.accepted <= len(r.proposed) for r in rounds)


@needs_binding
def test_tiny_verify_rows_equal_one_token_steps(tiny_pair):
    """The batch verify's row i is what a one-token step at that position gives."""
    target = tiny_pair.target
    tokens = tiny_pair.tokenizer.encode_chat("copy this: abc abc abc")
    target.prefill(tokens[:-1])
    batch = target.forward(tokens[-1:] + [97, 98, 99], len(tokens) - 1)
    steps = [target.forward([t], len(tokens) - 1 + i) for i, t in enumerate(tokens[-1:] + [97, 98, 99])]
    np.testing.assert_allclose(batch, np.concatenate(steps), atol=1e-4)
    assert (batch.argmax(-1) == np.concatenate(steps).argmax(-1)).all()


# --- on the binding, the embedded model (slow) -------------------------------------------------


@pytest.fixture(scope="module")
def smollm2_llamacpp():
    if not _has_binding():
        pytest.skip(NO_BINDING)
    from specmon.backends.loader import load_pair

    return load_pair(load_profile("smollm2-llamacpp"))


@needs_binding
@pytest.mark.slow
def test_smollm2_tokenizer_ids_agree_with_llama_cpp(smollm2_llamacpp):
    model = smollm2_llamacpp.target.context.model
    for prompt in builtin_suite():
        ours = smollm2_llamacpp.tokenizer.encode_chat(prompt.text)
        assert model.tokenize(smollm2_llamacpp.tokenizer.decode(ours)) == ours, prompt.id


@needs_binding
@pytest.mark.slow
@pytest.mark.parametrize("k", [2, 4])
def test_smollm2_greedy_speculation_equals_its_own_plain_decoding(smollm2_llamacpp, k):
    pair, margin = smollm2_llamacpp, load_profile("smollm2-llamacpp").tie_margin
    verdicts = {}
    for prompt in builtin_suite():
        tokens = pair.tokenizer.encode_chat(prompt.text)
        plain = _decode(pair.target, NoDrafter(), tokens, 0, n=32)
        spec = _decode(pair.target, pair.drafter, tokens, k, n=32)
        verdicts[prompt.id] = compare(plain.generated, plain.margins, spec.generated, True, margin)
    bad = {pid: v for pid, v in verdicts.items() if v.verdict not in ("identical", "near-tie")}
    assert not bad, f"k={k} diverged beyond a near-tie: {bad}"


@needs_binding
@pytest.mark.slow
def test_smollm2_divergence_from_fp32_torch_is_only_at_near_ties(smollm2_llamacpp, pair):
    """Q4_1 kernels (activations quantised to 8 bits) need not give dequantised fp32's tokens; where
    they part, it is where fp32's top two logits were close (measured here: gaps up to 0.23)."""
    for prompt in builtin_suite()[::3]:
        tokens = pair.tokenizer.encode_chat(prompt.text)
        assert smollm2_llamacpp.tokenizer.encode_chat(prompt.text) == tokens
        reference = _decode(pair.target, NoDrafter(), tokens, 0, n=32)
        quantised = _decode(smollm2_llamacpp.target, NoDrafter(), tokens, 0, n=32)
        verdict = compare(reference.generated, reference.margins, quantised.generated, True, 0.5)
        assert verdict.verdict in ("identical", "near-tie"), (prompt.id, verdict)
        if verdict.verdict == "near-tie":
            assert verdict.margin < 0.5 and verdict.first_divergence < 32
