"""The restart manifest: what every step of one restart leaves on record, and reads back.

Each step rewrites the restart's manifest before it returns or raises, so a failed launch,
a server that never became healthy, one that crashed mid-window, a window whose files could
not be written and an attempt killed mid-window are all on record, never lost:

- `unwritten_windows`: windows whose files are missing, and why (the restart cannot count
  until a retry writes them; then it gets back the status it had, a crash excepted);
- `interrupted_windows`: attempts that started a window and left no files for it (killed
  or failed), noticed through the `.started` mark such an attempt leaves behind, once each
  however often it is noticed.
"""

from __future__ import annotations

import errno
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Unpack, cast

from benchledger.raw import layout as raw
from benchledger.raw.layout import Attempt, RestartManifest, RestartStatus, RunLayout, WindowFiles

log = logging.getLogger(__name__)


def utc_now() -> str:
    return datetime.now(UTC).isoformat()


class RawWriteError(RuntimeError):
    """A raw file could not be written (full disk, unwritable folder); names path and errno."""


class ServerCrashed(RuntimeError):
    """The server died during a window: the restart is recorded as crashed."""


def os_error_text(exc: OSError, path: Path) -> str:
    """`path: ENOSPC (No space left on device)`: the file and the OS's own words."""
    name = errno.errorcode.get(exc.errno) if isinstance(exc.errno, int) else None
    reason = exc.strerror or str(exc) or type(exc).__name__
    return f"{path}: {name} ({reason})" if name else f"{path}: {reason}"


@dataclass(frozen=True)
class RestartRecord:
    """The manifest of one restart slot (arm x restart index) of a run."""

    layout: RunLayout
    arm: str
    k: int

    @property
    def path(self) -> Path:
        return self.layout.restart_manifest(self.arm, self.k)

    @property
    def restart_id(self) -> str:
        return self.layout.restart_id(self.arm, self.k)

    def read(self) -> RestartManifest:
        """The manifest so far ({} before the launch wrote it)."""
        return cast(RestartManifest, raw.read_manifest(self.path))

    def update(self, status: RestartStatus | None = None, /,
               **changes: Unpack[RestartManifest]) -> RestartManifest:
        """Merge `changes` (and the new status, if one is given) into the manifest and
        write it atomically; a manifest that cannot be written raises RawWriteError
        naming the file and the errno. `changes` are the manifest's own keys, so a key it
        does not have (a typo) is a type error, not a field no reader looks at."""
        manifest: RestartManifest = {**self.read(), **changes}
        if status is not None:
            manifest["status"] = status
        try:
            raw.write_json(self.path, manifest,
                           sealed_in=self.layout.slot_dir(self.arm, self.k))
        except OSError as exc:
            raise RawWriteError(f"{self.restart_id}: the restart manifest could not be "
                                f"written: {os_error_text(exc, self.path)}") from exc
        return manifest

    def refuse_after_crash(self) -> None:
        """A retried or later step of a crashed restart measures nothing: it would only
        overwrite the crashed window's evidence with requests to a dead server."""
        manifest = self.read()
        if manifest.get("status") == "crashed":
            raise ServerCrashed(f"{self.arm} r{self.k}: not measured: the restart already "
                                f"crashed ({manifest.get('error')})")

    def crashed(self, window_id: str, evidence: str, node: str | None = None) -> ServerCrashed:
        """Record that a process of the deployment died during `window_id`: the server (the
        head) or, for an arm that spans nodes, another node's (its name, else the head's
        own node); the error to raise."""
        manifest = self.read()
        head = manifest.get("requested_node")
        what = ("the server" if node is None or node == head
                else f"the process on node {node}")
        error = f"{what} died during window {window_id}: {evidence}"
        self.update(status="crashed", error=error, crashed_in_window=window_id,
                    crashed_node=node or head)
        return ServerCrashed(f"{self.arm} r{self.k}: {error}")

    # --- windows started, not written ---------------------------------------------------

    def mark_started(self, files: WindowFiles, window_id: str, attempt: Attempt) -> None:
        """Record an earlier attempt's leftover mark as an interrupted window, then mark this
        attempt's start. The mark is evidence, not a precondition: a disk that cannot take
        it (logged) fails the window's own write next, and that failure is recorded."""
        if files.started.exists():
            self._record_interrupted(read_mark(files.started, window_id),
                                     noticed_by=f"measure attempt {attempt.number}")
        try:
            raw.write_json(files.started, {"window_id": window_id, "attempt": attempt.number,
                                           "worker_hostname": attempt.worker_hostname,
                                           "started_at": utc_now()})
        except OSError as exc:
            log.warning("%s: could not mark the window as started: %s", window_id,
                        os_error_text(exc, files.started))

    def _record_interrupted(self, mark: dict[str, Any], noticed_by: str) -> None:
        known = self.read().get("interrupted_windows") or []
        updated = with_interrupted(known, mark, noticed_by)
        if updated != known:
            self.update(interrupted_windows=updated)

    def fold_leftover_marks(self, noticed_by: str) -> RestartManifest:
        """Every mark left in the restart's folder goes to `interrupted_windows` (called
        when no attempt of the restart measures anymore); returns the manifest."""
        manifest = self.read()
        marks = fold_leftover_marks(self.layout.slot_dir(self.arm, self.k), manifest,
                                    noticed_by)
        if marks:
            manifest = self.update(interrupted_windows=manifest["interrupted_windows"])
            raw.remove_quietly(*marks)
        return manifest

    # --- windows measured, not written ----------------------------------------------------

    def unwritten(self, window_id: str, error: str, gone: str | None) -> None:
        """The window's files are missing and why; the restart cannot count (a dead server
        makes it crashed, anything else failed)."""
        manifest = self.read()
        changes: RestartManifest = {
            "error": error + (f"; and the server died during it: {gone}" if gone else ""),
            "unwritten_windows": sorted({*manifest.get("unwritten_windows", []), window_id})}
        if gone:
            changes["crashed_in_window"] = window_id
        if raw.is_healthy(manifest.get("status")):
            changes["status_before_unwritten"] = manifest["status"]
        self.update("crashed" if gone else "failed", **changes)

    def written(self, window_id: str) -> None:
        """A retried step wrote a window an earlier attempt could not: when it was the last
        one missing, the restart gets back the status it had (a crash is never undone)."""
        manifest = self.read()
        if window_id not in manifest.get("unwritten_windows", []):
            return
        unwritten = [w for w in manifest["unwritten_windows"] if w != window_id]
        before = manifest.get("status_before_unwritten")
        if not unwritten and manifest.get("status") == "failed" and before:
            self.update(before, unwritten_windows=unwritten, error=None,
                        status_before_unwritten=None)
        else:
            self.update(unwritten_windows=unwritten)


