"""ExLlamaV2 and ExLlamaV3 on an NVIDIA GPU: greedy speculative output equals plain greedy output.

Skips with its reason on machines without CUDA or without the engine (CI has neither);
scripts/gpu-check runs the same comparison with figures on a GPU machine."""

import importlib.util
import itertools

import pytest
import torch

from specmon.engine.drafters import NoDrafter
from specmon.engine.draft_len import FixedDraftLen
from specmon.engine.rounds import RoundContext
from specmon.events.schema import Sampling
from specmon.backends.profiles import load_profile
from roundloop import decode_prompt

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU with a CUDA build of torch")
EXTRAS = {"exllamav2": "gpu", "exllamav3": "exl3"}


@pytest.fixture(scope="module", params=sorted(EXTRAS))
def exl_pair(request, tmp_path_factory, model_path):
    backend = request.param
    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"needs {backend} (pip install 'specmon[{EXTRAS[backend]}]')")
    from specmon.backends.hf_folder import export_hf_folder
    from specmon.backends.loader import load_pair

    tmp = tmp_path_factory.mktemp("gpu")
    export_hf_folder(model_path, tmp / "target")
    export_hf_folder(model_path, tmp / "draft", layers=8)
    profile = tmp / "p.toml"
    profile.write_text(
        f'name = "gpu"\nbackend = "{backend}"\ndevice = "cuda"\nmax_seq_len = 1024\n'
        '[target]\npath = "target"\n[drafter]\nkind = "model"\n[drafter.target]\npath = "draft"\n'
    )
    return load_pair(load_profile(str(profile)))


@pytest.mark.parametrize("k", [2, 5])
def test_greedy_speculative_equals_plain(exl_pair, k):
    greedy = Sampling(0.0, 1.0, 0, 0)
    prompt = exl_pair.tokenizer.encode_chat("Repeat this list twice: red, green, blue, cyan, magenta.")
    outputs = []
    for drafter, draft_len in ((NoDrafter(), 0), (exl_pair.drafter, k)):
        ctx = RoundContext("s", "p", "c", itertools.count())
        outputs.append(
            decode_prompt(
                exl_pair.target, drafter, prompt, FixedDraftLen(draft_len), greedy, 48, ctx, lambda e: None
            ).generated
        )
    assert len(outputs[0]) > 10
    assert outputs[1] == outputs[0]
