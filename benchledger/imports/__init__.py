"""Evidence from other harnesses and old reports: `benchledger import TOOL FILE`.

Each tool's file is parsed by its own module into an Evidence (evidence.py), which
benchledger.warehouse.imports loads, checks and derives labelled entries from. Parsing is
core code: no DuckDB, no Airflow.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from benchledger.imports import aiperf, guidellm, report, vllm_bench
from benchledger.imports.evidence import Evidence, EvidenceFileError, run_id_for
from benchledger.records import file_sha256

Parser = Callable[[Path, str, str, str], Evidence]
PARSERS: dict[str, Parser] = {
    "guidellm": guidellm.parse,
    "aiperf": aiperf.parse,
    "vllm-bench": vllm_bench.parse,
    "report": report.parse,
}
TOOLS = tuple(PARSERS)


def identity_file(tool: str, path: Path) -> Path:
    """The file whose content names the import (AIPerf: its per-request records)."""
    return aiperf.identity(path) if tool == "aiperf" else path


def source_sha256(tool: str, path: Path) -> str:
    """The sha256 an import of `path` is known by; EvidenceFileError when it is not there."""
    path = identity_file(tool, Path(path))
    if not path.is_file():
        raise EvidenceFileError(path, "no such file")
    return file_sha256(path)


def parse_evidence(tool: str, path: Path, name: str | None = None) -> Evidence:
    """Read one file of `tool` as evidence (EvidenceFileError naming the file and the
    problem when it cannot be)."""
    if tool not in PARSERS:
        raise ValueError(f"unknown tool {tool!r}; one of {', '.join(TOOLS)}")
    path = Path(path)
    sha256 = source_sha256(tool, path)
    identity = identity_file(tool, path)
    # an AIPerf export is a folder of fixed file names: the folder names the import
    default = identity.parent.name if tool == "aiperf" else identity.stem
    return PARSERS[tool](path, sha256, run_id_for(tool, sha256), name or default)


__all__ = ["TOOLS", "Evidence", "EvidenceFileError", "identity_file", "parse_evidence",
           "source_sha256"]
