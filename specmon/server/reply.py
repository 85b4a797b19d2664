"""Response bodies for one request: the whole reply, or its stream's chunks, for the chat and the
text completion endpoints alike."""

from __future__ import annotations

from specmon.server.jobs import Finished
from specmon.server.protocol import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChunkChoice,
    Completion,
    CompletionChoice,
    Delta,
    SpecmonRound,
    Usage,
)


class Reply:
    def __init__(self, request_id: str, created: int, model: str):
        self.id, self.created, self.model = request_id, created, model

    def opening(self):
        """The first chunk, sent as soon as the request is queued."""

    def piece(self, text: str, round: SpecmonRound):
        """The text one round added, with the round it came from."""

    def closing(self, done: Finished):
        """The last chunk: finish_reason, and the `specmon` field (class, k, round ids)."""

    def usage(self, usage: Usage):
        """stream_options.include_usage: a chunk with no choices and the usage."""

    def whole(self, done: Finished):
        """The non-streamed reply."""


class ChatReply(Reply):
    def _chunk(self, delta: Delta, finish_reason: str | None = None, **extra) -> ChatCompletionChunk:
        return ChatCompletionChunk(self.id, self.created, self.model, [ChunkChoice(0, delta, finish_reason)], **extra)

    def opening(self) -> ChatCompletionChunk:
        return self._chunk(Delta(role="assistant", content=""))

    def piece(self, text: str, round: SpecmonRound) -> ChatCompletionChunk:
        return self._chunk(Delta(content=text), specmon=round)

    def closing(self, done: Finished) -> ChatCompletionChunk:
        return self._chunk(Delta(content=done.rest) if done.rest else Delta(), done.finish_reason, specmon=done.info)

    def usage(self, usage: Usage) -> ChatCompletionChunk:
        return ChatCompletionChunk(self.id, self.created, self.model, [], usage=usage)

    def whole(self, done: Finished) -> ChatCompletion:
        choice = ChatChoice(0, AssistantMessage(done.text), done.finish_reason)
        return ChatCompletion(self.id, self.created, self.model, [choice], done.usage, done.info)


class CompletionReply(Reply):
    def _chunk(self, text: str, finish_reason: str | None = None, **extra) -> Completion:
        return Completion(self.id, self.created, self.model, [CompletionChoice(0, text, finish_reason)], **extra)

    def opening(self) -> Completion:
        return self._chunk("")

    def piece(self, text: str, round: SpecmonRound) -> Completion:
        return self._chunk(text, specmon=round)

    def closing(self, done: Finished) -> Completion:
        return self._chunk(done.rest, done.finish_reason, specmon=done.info)

    def usage(self, usage: Usage) -> Completion:
        return Completion(self.id, self.created, self.model, [], usage=usage)

    def whole(self, done: Finished) -> Completion:
        return self._chunk(done.text, done.finish_reason, usage=done.usage, specmon=done.info)
