"""Built-in prompt sets ("code" and "prose"): fixed prompts, so runs are comparable (T9)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib.resources import files


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


def load_prompt_set(name: str) -> list[Prompt]:
    resource = files(__name__) / f"{name}.json"
    if not resource.is_file():
        raise ValueError(f"unknown prompt set {name!r}")
    data = json.loads(resource.read_text(encoding="utf-8"))
    return [Prompt(id=p["id"], text=p["text"]) for p in data["prompts"]]


# Filler for long-input workloads: plain English words, one token each on common
# tokenizers, cycled deterministically so every run sends the same text.
_FILLER = (
    "the river ran past the old mill where the town kept its records of every harvest "
    "and every flood since the bridge was built of stone and timber by the first families "
    "who settled along the valley floor in the spring"
)
FILLER_WORDS = tuple(_FILLER.split())


def filler_text(words: int) -> str:
    return " ".join(FILLER_WORDS[i % len(FILLER_WORDS)] for i in range(words))


def cold_prefix(seed: int, request_key: str) -> str:
    """A unique, seeded, recorded prefix: no two requests share a first cache block (T9)."""
    digest = hashlib.sha256(f"{seed}/{request_key}".encode()).hexdigest()[:24]
    return f"[request {digest}]"


def shape_prompt(prompt: Prompt, prefix: str | None, filler_words: int | None) -> Prompt:
    """The text actually sent: optional unique prefix, optional filler, then the prompt."""
    parts = [p for p in (prefix, filler_text(filler_words) if filler_words else None) if p]
    if not parts:
        return prompt
    context = "\n\n".join(parts)
    return Prompt(id=prompt.id, text=f"{context}\n\nTask: {prompt.text}")
