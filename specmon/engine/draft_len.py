"""Draft length (k): one maximum, and one protocol a fixed k and the policy's per-round choice both answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from specmon.errors import SpecmonError

MAX_DRAFT_LEN = 64  # longest draft any profile, policy, sweep or flag may ask for


class DraftLenSource(Protocol):
    max_draft_len: int  # the longest k next_draft_len() may return: the KV cache is checked for it first

    def next_draft_len(self) -> int:
        """The draft length of the next round (0: a plain decoding step)."""


@dataclass(frozen=True)
class FixedDraftLen:
    """The same k every round."""

    max_draft_len: int

    def next_draft_len(self) -> int:
        return self.max_draft_len


def check_draft_len(draft_len: int, what: str) -> int:
    """A k from a user (flag, profile): within 0..MAX_DRAFT_LEN, or one clear error."""
    if isinstance(draft_len, bool) or not isinstance(draft_len, int) or not 0 <= draft_len <= MAX_DRAFT_LEN:
        raise SpecmonError(f"{what} must be 0..{MAX_DRAFT_LEN}, not {draft_len}")
    return draft_len
