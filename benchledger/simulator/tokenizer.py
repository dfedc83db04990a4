"""The simulator's own tokenizer.

It defines every token count the simulator reports (usage, /metrics, logs). It is
deliberately simple and deterministic: a token is a run of letters/underscores, a run of
ASCII digits, or a single other character, each with the whitespace before it attached.
Whitespace at the very end of a text is one extra token. Joining the tokens gives back the
text exactly, so counts are additive over texts that start on a token boundary.
"""

from __future__ import annotations

import re

_TOKEN_RE = re.compile(r"\s*(?:[A-Za-z_]+|[0-9]+|[^\sA-Za-z_0-9])|\s+")


def tokenize(text: str) -> list[str]:
    """Split text into tokens; ``"".join(tokenize(t)) == t`` always holds."""
    return _TOKEN_RE.findall(text)


def count_tokens(text: str) -> int:
    """Number of tokens in text (0 for the empty string)."""
    return len(tokenize(text))
