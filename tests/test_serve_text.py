"""The pieces a reply is streamed in, and the chat template, without a server."""

import pytest

from specmon.backends.tokenizer import load_tokenizer
from specmon.server.chat import last_user_text, messages_for_template, render_chat
from specmon.server.errors import ApiError
from specmon.server.protocol import ChatMessage, ContentPart
from specmon.server.text import ReplyText
from tinymodel import TEMPLATE, write_tiny_gguf

EOS = 255  # a byte no UTF-8 text holds


def utf8_tokens(text: str) -> list[int]:
    """One token per byte: a character of several bytes arrives over several tokens."""
    return list(text.encode())


def detokenize(ids: list[int]) -> str:
    return bytes(ids).decode("utf-8", errors="replace")


def streamed(text: str, stops=(), per_round: int = 1) -> tuple[list[str], ReplyText]:
    reply = ReplyText(detokenize, (EOS,), stops)
    tokens = utf8_tokens(text)
    pieces = [reply.add(tokens[i : i + per_round]) for i in range(0, len(tokens), per_round)]
    pieces.append(reply.finish())
    return pieces, reply


@pytest.mark.parametrize("per_round", [1, 2, 3, 5])
def test_pieces_join_to_the_whole_text_and_never_split_a_character(per_round):
    text = "héllo wörld — ünïcode ✓ 日本語"
    pieces, reply = streamed(text, per_round=per_round)
    assert "".join(pieces) == text == reply.text
    assert all("\ufffd" not in piece for piece in pieces)


@pytest.mark.parametrize("per_round", [1, 4])
def test_a_stop_string_ends_the_text_before_it_and_is_never_sent(per_round):
    pieces, reply = streamed("one two STOP three STOP", stops=["STOP", "never"], per_round=per_round)
    assert reply.stopped and reply.text == "one two " and "".join(pieces) == "one two "
    assert not any("S" in piece for piece in pieces)


def test_a_tail_that_could_start_a_stop_string_waits_until_it_cannot():
    reply = ReplyText(detokenize, (EOS,), ["END"])
    assert reply.add(utf8_tokens("abc E")) == "abc "
    assert reply.add(utf8_tokens("N")) == ""
    assert reply.add(utf8_tokens("x")) == "ENx"
    assert not reply.stopped and reply.add([EOS]) == "" and reply.finish() == ""


def test_the_template_renders_a_single_turn_as_the_driver_does(tmp_path):
    tok = load_tokenizer(write_tiny_gguf(tmp_path / "t.gguf"))
    messages = messages_for_template([ChatMessage("user", "Hi there")])
    assert tok.encode(render_chat(tok.chat_template, messages, "<|im_end|>")) == tok.encode_chat("Hi there")


def test_a_conversation_in_chatml_with_text_parts_and_developer_as_system():
    messages = messages_for_template(
        [
            ChatMessage("developer", "Be brief."),
            ChatMessage("user", [ContentPart("text", "Hi "), ContentPart("text", "you")]),
            ChatMessage("assistant", "Hello."),
            ChatMessage("user", "Again?"),
        ]
    )
    assert render_chat(TEMPLATE, messages, "<|im_end|>") == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi you<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nAgain?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert last_user_text(messages) == "Again?"


def test_a_template_that_refuses_the_conversation_is_a_400():
    template = "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first must be user') }}{% endif %}x"
    with pytest.raises(ApiError) as refused:
        render_chat(template, [{"role": "assistant", "content": "x"}], "")
    assert refused.value.status == 400 and "first must be user" in refused.value.message
