"""What every backend's loader returns: a target, a drafter and the shared tokenizer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from specmon.backends.profiles import DrafterSpec, Profile
from specmon.backends.tokenizer import ChatTokenizer
from specmon.engine.drafters import Drafter, NgramDrafter, NoDrafter
from specmon.engine.target import Target
from specmon.errors import SpecmonError


@dataclass
class Pair:
    target: Target
    drafter: Drafter
    tokenizer: ChatTokenizer
    make_drafter: Callable[[DrafterSpec], Drafter]  # another drafter on the same target (sweeps)


def check_same_vocab(target: ChatTokenizer, draft: ChatTokenizer, draft_path: Path, profile: Profile) -> None:
    """Draft and target must share one vocabulary (every backend): token ids are compared as they are."""
    if draft.tokenizer.get_vocab() != target.tokenizer.get_vocab():
        raise SpecmonError(
            f"profile {profile.source}: draft vocabulary ({draft.vocab_size} tokens, {draft_path.name}) "
            f"differs from the target's ({target.vocab_size} tokens); pick a draft of the same family"
        )


def check_trained_len(profile: Profile, model: str, trained: int | None) -> None:
    """max_seq_len within the context the model was trained for, where its file says."""
    if trained and profile.max_seq_len > trained:
        raise SpecmonError(
            f"profile {profile.source}: max_seq_len = {profile.max_seq_len}, but {model} was "
            f"trained for {trained} tokens; set max_seq_len <= {trained}"
        )


def simple_drafter(spec: DrafterSpec, profile: Profile, backend: str, draft: str) -> Drafter | None:
    """The drafters that run no model (none, ngram); None for kind = "model"; layerskip (torch only)
    is refused. `draft`: what a draft model is on `backend` (a draft folder, a draft GGUF)."""
    if spec.kind == "none":
        return NoDrafter()
    if spec.kind == "ngram":
        return NgramDrafter(spec.ngram_sizes)
    if spec.kind == "layerskip":
        raise SpecmonError(
            f'profile {profile.source}: drafter.kind = "layerskip" runs on the torch backend only; '
            f'with {backend} use "model" ({draft}) or "ngram"'
        )
    return None
