"""The tools whose files `benchledger import TOOL FILE` reads, one class each: which files an
import of a path reads, which of them names the import, and how it is parsed. Each tool's
module registers its class under the tool's name; `parse_evidence` picks one, once."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar, TypeVar

from benchledger.imports.evidence import Evidence


class Importer(ABC):
    """One tool's files as evidence. Importers keep no state: each is registered as one
    shared instance."""

    name: ClassVar[str]  # the TOOL of `benchledger import TOOL FILE`

    def files(self, path: Path) -> tuple[Path, ...]:
        """Every file an import of `path` reads (their sizes are checked before any is)."""
        return (path,)

    def identity(self, path: Path) -> Path:
        """The file whose content names the import (its sha256 is the import's)."""
        return path

    def default_name(self, identity_file: Path) -> str:
        """The import's name when none is given, from its identity file."""
        return identity_file.stem

    @abstractmethod
    def parse(self, path: Path, sha256: str, run_id: str, name: str) -> Evidence:
        """The evidence of `path` (EvidenceFileError naming the file and the problem)."""


ImporterT = TypeVar("ImporterT", bound=Importer)

IMPORTERS: dict[str, Importer] = {}


def register(cls: type[ImporterT]) -> type[ImporterT]:
    """Class decorator: the tool's one importer, under its name."""
    if cls.name in IMPORTERS:
        raise ValueError(f"two importers named {cls.name!r}")
    IMPORTERS[cls.name] = cls()
    return cls
