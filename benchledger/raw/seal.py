"""The run's seal (issue #39): the sha256 of every raw file the loader reads, recorded by
the step that writes it, at the moment it writes it, so that a later rebuild of the
warehouse from the raw folder refuses a file none of the run's steps wrote.

Window files were re-hashed against their window manifest at every load, but nothing
checked the manifests themselves: a `server_version` edited in a restart.json loaded
silently into a fresh warehouse. The run manifest cannot list the files itself: many tasks
on many nodes write a run's files at once, each node into its own copy of an object
store's folder, and one file rewritten by all of them would lose entries. So each writing
process appends to a seal file of its own (`seal-<host>-<token>-<pid>.jsonl`, one JSON
line per file version: the file's path relative to the seal's folder and its sha256),
kept in the folder that is pushed and pulled with the files it covers (the run folder for
run.json, a restart's folder for everything of that restart), and the run manifest says
the run is sealed (`seal`: SEAL_VERSION). Runs written before the seal have no `seal` key
and load as before.

An entry is appended before its file is renamed into place: a crash between the two
leaves the earlier version in place, which the seal recorded too, never a file it does not
know. The seal accepts any version the run's steps wrote (a restart manifest is rewritten
at each step); it refuses content none of them wrote (a hand edit, another tool's rewrite,
a bit flipped on disk). It is not a signature: whoever can rewrite the seal files can
rewrite what they cover. Keep the raw folder where those who may edit it cannot (an object
store with object lock, a read-only mount for the auditors) when that matters.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

SEAL_VERSION = 1  # the run manifest's `seal`: its files are sealed as this module says
SEAL_PREFIX, SEAL_SUFFIX = "seal-", ".jsonl"
# Made once per interpreter, with the pid beside it in the name: a forked task process
# writes a file of its own, and no two hosts (or processes) ever append to one file.
_TOKEN = uuid.uuid4().hex[:12]


def _own_seal(folder: Path) -> Path:
    host = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname())[:64] or "host"
    return folder / f"{SEAL_PREFIX}{host}-{_TOKEN}-{os.getpid()}{SEAL_SUFFIX}"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def record(folder: Path, written: Iterable[tuple[Path, str]]) -> None:
    """Append (final path, sha256) of each file about to be put in place to this process's
    seal file in `folder` (the run folder, or the restart's). One write of whole lines
    with O_APPEND: a crash never leaves half an entry that a later line follows."""
    at = datetime.now(UTC).isoformat()
    lines = "".join(json.dumps({"file": Path(path).relative_to(folder).as_posix(),
                                "sha256": sha256, "at": at}) + "\n"
                    for path, sha256 in written)
    if not lines:
        return
    folder.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(_own_seal(folder), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, lines.encode())
    finally:
        os.close(descriptor)


@dataclass(frozen=True)
class Seal:
    """Every version of every file the run's steps recorded, by the file's path."""

    versions: dict[Path, set[str]] = field(default_factory=dict)

    def refusal(self, path: Path, sha256: str) -> str | None:
        """Why `path` with this content must not be loaded; None when a step of the run
        wrote exactly it."""
        recorded = self.versions.get(_normal(path))
        if not recorded:
            return (f"{path}: not in the run's seal (no step of the run recorded writing "
                    "it); refusing to load the run")
        if sha256 not in recorded:
            return (f"{path}: sha256 {sha256} is not a version the run's steps wrote (its "
                    f"seal recorded {', '.join(sorted(recorded))}): the file changed after it "
                    "was written; refusing to load the run (docs/storage.md: the seal)")
        return None


def read_seal(run_dir: Path) -> Seal:
    """The seal files of a run folder, every entry of each. A last line without its newline
    is a write cut short and is left out (its file was not yet renamed into place)."""
    versions: dict[Path, set[str]] = {}
    for seal_file in sorted(Path(run_dir).rglob(f"{SEAL_PREFIX}*{SEAL_SUFFIX}")):
        text = seal_file.read_text(errors="replace")
        for line in text.split("\n")[:-1]:
            try:
                entry = json.loads(line)
                path, sha256 = seal_file.parent / entry["file"], str(entry["sha256"])
            except (ValueError, KeyError, TypeError):
                continue  # a line no writer of this module wrote seals nothing
            versions.setdefault(_normal(path), set()).add(sha256)
    return Seal(versions)


def _normal(path: Path) -> Path:
    """One spelling of a path below the run folder (a manifest may name a file through
    `..`); links are not followed: the folder is what was written."""
    return Path(os.path.normpath(path))


def is_seal_file(name: str) -> bool:
    return name.startswith(SEAL_PREFIX) and name.endswith(SEAL_SUFFIX)
