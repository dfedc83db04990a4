"""A writer waiting for the warehouse says so, and the auditor's door gives way to it.

DuckDB's file lock lets a reader in another process keep every writer out for as long as it
reads, so a `benchledger sql` query of an hour would make a run's load give up. While a
writer waits for the file (warehouse.db.connect), it holds an exclusive `flock` on
`<warehouse>.writer-waiting`; `benchledger sql`, whose queries last as long as their user
decides, looks for that lock while it runs and stops its query when it finds it
(publishing/sql_door.py). The pipeline's own readers (publish, explain, the run's summary)
are short and do not look. A flock ends with its process, so a writer killed while it
waited leaves nothing that holds readers back.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

SUFFIX = ".writer-waiting"


def signal_path(warehouse: str | Path) -> Path:
    """Beside the warehouse file, whichever way a process spells the file's path."""
    return Path(f"{Path(warehouse).resolve()}{SUFFIX}")


class WaitingWriter:
    """Held by a writer while it waits: `hold()` (again on every retry) takes the lock if
    no other waiting writer has it; `release()` lets go. Never fails the writer: a folder
    where the file cannot be made only means readers do not give way."""

    def __init__(self, warehouse: str | Path) -> None:
        self.path = signal_path(warehouse)
        self._fd: int | None = None
        self._held = False

    def hold(self) -> None:
        if self._held:
            return
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT
                                   | getattr(os, "O_NOFOLLOW", 0), 0o644)
            # Not blocking: another waiting writer already says it, and a reader's look
            # (a shared lock for an instant) is over by the next retry.
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._held = True
        except BlockingIOError:
            pass
        except OSError as exc:
            log.warning("cannot tell readers that a writer waits (%s: %s); a long "
                        "benchledger sql query will not give way", self.path, exc)
            self.release()

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)  # closing the file lets go of the lock
        self._fd, self._held = None, False


def writer_is_waiting(warehouse: str | Path) -> bool:
    """Whether some process waits to write the warehouse (holds the lock of
    signal_path). A shared lock probe: it works on a file this process cannot write."""
    try:
        fd = os.open(signal_path(warehouse), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False  # no file: no writer ever waited here
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # also lets go of the shared lock just taken
    return False
