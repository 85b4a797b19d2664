"""A tiny random llama written as a real GGUF (byte-level vocabulary, 2 layers): loads in
milliseconds and decodes in about a millisecond a token, for tests that need many sessions."""

from pathlib import Path

import gguf
import numpy as np

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] "
    "+ '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def bytes_to_unicode_table() -> dict[int, str]:
    """GPT-2's byte-to-printable-character map, which byte-level BPE vocabularies are written in."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


def write_tiny_gguf(
    path: Path,
    seed: int = 0,
    dim: int = 32,
    layers: int = 2,
    vocab: list[str] | None = None,
    for_llamacpp: bool = False,
) -> Path:
    """`vocab` replaces the byte-level vocabulary (to make a model whose tokenizer differs);
    `for_llamacpp` adds what llama.cpp requires: a trained context length and a merge (two spaces)."""
    rng = np.random.default_rng(seed)
    vocab = vocab or SPECIALS + list(bytes_to_unicode_table().values()) + (["\u0120\u0120"] if for_llamacpp else [])
    writer = gguf.GGUFWriter(str(path), "llama")
    for key, value in [
        ("block_count", layers),
        ("embedding_length", dim),
        ("feed_forward_length", 2 * dim),
        ("attention.head_count", 4),
        ("attention.head_count_kv", 2),
    ]:
        writer.add_uint32(f"llama.{key}", value)
    if for_llamacpp:
        writer.add_uint32("llama.context_length", 4096)
    writer.add_float32("llama.rope.freq_base", 10000.0)
    writer.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(vocab)
    if for_llamacpp:
        writer.add_token_merges(["\u0120 \u0120"])  # llama.cpp refuses a BPE model without merges
    writer.add_token_types([3 if token in SPECIALS else 1 for token in vocab])
    writer.add_eos_token_id(2)
    writer.add_chat_template(TEMPLATE)
    w = lambda *shape: (rng.normal(size=shape) * 0.3).astype(np.float32)  # noqa: E731
    writer.add_tensor("token_embd.weight", w(len(vocab), dim))
    writer.add_tensor("output_norm.weight", np.ones(dim, dtype=np.float32))
    kv = dim // 2
    for i in range(layers):
        for name, shape in [
            ("attn_q", (dim, dim)),
            ("attn_k", (kv, dim)),
            ("attn_v", (kv, dim)),
            ("attn_output", (dim, dim)),
            ("ffn_gate", (2 * dim, dim)),
            ("ffn_up", (2 * dim, dim)),
            ("ffn_down", (dim, 2 * dim)),
        ]:
            writer.add_tensor(f"blk.{i}.{name}.weight", w(*shape))
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(dim, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(dim, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def tiny_profile(tmp: Path, max_new_tokens: int = 32, **drafter) -> Path:
    model = write_tiny_gguf(tmp / "tiny.gguf")
    extra = "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in drafter.items())
    path = tmp / "tiny.toml"
    path.write_text(
        f'name = "tiny"\nmax_new_tokens = {max_new_tokens}\nmax_seq_len = 4096\n'
        f'[target]\npath = "{model}"\n[drafter]\n{extra}'
    )
    return path
