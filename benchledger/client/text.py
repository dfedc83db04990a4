"""How the client quotes what a server sent in its error texts, and keeps text writable."""

from __future__ import annotations

import json


def show(value: object, limit: int = 200) -> str:
    """A JSON value as the server spelled it (true, "7", 1.5), cut to `limit` characters;
    never raises (a value too deep to print is named by its type)."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + "..."


def safe_text(text: str) -> str:
    """`text` as valid UTF-8: a lone surrogate (JSON allows "\\ud800") cannot be written to
    Parquet, so it is escaped instead of failing the window's file."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text
