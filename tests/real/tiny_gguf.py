"""Write a tiny llama-architecture GGUF model with the `gguf` package: no download, no
training, a few hundred kilobytes, loads in llama.cpp (and llama-cpp-python's server) in
well under a second.

The weights are random, but arranged so that generation never ends early: one embedding
dimension is a large constant that attention and the feed-forward layers never write to,
and the output head scores every character token positively on it and the special and byte
tokens negatively. So the end-of-sequence token is never sampled, every request generates
exactly `max_tokens` tokens, and every token decodes to one whole character (a random byte
token could split a character, which a server may hold back or drop).

Run with the Python that has `gguf` and NumPy (the test tier's own virtualenv):

    python tests/real/tiny_gguf.py OUT.gguf
"""

from __future__ import annotations

import sys

import gguf
import numpy as np

N_EMBD, N_HEAD, N_FF, N_LAYER, N_CTX = 64, 4, 128, 1, 1024
CONSTANT = 32.0  # embedding dimension 0: the bias that keeps special tokens out
SPACE = "\u2581"  # SentencePiece's word-boundary mark
CHARACTERS = ([SPACE] + list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
              + list(".,:;!?'\"-()[]{}<>|/=_*#@&%+"))


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    """SentencePiece-style vocabulary: unk, bos, eos, 256 byte fallbacks, then one piece per
    character and nothing longer. Single characters make the server's tokenizer give back
    exactly the tokens generated (a real vocabulary's merges may not), so a
    token_count = "server_tokenizer" arm calibrates clean on this model."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + CHARACTERS
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * len(CHARACTERS)
    return tokens, [0.0] * len(tokens), [int(t) for t in types]


def weights(n_vocab: int, is_word: np.ndarray, seed: int = 7) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def rand(*shape, scale=0.3):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    embed = rand(n_vocab, N_EMBD, scale=1.0)
    embed[:, 0] = CONSTANT
    head = rand(n_vocab, N_EMBD, scale=0.1)
    head[:, 0] = np.where(is_word, 1.0, -1.0)
    tensors = {"token_embd.weight": embed, "output.weight": head,
               "output_norm.weight": np.ones(N_EMBD, np.float32)}
    for i in range(N_LAYER):
        attn_out, ffn_down = rand(N_EMBD, N_EMBD, scale=0.1), rand(N_EMBD, N_FF, scale=0.1)
        attn_out[0, :] = 0.0  # never write to the constant dimension
        ffn_down[0, :] = 0.0
        tensors |= {
            f"blk.{i}.attn_norm.weight": np.ones(N_EMBD, np.float32),
            f"blk.{i}.attn_q.weight": rand(N_EMBD, N_EMBD),
            f"blk.{i}.attn_k.weight": rand(N_EMBD, N_EMBD),
            f"blk.{i}.attn_v.weight": rand(N_EMBD, N_EMBD),
            f"blk.{i}.attn_output.weight": attn_out,
            f"blk.{i}.ffn_norm.weight": np.ones(N_EMBD, np.float32),
            f"blk.{i}.ffn_gate.weight": rand(N_FF, N_EMBD),
            f"blk.{i}.ffn_up.weight": rand(N_FF, N_EMBD),
            f"blk.{i}.ffn_down.weight": ffn_down,
        }
    return tensors


CHAT_TEMPLATE = ("{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}\n"
                 "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")


def write(path: str) -> None:
    tokens, scores, types = vocabulary()
    is_word = np.array([t == gguf.TokenType.NORMAL for t in types])
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("benchledger-tiny-random")
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_space_prefix(False)  # " a" is two tokens, generated or re-tokenized
    writer.add_chat_template(CHAT_TEMPLATE)
    for name, array in weights(len(tokens), is_word).items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/real/tiny_gguf.py OUT.gguf")
    write(sys.argv[1])
