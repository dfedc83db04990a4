"""The one redactor: a secret (a server's API key) out of anything recorded or shown.

A server may echo its key back (in an error, a log line, its model list, a finish reason),
so everything that reaches a raw file, a task log or the terminal from a keyed server goes
through `redact` first: the client's rows, the restart's manifest and observations, the
effective config, the readiness errors.
"""

from __future__ import annotations

from typing import Any

REDACTED = "<redacted>"


def redact(value: Any, secret: str | None) -> Any:
    """`value` (a str, or dicts, lists and tuples of them, as deep as they go) with every
    occurrence of `secret` replaced by REDACTED; other values as they are."""
    if not secret:
        return value
    if isinstance(value, str):
        return value.replace(secret, REDACTED) if secret in value else value
    if isinstance(value, dict):
        return {k: redact(v, secret) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v, secret) for v in value]
    return value
