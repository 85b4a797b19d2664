"""A reply's text as its tokens arrive round by round: what may be sent so far, and where a stop
string ends it. The streamed pieces join to exactly the text a non-streamed reply carries."""

from __future__ import annotations

from typing import Callable, Collection, Sequence

REPLACEMENT = "\ufffd"  # what a byte-level decode shows for a character whose bytes are not all here yet


class ReplyText:
    """Decodes the whole reply each round (tokens of one reply: cheap next to a model forward) and
    holds back what a later token could still change: a trailing incomplete character, and a tail
    that could be the start of a stop string. End tokens (eos, stop_token_ids) are not text."""

    def __init__(self, detokenize: Callable[[list[int]], str], end_ids: Collection[int], stops: Sequence[str] = ()):
        self.detokenize, self.end_ids, self.stops = detokenize, frozenset(end_ids), stops  # admission drops ""
        self.generated: list[int] = []  # every token taken, end tokens included
        self.text = ""  # the reply as it stands, cut before a stop string if one appeared
        self.sent = ""
        self.stopped = False  # a stop string appeared: the reply ends before it
        self.billed = 0  # tokens of the reply: all taken, or once stopped, those the cut text needs

    def _text_of(self, count: int) -> str:
        return self.detokenize([t for t in self.generated[:count] if t not in self.end_ids])

    def add(self, tokens: Sequence[int]) -> str:
        """Take one round's tokens; return the text that may now be sent (possibly "")."""
        if not self.stopped:
            self.generated.extend(tokens)
            self.text = self._text_of(len(self.generated))
            self._find_stop()
            self.billed = self._needed() if self.stopped else len(self.generated)
        return self._advance(self._sendable())

    def _needed(self) -> int:
        """The fewest leading tokens whose text holds the cut reply (a walk back over a round or two)."""
        count = len(self.generated)
        while count > 0 and self._text_of(count - 1).startswith(self.text):
            count -= 1
        return count

    def finish(self) -> str:
        """The rest, once no token will follow."""
        return self._advance(self.text)

    def _find_stop(self) -> None:
        start = max(0, len(self.sent) - max((len(s) for s in self.stops), default=0))
        found = [i for i in (self.text.find(s, start) for s in self.stops) if i >= 0]
        if found:
            self.text = self.text[: min(found)]
            self.stopped = True

    def _sendable(self) -> str:
        if self.stopped:
            return self.text
        text = self.text.rstrip(REPLACEMENT)
        hold = max((n for s in self.stops for n in range(1, len(s)) if text.endswith(s[:n])), default=0)
        return text[: len(text) - hold]

    def _advance(self, text: str) -> str:
        piece = text[len(self.sent) :]
        if piece:
            self.sent = text
        return piece
