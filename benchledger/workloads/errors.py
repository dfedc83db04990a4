"""The one error of the workloads package."""

from __future__ import annotations

from pathlib import Path


class WorkloadError(ValueError):
    """A workload that cannot be prepared. Its message names the file, the line (where there
    is one) and what is wrong, e.g. `data/chat.jsonl, line 7: empty prompt`."""


def at(path: Path | str, line: int | None, what: str) -> WorkloadError:
    """The error for `what` on `line` of `path` (no line: the file as a whole)."""
    where = f"{path}, line {line}" if line is not None else f"{path}"
    return WorkloadError(f"{where}: {what}")
