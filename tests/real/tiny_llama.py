"""Write a tiny Llama model in Hugging Face's format (config.json, safetensors weights, a
tokenizer made here with the `tokenizers` library): no download, no training, about 300
MB, served by vLLM's CPU build in its smallest configuration.

The weights are random, but arranged so that greedy decoding repeats one short cycle of
characters ("abcd abcd ...") and never produces the end-of-sequence token:

- attention and the feed-forward layers write almost nothing to the residual stream
  (their output projections are tiny), so the last hidden state is, after the final norm,
  the current token's embedding;
- the embedding gives each cycle token one dimension of its own, and every other token one
  shared dimension, each a large constant against small random noise;
- the output head scores the successor of each cycle token on that token's dimension, the
  cycle's first token on the shared one, and the end-of-sequence token negatively on all.

So whatever the prompt, the answer is the cycle from its first token on: every request
generates exactly `max_tokens` tokens, and n-gram speculation (prompt lookup) finds its
drafts in the answer's own earlier cycles and has them accepted.

The tokenizer is byte-level BPE with no merges: one token per byte (every prompt is
tokenized, every token decodes to whole ASCII characters), plus <s> and </s>.

Run with the Python that has NumPy, safetensors and tokenizers (vLLM's virtualenv):

    python tests/real/tiny_llama.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

# head_dim 64 (vLLM's CPU attention refuses 16). Big enough that a decoding step takes
# some milliseconds on 2 cores: a smaller model answers 32 tokens in under 40 ms, so every
# stream arrives whole in one network read and the streams_not_buffered rule (rightly)
# blocks the windows.
HIDDEN, HEADS, LAYERS, INTERMEDIATE, MAX_POSITIONS = 1024, 16, 6, 2816, 4096
CYCLE = "abcd "  # what every answer repeats
BOS, EOS = "<s>", "</s>"
SIGNAL, NOISE = 1.0, 0.02  # an embedding's own dimension against its random rest
HEAD_SCALE = 1.0  # after the final norm the signal is about sqrt(HIDDEN): logits ~ 32
CHAT_TEMPLATE = ("{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}\n"
                 "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")


def tokenizer() -> Tokenizer:
    """Byte-level BPE without merges: ids 0-255 are the bytes (in GPT-2's printable
    spelling), 256 and 257 are <s> and </s>."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    byte_chars = sorted(alphabet, key=lambda c: _byte_of(c))
    vocab = {char: i for i, char in enumerate(byte_chars)}
    made = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    made.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    made.decoder = decoders.ByteLevel()
    made.add_special_tokens([BOS, EOS])
    return made


def _byte_of(char: str) -> int:
    """The byte GPT-2's byte-to-unicode table spells as `char`."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1))
                 + list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    if ord(char) in printable:
        return ord(char)
    others = [b for b in range(256) if b not in printable]
    return others[ord(char) - 256]


def weights(n_vocab: int, cycle: list[int], eos: int, seed: int = 11) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def rand(*shape: int, scale: float) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * scale).astype(np.float32)

    def proj(out: int, into: int, gain: float = 1.0) -> np.ndarray:
        return rand(out, into, scale=gain / np.sqrt(into))  # outputs of about `gain`

    shared = len(cycle)  # the dimension every token outside the cycle carries
    embed = rand(n_vocab, HIDDEN, scale=NOISE)
    head = rand(n_vocab, HIDDEN, scale=NOISE)
    embed[:, : shared + 1] = 0.0
    head[:, : shared + 1] = 0.0
    embed[:, shared] = SIGNAL
    for i, token in enumerate(cycle):
        embed[token, shared] = 0.0
        embed[token, i] = SIGNAL
        head[cycle[(i + 1) % len(cycle)], i] = HEAD_SCALE
    head[cycle[0], shared] = HEAD_SCALE
    head[eos, : shared + 1] = -HEAD_SCALE
    tensors = {"model.embed_tokens.weight": embed, "lm_head.weight": head,
               "model.norm.weight": np.ones(HIDDEN, np.float32)}
    for i in range(LAYERS):
        layer = f"model.layers.{i}"
        tensors |= {
            f"{layer}.input_layernorm.weight": np.ones(HIDDEN, np.float32),
            f"{layer}.post_attention_layernorm.weight": np.ones(HIDDEN, np.float32),
            f"{layer}.self_attn.q_proj.weight": proj(HIDDEN, HIDDEN),
            f"{layer}.self_attn.k_proj.weight": proj(HIDDEN, HIDDEN),
            f"{layer}.self_attn.v_proj.weight": proj(HIDDEN, HIDDEN),
            # tiny: the residual stream stays the current token's embedding
            f"{layer}.self_attn.o_proj.weight": proj(HIDDEN, HIDDEN, gain=1e-4),
            f"{layer}.mlp.gate_proj.weight": proj(INTERMEDIATE, HIDDEN),
            f"{layer}.mlp.up_proj.weight": proj(INTERMEDIATE, HIDDEN),
            f"{layer}.mlp.down_proj.weight": proj(HIDDEN, INTERMEDIATE, gain=1e-4),
        }
    return tensors


def write(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    made = tokenizer()
    n_vocab = made.get_vocab_size()
    bos, eos = made.token_to_id(BOS), made.token_to_id(EOS)
    cycle = [made.encode(char).ids[0] for char in CYCLE]
    assert len(set(cycle)) == len(cycle), "the cycle's characters must differ"
    made.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS,
        "model_max_length": MAX_POSITIONS, "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False}, indent=1))
    (out / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": BOS, "eos_token": EOS}, indent=1))
    (out / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS, "head_dim": HIDDEN // HEADS,
        "max_position_embeddings": MAX_POSITIONS, "vocab_size": n_vocab,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
        "tie_word_embeddings": False, "bos_token_id": bos, "eos_token_id": eos,
        "torch_dtype": "float32"}, indent=1))
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": bos, "eos_token_id": eos}, indent=1))
    save_file(weights(n_vocab, cycle, eos), str(out / "model.safetensors"),
              metadata={"format": "pt"})


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/real/tiny_llama.py OUT_DIR")
    write(Path(sys.argv[1]))
