"""Tokenizer and chat template read from a GGUF file (no hub, no transformers)."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import gguf
import jinja2
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from specmon.backends.profiles import load_profile, resolve_model_path
from specmon.errors import SpecmonError

_CONTROL = 3  # llama.cpp token type for special/control tokens


@dataclass
class ChatTokenizer:
    """Encodes text and chat turns; ids match the model the GGUF came from."""

    tokenizer: Tokenizer
    chat_template: str
    eos_id: int
    vocab_size: int

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def encode_chat(self, user_text: str) -> list[int]:
        """One user turn rendered with the model's own template, ready for the assistant's reply."""
        template = jinja2.Environment().from_string(self.chat_template)
        text = template.render(messages=[{"role": "user", "content": user_text}], add_generation_prompt=True)
        return self.encode(text)


@functools.lru_cache(maxsize=2)
def open_gguf(path: Path) -> gguf.GGUFReader:
    """Parsing a GGUF's metadata takes seconds; weights and tokenizer share one reader."""
    try:
        return gguf.GGUFReader(path)
    except (OSError, ValueError, KeyError) as exc:
        raise SpecmonError(f"{path}: not a readable GGUF file ({exc})") from None


def load_tokenizer(path: Path) -> ChatTokenizer:
    """Build a byte-level BPE tokenizer from the GGUF's vocabulary and merges."""
    fields = open_gguf(path).fields
    required = ("tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.chat_template")
    missing = [key for key in required if key not in fields]
    if missing:
        raise SpecmonError(f"{path}: GGUF has no {missing[0]}; specmon needs the tokenizer inside the model file")
    if fields["tokenizer.ggml.model"].contents() != "gpt2":
        raise SpecmonError(f"{path}: only byte-level BPE (gpt2) tokenizers are supported")
    tokens = fields["tokenizer.ggml.tokens"].contents()
    types = fields["tokenizer.ggml.token_type"].contents() if "tokenizer.ggml.token_type" in fields else []
    raw_merges = fields["tokenizer.ggml.merges"].contents() if "tokenizer.ggml.merges" in fields else []
    merges = [tuple(m.split(" ", 1)) for m in raw_merges]
    bpe = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    # llama.cpp's "smollm" pre-tokenizer: digits one at a time, then GPT-2's byte-level split.
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    bpe.add_special_tokens([AddedToken(t, special=True) for t, kind in zip(tokens, types) if kind == _CONTROL])
    return ChatTokenizer(
        tokenizer=bpe,
        chat_template=fields["tokenizer.chat_template"].contents(),
        eos_id=int(fields["tokenizer.ggml.eos_token_id"].contents()),
        vocab_size=len(tokens),
    )


def load_hf_tokenizer(folder: Path) -> ChatTokenizer:
    """tokenizer.json plus the chat template and end-of-sequence token of a Hugging Face folder."""
    path = folder / "tokenizer.json"
    if not path.exists():
        raise SpecmonError(f"{folder}: no tokenizer.json; specmon needs the fast tokenizer file in the model folder")
    try:
        tokenizer = Tokenizer.from_file(str(path))
        meta_path = folder / "tokenizer_config.json"
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        config = json.loads((folder / "config.json").read_text())
    except Exception as exc:  # tokenizers raises a bare Exception for a malformed file
        raise SpecmonError(f"{folder}: cannot read the tokenizer ({exc})") from None
    template = meta.get("chat_template") or ""
    if not template:
        raise SpecmonError(f"{folder}: tokenizer_config.json has no chat_template; use an instruct model's folder")
    eos = config.get("eos_token_id")
    eos = eos[0] if isinstance(eos, list) else eos
    if eos is None and meta.get("eos_token"):
        token = meta["eos_token"]  # tokenizer_config.json writes it as a string or as {"content": ...}
        eos = tokenizer.token_to_id(token["content"] if isinstance(token, dict) else token)
    if eos is None:
        raise SpecmonError(f"{folder}: no eos_token_id in config.json")
    return ChatTokenizer(
        tokenizer=tokenizer,
        chat_template=template,
        eos_id=int(eos),
        vocab_size=tokenizer.get_vocab_size(with_added_tokens=True),
    )


def tokenizer_at(path: Path) -> ChatTokenizer:
    """The tokenizer of a Hugging Face folder (tokenizer.json) or of a GGUF file (its vocabulary)."""
    return load_hf_tokenizer(path) if path.is_dir() else load_tokenizer(path)


def profile_tokenizer(profile_name: str) -> ChatTokenizer:
    """The profile's tokenizer alone (no weights, no torch): a replay needs only token ids."""
    profile = load_profile(profile_name)
    return tokenizer_at(resolve_model_path(profile.target, profile))
