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
    Usage,
)


class Reply:
    def __init__(self, request_id: str, created: int, model: str, chat: bool):
        self.id, self.created, self.model, self.chat = request_id, created, model, chat

    def chunk(self, text: str, finish_reason: str | None = None, role: str | None = None, **extra):
        """A stream's chunk: the first with the role, one per round with its `specmon` round, the last with
        finish_reason and the request's `specmon` field."""
        if not self.chat:
            return Completion(self.id, self.created, self.model, [CompletionChoice(0, text, finish_reason)], **extra)
        delta = Delta(role, text) if text or role else Delta()  # the last chunk may carry no content
        return ChatCompletionChunk(self.id, self.created, self.model, [ChunkChoice(0, delta, finish_reason)], **extra)

    def usage(self, usage: Usage):
        """stream_options.include_usage: a chunk with no choices and the usage."""
        return (ChatCompletionChunk if self.chat else Completion)(self.id, self.created, self.model, [], usage=usage)

    def whole(self, done: Finished):
        """The non-streamed reply."""
        if not self.chat:
            return self.chunk(done.text, done.finish_reason, usage=done.usage, specmon=done.info)
        choice = ChatChoice(0, AssistantMessage(done.text), done.finish_reason)
        return ChatCompletion(self.id, self.created, self.model, [choice], done.usage, done.info)
