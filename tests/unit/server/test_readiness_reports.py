"""What a readiness wait reports while a server starts (the progress `benchledger run`
shows before any window): the probe asked, its last answer, the time waited of the
timeout; one report per interval, and always the last, ready or not."""

from __future__ import annotations

import pytest

from benchledger.client.progress import ReadinessReporter, Waiting, shortened
from benchledger.server import lifecycle
from tests.unit.server.test_lifecycle import readiness_server  # noqa: F401 (a fixture)


def reporter(reports: list[Waiting], interval_s: float = 60.0) -> ReadinessReporter:
    return ReadinessReporter("run/sim/r0", 30.0, interval_s, reports.append)


def test_each_not_yet_is_reported_once_an_interval_and_the_ready_answer_always(
        readiness_server):  # noqa: F811
    server, handle = readiness_server({"/health": [503, 503, 503, 200]})
    reports: list[Waiting] = []
    ready = lifecycle.wait_ready(handle, "/health", 30, report=reporter(reports))
    url = handle.base_url + "/health"
    # The first probe at once; the next two within the interval: not reported.
    assert [(r.phase, r.probe, r.answer) for r in reports] == [
        ("starting", url, "HTTP 503"), ("ready", url, "HTTP 200")]
    assert reports[-1].elapsed_s == pytest.approx(ready.waited_s)
    assert all(r.timeout_s == 30.0 and r.restart_id == "run/sim/r0" for r in reports)


def test_a_server_without_health_is_reported_by_the_path_it_falls_back_to(
        readiness_server):  # noqa: F811
    server, handle = readiness_server({"/health": [404], "/v1/models": [503, 200]})
    reports: list[Waiting] = []
    lifecycle.wait_ready(handle, "/health", 30, report=reporter(reports, interval_s=0.0))
    assert [(r.phase, r.probe.removeprefix(handle.base_url), r.answer) for r in reports] == [
        ("starting", "/v1/models", "HTTP 503"), ("ready", "/v1/models", "HTTP 200")]


def test_a_wait_that_ends_without_ready_says_so_with_the_last_answer(
        readiness_server):  # noqa: F811
    server, handle = readiness_server({"/health": [503]})
    reports: list[Waiting] = []
    with pytest.raises(lifecycle.ServerNotReady, match="not healthy after 0.6 s"):
        lifecycle.wait_ready(handle, "/health", 0.6, report=reporter(reports))
    assert [(r.phase, r.answer) for r in reports] == [("starting", "HTTP 503"),
                                                      ("not ready", "HTTP 503")]
    assert reports[-1].elapsed_s >= 0.6


def test_a_definite_refusal_ends_the_wait_as_not_ready(readiness_server):  # noqa: F811
    server, handle = readiness_server({"/health": [401]})
    reports: list[Waiting] = []
    with pytest.raises(lifecycle.ServerNotReady, match="refused authentication"):
        lifecycle.wait_ready(handle, "/health", 30, report=reporter(reports))
    assert [(r.phase, r.answer) for r in reports] == [("not ready", "HTTP 401")]


def test_a_report_that_fails_never_ends_the_wait(readiness_server, caplog):  # noqa: F811
    server, handle = readiness_server({"/health": [503, 200]})

    def broken(_waiting: Waiting) -> None:
        raise OSError("disk full")

    ready = lifecycle.wait_ready(handle, "/health", 30,
                                 report=ReadinessReporter("run/sim/r0", 30, 0.0, broken))
    assert ready.probe == "/health"
    assert caplog.text.count("readiness progress could not be reported: OSError") == 1


def test_a_long_answer_is_one_short_line():
    text = "ConnectError: " + "x" * 200 + "\nTraceback"
    short = shortened(text)
    assert len(short) == 80 and short.endswith("…") and "\n" not in short
    assert shortened("HTTP 503") == "HTTP 503"


def test_the_file_form_reads_back_and_is_told_from_a_windows():
    waiting = Waiting("run/sim/r0", "starting", "http://h/health", "HTTP 503", 1.0, 30.0, 5.0)
    assert Waiting.from_dict({**waiting.as_dict(), "updated_at": "now"}) == waiting
    with pytest.raises(KeyError):
        Waiting.from_dict({k: v for k, v in waiting.as_dict().items() if k != "kind"})
