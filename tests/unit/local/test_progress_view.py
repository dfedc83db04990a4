"""What `benchledger run` shows of its windows' progress: plain lines or a live display,
picked by whether stdout is a terminal, from the progress files of the sweep's new run."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

from benchledger.client.progress import Snapshot, Waiting, progress_line
from benchledger.local.progress_view import (
    LiveDisplay,
    PlainDisplay,
    RunWatcher,
    choose_display,
    read_snapshot,
    stopped_line,
)

WINDOW = "manual__2/sim/r0/code-c2"


def snapshot(**overrides) -> Snapshot:
    values = dict(window_id=WINDOW, phase="measuring", to_submit=100, submitted=40,
                  finished=37, failed=0, unresolved=0, elapsed_s=12.3, output_tokens=9990,
                  drain_left_s=None, interval_s=5.0)
    values.update(overrides)
    return Snapshot(**values)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_the_live_display_anything_else_plain_lines():
    assert isinstance(choose_display(Terminal(), print), LiveDisplay)
    assert isinstance(choose_display(io.StringIO(), print), PlainDisplay)
    assert isinstance(choose_display(object(), print), PlainDisplay)  # no isatty at all


def test_plain_lines_come_at_most_every_half_interval_and_the_last_always():
    said, clock = [], Clock()
    display = PlainDisplay(said.append, clock)
    display.show("a", snapshot(finished=1))
    clock.now += 2.0  # a report seen early (it came 2 s after the last one shown)
    display.show("a", snapshot(finished=2))
    clock.now += 2.6
    display.show("a", snapshot(finished=3))
    display.show("b", snapshot(window_id="other", finished=1))  # its own pace
    display.show("a", snapshot(phase="done", submitted=100, finished=100))
    assert said == [progress_line(snapshot(finished=1)), progress_line(snapshot(finished=3)),
                    progress_line(snapshot(window_id="other", finished=1)),
                    progress_line(snapshot(phase="done", submitted=100, finished=100))]


def test_a_window_whose_reports_stop_is_said_once_and_dropped():
    said, clock = [], Clock()
    display = PlainDisplay(said.append, clock)
    display.show("a", snapshot())
    clock.now += 24.0  # three intervals and the slack have not passed
    display.tick()
    assert said == [progress_line(snapshot())]
    clock.now += 2.0
    display.tick()
    display.tick()
    assert said[1:] == [stopped_line(snapshot(), 26.0)]
    assert "no report for 26 s" in said[1]


def test_the_live_display_draws_bars_and_leaves_each_finished_window_as_a_line():
    screen, clock = Terminal(), Clock()
    display = LiveDisplay(screen, clock)
    display.show("a", snapshot())
    assert display.live
    display.show("a", snapshot(phase="done", submitted=100, finished=100))
    assert not display.live  # nothing runs: the terminal is left to others
    text = screen.getvalue()
    assert "sim/r0/code-c2 measuring" in text and "37/100" in text
    assert "3 in flight" in text and "812 tok/s delivered" in text
    assert progress_line(snapshot(phase="done", submitted=100, finished=100)) in text
    display.show("b", snapshot(window_id="again"))
    clock.now += 30
    display.tick()
    assert not display.live and stopped_line(snapshot(window_id="again"), 30) in \
        screen.getvalue().replace("\n", "")
    display.close()


def write_run(raw: Path, run: str, sweep: str) -> Path:
    (raw / run).mkdir(parents=True)
    (raw / run / "run.json").write_text(json.dumps({"sweep_name": sweep, "run_id": run}))
    return raw / run


def write_report(run_dir: Path, name: str, snap: Snapshot | Waiting, mtime_ns: int) -> Path:
    path = run_dir / "sim" / "r0" / f"{name}.progress"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**snap.as_dict(), "attempt": 1}))
    os.utime(path, ns=(mtime_ns, mtime_ns))
    return path


class Recorder:
    def __init__(self) -> None:
        self.shown: list[tuple[str, Snapshot]] = []
        self.ticks = 0

    def show(self, key: str, snap: Snapshot) -> None:
        self.shown.append((Path(key).name, snap))

    def tick(self) -> None:
        self.ticks += 1

    def close(self) -> None:
        pass


def test_the_watcher_shows_each_new_report_of_this_sweeps_new_run_only(tmp_path):
    raw = tmp_path / "raw"
    earlier = write_run(raw, "manual__1", "mine")
    write_report(earlier, "code-c1", snapshot(window_id="old"), 1)
    shown = Recorder()
    watcher = RunWatcher(tmp_path, "mine", shown)
    new = write_run(raw, "manual__2", "mine")
    other = write_run(raw, "manual__3", "someone-else")
    write_report(other, "code-c1", snapshot(window_id="theirs"), 1)
    path = write_report(new, "code-c2", snapshot(), 10**18)
    (new / "sim" / "r0" / "code-c4.progress").write_text("{half a rep")  # being replaced
    watcher.poll()
    watcher.poll()  # unchanged: not shown again
    assert shown.shown == [("code-c2.progress", snapshot())] and shown.ticks == 2
    # a new report in the same mtime tick (a coarse file system clock) is still seen
    write_report(new, "code-c2", snapshot(finished=40), 10**18)
    watcher.poll()
    assert shown.shown[-1] == ("code-c2.progress", snapshot(finished=40))
    assert read_snapshot(path) == snapshot(finished=40)
    done = snapshot(phase="done", submitted=100, finished=100)
    write_report(new, "code-c2", done, 10**18 + 1)
    watcher.poll()
    watcher.poll()
    assert [snap.phase for _, snap in shown.shown] == ["measuring", "measuring", "done"]
    write_report(new, "code-c2", snapshot(phase="warm-up"), 10**18 + 2)  # a retry
    watcher.poll()
    assert shown.shown[-1] == ("code-c2.progress", snapshot(phase="warm-up"))


def test_a_run_folder_without_its_manifest_yet_is_asked_again(tmp_path):
    raw = tmp_path / "raw"
    shown = Recorder()
    watcher = RunWatcher(tmp_path, "mine", shown)  # no raw folder at all yet
    run = raw / "manual__2"
    write_report(run, "code-c1", snapshot(), 1)
    watcher.poll()
    assert shown.shown == []
    (run / "run.json").write_text(json.dumps({"sweep_name": "mine"}))
    watcher.poll()
    assert [name for name, _ in shown.shown] == ["code-c1.progress"]


def test_a_display_that_fails_is_said_once_and_the_run_goes_on(tmp_path, capsys):
    raw = tmp_path / "raw"

    class Broken(Recorder):
        def show(self, key, snap):
            raise RuntimeError("terminal gone")

    watcher = RunWatcher(tmp_path, "mine", Broken())
    write_report(write_run(raw, "manual__2", "mine"), "code-c1", snapshot(), 1)
    watcher.poll()
    watcher.poll()
    assert capsys.readouterr().err == "progress display stopped: RuntimeError: terminal gone\n"


# --- a server being waited on until ready -----------------------------------------------

RESTART = "manual__2/sim/r0"
PROBE = "http://127.0.0.1:4321/health"


def waiting(**overrides) -> Waiting:
    values = dict(restart_id=RESTART, phase="starting", probe=PROBE,
                  answer="ConnectError: All connection attempts failed", elapsed_s=12.4,
                  timeout_s=300.0, interval_s=5.0)
    values.update(overrides)
    return Waiting(**values)


def test_the_readiness_wait_is_a_plain_line_naming_probe_answer_and_time_waited():
    said, clock = [], Clock()
    display = PlainDisplay(said.append, clock)
    display.show("w", waiting())
    clock.now += 1.0  # sooner than half an interval: not said again
    display.show("w", waiting(elapsed_s=13.4))
    clock.now += 4.0
    display.show("w", waiting(answer="HTTP 503", elapsed_s=17.4))
    display.show("w", waiting(phase="ready", answer="HTTP 200", elapsed_s=31.0))
    assert said == [
        f"progress: {RESTART} starting: waiting for {PROBE}, last answer ConnectError: "
        "All connection attempts failed (12 s of 300 s)",
        f"progress: {RESTART} starting: waiting for {PROBE}, last answer HTTP 503 "
        "(17 s of 300 s)",
        f"progress: {RESTART} ready: {PROBE} answered HTTP 200 after 31 s of 300 s"]
    display.show("x", waiting(restart_id="again"))
    clock.now += 30
    display.tick()  # the wait's reports stopped: said once, as a wait, not a window
    assert said[-1] == ("progress: again: no report for 30 s (the attempt starting its "
                        "server stopped; the run's task log says why)")


def test_the_live_display_draws_the_readiness_wait_as_time_of_ready_timeout():
    screen, clock = Terminal(), Clock()
    display = LiveDisplay(screen, clock)
    display.show("w", waiting(answer="HTTP 503", elapsed_s=75.0))
    assert display.live
    text = screen.getvalue()
    assert "sim/r0 starting" in text and "75/300 s" in text  # beside a bar of the timeout
    assert f"waiting for {PROBE}, last answer HTTP 503 (75 s of 300 s)" in text
    display.show("w", waiting(phase="not ready", answer="HTTP 503", elapsed_s=300.0))
    assert not display.live  # the wait ended: its last line stays above
    assert (f"progress: {RESTART} not ready: {PROBE}, last answer HTTP 503, after 300 s of "
            "300 s") in screen.getvalue().replace("\n", "")
    display.close()


def test_a_readiness_report_reads_back_and_comes_before_its_restarts_windows(tmp_path):
    shown = Recorder()
    watcher = RunWatcher(tmp_path, "mine", shown)
    run = write_run(tmp_path / "raw", "manual__2", "mine")
    # Both written between two polls (a short window after a long wait): the wait first.
    write_report(run, "code-c1", snapshot(phase="done", submitted=100, finished=100), 1)
    ready = waiting(phase="ready", answer="HTTP 200")
    write_report(run, "readiness", ready, 1)
    watcher.poll()
    assert [name for name, _ in shown.shown] == ["readiness.progress", "code-c1.progress"]
    assert shown.shown[0][1] == ready
    assert read_snapshot(run / "sim" / "r0" / "readiness.progress") == ready
