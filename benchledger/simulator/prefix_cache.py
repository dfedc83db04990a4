"""Automatic prefix caching, modelled on vLLM v1.

The prompt is cut into blocks of ``block_tokens`` tokens. Each full block is known by a
chained hash: the hash of the previous block's hash plus the block's own tokens, so one
hash stands for the whole token sequence from the start of the prompt through that block
(equal hashes mean equal prefixes, and a changed first token changes every block hash).
The cache is a set of such hashes with an LRU cap; no token data is kept.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Sequence


def block_hashes(tokens: Sequence[str], block_tokens: int) -> list[bytes]:
    """Chained hashes of the full blocks of `tokens` (a trailing partial block has none)."""
    hashes: list[bytes] = []
    parent = b""
    for start in range(0, len(tokens) - block_tokens + 1, block_tokens):
        # JSON keeps token boundaries unambiguous whatever characters the tokens hold
        block = json.dumps(list(tokens[start:start + block_tokens])).encode("utf-8")
        parent = hashlib.sha256(parent + block).digest()
        hashes.append(parent)
    return hashes


class PrefixCache:
    """The set of cached block hashes, least recently used first."""

    def __init__(self, block_tokens: int, max_blocks: int) -> None:
        self.block_tokens = block_tokens
        self.max_blocks = max_blocks
        self._blocks: OrderedDict[bytes, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def lookup(self, hashes: Sequence[bytes], prompt_tokens: int) -> int:
        """Tokens in the longest run of leading cached blocks. The last prompt token is
        always computed (its logits give the first output token), so like vLLM only blocks
        within the first prompt_tokens - 1 tokens can hit."""
        usable = min(len(hashes), (prompt_tokens - 1) // self.block_tokens)
        hits = 0
        while hits < usable and hashes[hits] in self._blocks:
            hits += 1
        self._touch(hashes[:hits])
        return hits * self.block_tokens

    def insert(self, hashes: Sequence[bytes]) -> None:
        """Cache a prefilled prompt's full blocks, evicting the least recently used."""
        self._touch(hashes)
        while len(self._blocks) > self.max_blocks:
            self._blocks.popitem(last=False)

    def _touch(self, hashes: Sequence[bytes]) -> None:
        # Last block first, so a prompt's tail is evicted before its head (as in vLLM): a
        # block is useless once its parent is gone, since lookups stop at the first miss.
        for digest in reversed(hashes):
            self._blocks[digest] = None
            self._blocks.move_to_end(digest)
