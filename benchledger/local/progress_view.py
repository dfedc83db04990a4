"""The progress of a run's windows in the terminal of `benchledger run`.

Each measure task writes `<workload>-c<N>.progress` beside the window's raw files, and each
task waiting for a server to be ready `readiness.progress` in its restart's folder
(benchledger.client.progress). This module watches a data dir's raw folder for the files of one
sweep's new run and shows them: a live display (rich) when stdout is a terminal, plain
`progress: ...` lines otherwise (a log file, a pipe, a test), one each time a task reports,
never more than one per window every half interval. A window whose reports stop (its task
was killed, or its worker vanished) is said once and dropped.

Only the files are read: the same display serves an embedded run (a thread beside the
runner process) and `run --cluster` (polled by follow(), on a data dir every node sees).
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from benchledger.client.progress import (
    Snapshot,
    Waiting,
    progress_line,
    progress_state,
    waiting_line,
    waiting_state,
)
from benchledger.raw import layout as raw

if TYPE_CHECKING:  # rich is imported by a live display only, not with this module
    from rich.console import Group

POLL_S = 1.0  # at most; a shorter interval polls at half of it
# Reports missed before a window counts as stopped, plus slack for a busy machine.
STALE_INTERVALS, STALE_SLACK_S = 3, 10.0


# A report in a progress file: a window's part, or a server being waited on until ready.
Report = Snapshot | Waiting


class Display(Protocol):
    def show(self, key: str, snapshot: Report) -> None: ...
    def tick(self) -> None: ...
    def close(self) -> None: ...


def stale_after_s(snapshot: Report) -> float:
    return STALE_INTERVALS * snapshot.interval_s + STALE_SLACK_S


def is_last(snapshot: Report) -> bool:
    """Whether no report follows this one (a window done, a wait ended)."""
    return snapshot.ended if isinstance(snapshot, Waiting) else snapshot.phase == "done"


def line_of(snapshot: Report) -> str:
    return waiting_line(snapshot) if isinstance(snapshot, Waiting) else progress_line(snapshot)


def stopped_line(snapshot: Report, silent_s: float) -> str:
    if isinstance(snapshot, Waiting):
        return (f"progress: {snapshot.restart_id}: no report for {silent_s:.0f} s (the "
                "attempt starting its server stopped; the run's task log says why)")
    return (f"progress: {snapshot.window_id}: no report for {silent_s:.0f} s (the attempt "
            "measuring it stopped; the run's task log says why)")


class PlainDisplay:
    """Lines through `say`: each new report of a window, at most one per half interval
    (a report every interval, seen a little late or early, is still shown), and always
    its last one."""

    def __init__(self, say: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic):
        self._say, self._clock = say, clock
        self._said_at: dict[str, float] = {}
        self._running: dict[str, tuple[float, Report]] = {}  # key -> (seen at, report)

    def show(self, key: str, snapshot: Report) -> None:
        now = self._clock()
        if is_last(snapshot):
            self._running.pop(key, None)
            self._say(line_of(snapshot))
            return
        self._running[key] = (now, snapshot)
        if now - self._said_at.get(key, -float("inf")) >= snapshot.interval_s / 2:
            self._said_at[key] = now
            self._say(line_of(snapshot))

    def tick(self) -> None:
        now = self._clock()
        for key, (seen_at, snapshot) in list(self._running.items()):
            if now - seen_at > stale_after_s(snapshot):
                del self._running[key]
                self._say(stopped_line(snapshot, now - seen_at))

    def close(self) -> None:
        return None


class LiveDisplay:
    """A bar per running window, its details on the line below; a finished (or stopped)
    window leaves its last line above them. The live area exists only while some window
    runs, so nothing else written to the terminal (the runner's summary) lands inside it."""

    def __init__(self, stream: TextIO, clock: Callable[[], float] = time.monotonic):
        from rich.console import Console
        from rich.live import Live

        self._clock = clock
        self._live = Live(console=Console(file=stream), refresh_per_second=2, transient=True)
        self._running: dict[str, tuple[float, Report]] = {}  # key -> (seen at, report)

    @property
    def live(self) -> bool:
        return self._live.is_started

    def show(self, key: str, snapshot: Report) -> None:
        if is_last(snapshot):
            self._finish(key, line_of(snapshot))
            return
        self._running[key] = (self._clock(), snapshot)
        self._live.update(self._render(), refresh=self.live)
        if not self.live:
            self._live.start(refresh=True)

    def tick(self) -> None:
        now = self._clock()
        for key, (seen_at, snapshot) in list(self._running.items()):
            if now - seen_at > stale_after_s(snapshot):
                self._finish(key, stopped_line(snapshot, now - seen_at))

    def _render(self) -> Group:
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        parts: list[Any] = []
        for _, snapshot in self._running.values():
            line = Table.grid(padding=(0, 1))
            # The run is the same for every window: arm/r<k>/<workload>-c<N> is enough.
            if isinstance(snapshot, Waiting):  # the bar: time waited of ready_timeout_s
                line.add_row(f"{snapshot.restart_id.split('/', 1)[-1]} {snapshot.phase}",
                             ProgressBar(total=max(snapshot.timeout_s, 1e-9),
                                         completed=min(snapshot.elapsed_s, snapshot.timeout_s),
                                         width=20),
                             f"{snapshot.elapsed_s:.0f}/{snapshot.timeout_s:g} s")
                parts += [line, Text(f"  {waiting_state(snapshot)}")]
                continue
            line.add_row(f"{snapshot.window_id.split('/', 1)[-1]} {snapshot.phase}",
                         ProgressBar(total=max(snapshot.to_submit, 1),
                                     completed=snapshot.finished, width=20),
                         f"{snapshot.finished}/{snapshot.to_submit}")
            parts += [line, Text(f"  {progress_state(snapshot)}")]
        return Group(*parts)

    def _finish(self, key: str, line: str) -> None:
        self._live.console.print(line, highlight=False, markup=False, soft_wrap=True)
        self._running.pop(key, None)
        self._live.update(self._render(), refresh=self.live)
        if not self._running:
            self.close()

    def close(self) -> None:
        if self.live:
            self._live.stop()


def choose_display(stream: TextIO, say: Callable[[str], None]) -> Display:
    """Live bars on a terminal; plain lines anywhere else (a log keeps every line)."""
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        return LiveDisplay(stream)
    return PlainDisplay(say)


def read_snapshot(path: Path) -> Report | None:
    """The report in a progress file (a window's, or a readiness wait's); None when it is
    gone or not (yet) one."""
    try:
        data = json.loads(path.read_text())
        if isinstance(data, dict) and "kind" in data:
            return Waiting.from_dict(data)
        return Snapshot.from_dict(data)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


class RunWatcher:
    """The progress files of the runs of one sweep that begin after it was created (a run
    folder that already existed is never this run), each report shown once."""

    def __init__(self, data_dir: Path, sweep_name: str, display: Display):
        self._data_dir, self._sweep_name, self._display = Path(data_dir), sweep_name, display
        self._earlier = {p.name for p in self._run_dirs()}
        self._ours: dict[Path, bool] = {}
        self._shown: dict[Path, Report] = {}  # progress file -> the report last shown
        self._done_at: dict[Path, int] = {}  # progress file -> mtime_ns of its done report
        self._broken = False

    def _run_dirs(self) -> list[Path]:
        try:
            return raw.run_dirs(self._data_dir)
        except OSError:
            return []  # no raw folder yet

    def _is_ours(self, run_dir: Path) -> bool:
        if run_dir.name in self._earlier:
            return False
        if run_dir not in self._ours:
            try:
                sweep_name = raw.read_json(run_dir / raw.RUN_MANIFEST).get("sweep_name")
            except (OSError, ValueError, AttributeError):
                return False  # not written yet: asked again next time
            self._ours[run_dir] = sweep_name == self._sweep_name
        return self._ours[run_dir]

    def poll(self) -> None:
        """Show what changed since the last poll. A display that fails is said once and
        shows nothing more: progress is a courtesy, the run is not."""
        if self._broken:
            return
        try:
            self._show_changes()
        except Exception as exc:  # noqa: BLE001 (see above)
            self._broken = True
            print(f"progress display stopped: {type(exc).__name__}: {exc}",
                  file=sys.stderr, flush=True)

    def _progress_files(self) -> list[Path]:
        # Only inside new run folders: a data dir of years of runs is not walked each poll.
        # A restart's readiness wait comes before its windows (both may end between polls).
        return sorted((path for run_dir in self._run_dirs() if self._is_ours(run_dir)
                       for path in raw.progress_files(run_dir)),
                      key=lambda path: (path.parent, path.name != raw.READINESS_PROGRESS,
                                        path.name))

    def _show_changes(self) -> None:
        # A running window's file is read on every poll (a coarse mtime, as on NFS, could
        # hide a report); a finished one again only when it changes (a retry measures it).
        for path in self._progress_files():
            try:
                mtime_ns = path.stat().st_mtime_ns
            except OSError:
                continue
            if self._done_at.get(path) == mtime_ns:
                continue
            snapshot = read_snapshot(path)
            if snapshot is None or snapshot == self._shown.get(path):
                continue
            self._shown[path] = snapshot
            if is_last(snapshot):
                self._done_at[path] = mtime_ns
            self._display.show(str(path), snapshot)
        self._display.tick()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._display.close()


def say_line(line: str) -> None:
    print(line, flush=True)


def run_watcher(data_dir: Path, sweep_name: str, stream: TextIO | None = None,
                say: Callable[[str], None] = say_line) -> RunWatcher:
    """A watcher of the sweep's next run, showing on `stream` (default: stdout)."""
    return RunWatcher(data_dir, sweep_name, choose_display(stream or sys.stdout, say))


@contextlib.contextmanager
def watching(watcher: RunWatcher, interval_s: float) -> Iterator[RunWatcher]:
    """Poll `watcher` in a thread while the body runs (the CLI waiting on its runner),
    then once more, so the last reports are shown before whatever the body prints next."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(min(POLL_S, interval_s / 2)):
            watcher.poll()

    thread = threading.Thread(target=loop, name="benchledger-progress", daemon=True)
    thread.start()
    try:
        yield watcher
    finally:
        stop.set()
        thread.join(timeout=5)
        if not thread.is_alive():  # never two pollers at once
            watcher.poll()
        watcher.close()
