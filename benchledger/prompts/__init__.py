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
