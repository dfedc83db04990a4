"""Evidence from other harnesses and old reports: `benchledger import TOOL FILE`.

Each tool's file is parsed by its own module into an Evidence (evidence.py), which
benchledger.warehouse.imports loads, checks and derives labelled entries from. Each tool's
module registers one Importer (tools.py) under the tool's name: which files an import
reads, which names it, how it is parsed; the TOOL picks one, once. Parsing is core code:
no DuckDB, no Airflow.
"""

from __future__ import annotations

from pathlib import Path

from benchledger.imports import aiperf, guidellm, report, vllm_bench  # noqa: F401 (they register)
from benchledger.imports.evidence import Evidence, EvidenceFileError, run_id_for
from benchledger.imports.tools import IMPORTERS, Importer
from benchledger.raw.records import file_sha256
from benchledger.settings import DEFAULT_IMPORT_MAX_BYTES, parse_size, settings, variable

TOOLS = tuple(IMPORTERS)

# An imported file is read whole (Python's json holds about five times a file's size in
# memory), so its size is checked before a byte of it is read: above the limit it is
# refused, naming its size, the limit and how to raise it (docs/imports.md). The limit and
# the notation of sizes are benchledger.settings'.
DEFAULT_MAX_BYTES = DEFAULT_IMPORT_MAX_BYTES
MAX_BYTES_ENV = variable("import_max_bytes")


def import_limit(max_bytes: int | None = None) -> int:
    """The size limit: the flag's, else BENCHLEDGER_IMPORT_MAX_BYTES, else the default
    (SettingsError, a ValueError, naming a refused variable)."""
    return settings().import_max_bytes if max_bytes is None else max_bytes


def _size(n: int) -> str:
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= factor:
            return f"{n / factor:.1f} {unit}"
    return f"{n} B"


def importer(tool: str) -> Importer:
    """The tool's importer (ValueError naming the tools there are)."""
    if tool not in IMPORTERS:
        raise ValueError(f"unknown tool {tool!r}; one of {', '.join(TOOLS)}")
    return IMPORTERS[tool]


def check_sizes(tool: str, path: Path, limit: int) -> None:
    """EvidenceFileError for a file the import would read that is larger than limit bytes
    (AIPerf: its records and its summary), before any of it is read."""
    for file in importer(tool).files(path):
        size = file.stat().st_size if file.is_file() else 0
        if size > limit:
            raise EvidenceFileError(file, (
                f"{size} bytes ({_size(size)}), above the import limit of {limit} bytes "
                f"({_size(limit)}): an import reads its file whole, about five times its "
                f"size in memory; if the file is meant to be this large, raise the limit "
                f"with --max-bytes N or {MAX_BYTES_ENV}=N"))


def identity_file(tool: str, path: Path) -> Path:
    """The file whose content names the import (AIPerf: its per-request records)."""
    return importer(tool).identity(path)


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
    chosen = importer(tool)
    path = Path(path)
    check_sizes(tool, path, import_limit(max_bytes))
    sha256 = source_sha256(tool, path)
    default = chosen.default_name(chosen.identity(path))
    return chosen.parse(path, sha256, run_id_for(tool, sha256), name or default)


__all__ = ["DEFAULT_MAX_BYTES", "MAX_BYTES_ENV", "TOOLS", "Evidence", "EvidenceFileError",
           "Importer", "check_sizes", "identity_file", "import_limit", "importer",
           "parse_evidence", "parse_size", "source_sha256"]