def read_mark(marker: Path, window_id: str) -> dict[str, Any]:
    try:
        mark: dict[str, Any] = raw.read_json(marker)
        return mark
    except (OSError, ValueError) as exc:  # written atomically; say so should it ever not be
        return {"window_id": window_id, "error": f"unreadable mark {marker.name}: {exc}"}


def with_interrupted(known: list[dict[str, Any]], mark: dict[str, Any],
                     noticed_by: str) -> list[dict[str, Any]]:
    """`known` interrupted windows plus the one a mark describes, unless it is listed."""
    entry = {key: mark.get(key) for key in
             ("window_id", "attempt", "started_at", "worker_hostname")}
    if mark.get("error"):
        entry["error"] = mark["error"]
    same = ("window_id", "attempt", "started_at")
    if any(all(old.get(key) == entry.get(key) for key in same) for old in known):
        return known
    return [*known, {**entry, "noticed_by": noticed_by}]


def fold_leftover_marks(slot: Path, manifest: RestartManifest | dict[str, Any],
                        noticed_by: str) -> list[Path]:
    """Add every window mark left in a restart's folder to its manifest's
    `interrupted_windows` (the manifest dict is changed; the caller writes it, then
    removes the marks returned)."""
    marks = raw.started_marks(slot)
    interrupted = manifest.get("interrupted_windows") or []
    for mark in marks:
        window_id = raw.window_id_of_mark(manifest.get("restart_id"), mark)
        interrupted = with_interrupted(interrupted, read_mark(mark, window_id), noticed_by)
    if marks:
        manifest["interrupted_windows"] = interrupted
    return marks
