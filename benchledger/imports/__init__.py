"""Evidence from other harnesses and old reports: `benchledger import TOOL FILE`.

Each tool's file is parsed by its own module into an Evidence (evidence.py), which
benchledger.warehouse.imports loads, checks and derives labelled entries from. Parsing is
core code: no DuckDB, no Airflow.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from benchledger.imports import aiperf, guidellm, report, vllm_bench
from benchledger.imports.evidence import Evidence, EvidenceFileError, run_id_for
from benchledger.raw.records import file_sha256

Parser = Callable[[Path, str, str, str], Evidence]
PARSERS: dict[str, Parser] = {
    "guidellm": guidellm.parse,
    "aiperf": aiperf.parse,
    "vllm-bench": vllm_bench.parse,
    "report": report.parse,
}
TOOLS = tuple(PARSERS)

# An imported file is read whole (Python's json holds about five times a file's size in
# memory), so its size is checked before a byte of it is read: above the limit it is
# refused, naming its size, the limit and how to raise it (docs/imports.md).
DEFAULT_MAX_BYTES = 512 * 2**20
MAX_BYTES_ENV = "BENCHLEDGER_IMPORT_MAX_BYTES"
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_size(text: str) -> int:
    """A byte count: 1000, or with a binary suffix 512M, 2G, 2GiB (ValueError otherwise)."""
    number = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = number[-1:] if number[-1:] in _UNITS else ""
    try:
        value = int(number[: len(number) - len(unit)]) * _UNITS[unit]
    except ValueError:
        raise ValueError(f"{text!r} is not a size in bytes (e.g. 1000, 512M, 2G)") from None
    if value <= 0:
        raise ValueError(f"{text!r} is not a size in bytes above 0")
    return value


def import_limit(max_bytes: int | None = None) -> int:
    """The size limit: the flag's, else BENCHLEDGER_IMPORT_MAX_BYTES, else the default."""
    if max_bytes is not None:
        return max_bytes
    setting = os.environ.get(MAX_BYTES_ENV)
    if not setting:
        return DEFAULT_MAX_BYTES
    try:
        return parse_size(setting)
    except ValueError as exc:
        raise ValueError(f"{MAX_BYTES_ENV}: {exc}") from None


def _size(n: int) -> str:
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= factor:
            return f"{n / factor:.1f} {unit}"
    return f"{n} B"


def check_sizes(tool: str, path: Path, limit: int) -> None:
    """EvidenceFileError for a file the import would read that is larger than limit bytes
    (AIPerf: its records and its summary), before any of it is read."""
    files = aiperf.files_of(path) if tool == "aiperf" else (path,)
    for file in files:
        size = file.stat().st_size if file.is_file() else 0
        if size > limit:
            raise EvidenceFileError(file, (
                f"{size} bytes ({_size(size)}), above the import limit of {limit} bytes "
                f"({_size(limit)}): an import reads its file whole, about five times its "
                f"size in memory; if the file is meant to be this large, raise the limit "
                f"with --max-bytes N or {MAX_BYTES_ENV}=N"))


def identity_file(tool: str, path: Path) -> Path:
    """The file whose content names the import (AIPerf: its per-request records)."""
    return aiperf.identity(path) if tool == "aiperf" else path


def source_sha256(tool: str, path: Path) -> str:
    """The sha256 an import of `path` is known by; EvidenceFileError when it is not there."""
    path = identity_file(tool, Path(path))
    if not path.is_file():
        raise EvidenceFileError(path, "no such file")
    return file_sha256(path)


def parse_evidence(tool: str, path: Path, name: str | None = None,
                   max_bytes: int | None = None) -> Evidence:
    """Read one file of `tool` as evidence (EvidenceFileError naming the file and the
    problem when it cannot be). max_bytes: the size limit (default: import_limit())."""
    if tool not in PARSERS:
        raise ValueError(f"unknown tool {tool!r}; one of {', '.join(TOOLS)}")
    path = Path(path)
    check_sizes(tool, path, import_limit(max_bytes))
    sha256 = source_sha256(tool, path)
    identity = identity_file(tool, path)
    # an AIPerf export is a folder of fixed file names: the folder names the import
    default = identity.parent.name if tool == "aiperf" else identity.stem
    return PARSERS[tool](path, sha256, run_id_for(tool, sha256), name or default)


__all__ = ["DEFAULT_MAX_BYTES", "MAX_BYTES_ENV", "TOOLS", "Evidence", "EvidenceFileError",
           "check_sizes", "identity_file", "import_limit", "parse_evidence", "parse_size",
           "source_sha256"]
