"""A counter that could not be read is not a counter that does not exist (issue #22, item 10).

A /metrics that answers slower than the scrape's bound, with an error status or with text
that is not Prometheus' was recorded like a server without /metrics ("no counter"), so a
slow endpoint turned reconciliation off without a word. Now the observer records which it
was (no endpoint: HTTP 404; counter unreadable: the rest), reconciliations say `counter
unreadable`, the rule counters_readable blocks the window where the server's family exports
counters, and the entries of a server of no known family say `counter unreadable` in
counter_check, not `no counter`.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from benchledger.client import WindowResult
from benchledger.raw.layout import RunLayout, read_json, write_json
from benchledger.restart.window_write import write_window
from benchledger.rules import COUNTERS_READABLE
from benchledger.server.observe import COUNTER_UNREADABLE, NO_ENDPOINT, MetricsScrape
from tests import sweeps
from tests.faults.fault_server import serve_in_thread
from tests.synthetic import RUN_ID, accounting, derived_warehouse, request_row, write_synthetic_run

N = 6


class MetricsHandler(BaseHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (http.server's signature)
        pass

    def do_GET(self):  # noqa: N802 (http.server's naming)
        status, body = self.server.script
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def metrics_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), MetricsHandler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(("script", "kind", "said"), [
    ((404, "no route"), NO_ENDPOINT, "HTTP 404"),
    ((503, "busy"), COUNTER_UNREADABLE, "HTTP 503"),
    ((500, "boom"), COUNTER_UNREADABLE, "HTTP 500"),
    ((200, "<html>not prometheus</html>\n"), COUNTER_UNREADABLE, "not Prometheus text"),
])
def test_the_scrape_says_whether_the_endpoint_is_missing_or_unreadable(metrics_server, script,
                                                                       kind, said):
    server, url = metrics_server
    server.script = script
    scrape = MetricsScrape(url, timeout_s=2)
    scrape.start()
    assert scrape.result["before"] is None
    assert scrape.result["status"] == {"before": kind}
    assert scrape.result["errors"] == [f"before: {url}: {kind}: " + scrape.result["errors"][0]
                                       .split(f"{kind}: ", 1)[1]]
    assert said in scrape.result["errors"][0]


def test_a_metrics_page_slower_than_the_bound_is_unreadable_at_the_bound():
    """The fault server's --metrics-delay-s: /metrics exists, answers after 3 s; the
    scrape's bound (the arm's metrics_timeout_s) is 0.3 s."""
    server, base = serve_in_thread("--metrics", "--metrics-delay-s", "3")
    try:
        scrape = MetricsScrape(base + "/metrics", timeout_s=0.3)
        started = time.monotonic()
        scrape.start()
        assert time.monotonic() - started < 3  # given up before the page came
        assert scrape.result["status"] == {"before": COUNTER_UNREADABLE}
        assert f"{COUNTER_UNREADABLE}: AnswerTooSlow" in scrape.result["errors"][0]
        fast = MetricsScrape(base + "/metrics", timeout_s=10)
        fast.start()
        assert fast.result["status"] == {"before": "read"}
        assert "fault_requests_total" in fast.result["before"]["text"]
    finally:
        server.shutdown()
        server.server_close()


# --- the warehouse: reconciliations, the rule, the label ---------------------------------

URL = "http://127.0.0.1:9/metrics"
SLOW = (f"before: {URL}: {COUNTER_UNREADABLE}: AnswerTooSlow: no complete answer from {URL} "
        "within 0.5 s")
# arm -> (its restart's server family, what its window's scrapes recorded)
ARMS = {
    "slowvllm": ("vllm", [SLOW, SLOW.replace("before", "after", 1)]),
    "slowunknown": (None, [SLOW]),
    "absent": ("vllm", [f"before: {URL}: {NO_ENDPOINT}: HTTP 404",
                        f"after: {URL}: {NO_ENDPOINT}: HTTP 404"]),
}


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("unreadable")
    layout = RunLayout(tmp_path / "data", RUN_ID)
    sweep = sweeps.sweep("unreadable", [sweeps.simulator_arm(arm, model="m") for arm in ARMS],
                         defaults={"requests": N, "restarts": 1, **sweeps.NO_CLOCK})
    windows = {(arm, 0, "code"): ([request_row(layout.window_id(arm, 0, "code", 1), i)
                                   for i in range(N)], {}) for arm in ARMS}
    write_synthetic_run(tmp_path, sweep, windows)
    for arm, (family, errors) in ARMS.items():  # again, with what the scrapes recorded
        rows, _ = windows[(arm, 0, "code")]
        observations = {"thresholds": {"reconcile_tolerance": 0.01},
                        "metrics": {"url": URL, "before": None, "after": None,
                                    "errors": errors}}
        write_window(layout, arm, 0, "code", "code", 5,
                     WindowResult(rows=rows, accounting=accounting(rows[0]["window_id"], rows)),
                     observations)
        manifest = read_json(layout.restart_manifest(arm, 0))
        write_json(layout.restart_manifest(arm, 0), {**manifest, "server_family": family},
                   sealed_in=layout.slot_dir(arm, 0))  # as a step of the run writes it
    con = derived_warehouse(layout.run_dir)
    yield con, layout
    con.close()


def test_reconciliations_tell_unreadable_from_absent(warehouse):
    con, _ = warehouse
    rows = con.execute("SELECT w.arm, r.status, r.detail FROM reconciliations r "
                       "JOIN windows w USING (window_id) ORDER BY w.arm, r.counter").fetchall()
    statuses = {}
    for arm, status, detail in rows:
        statuses.setdefault(arm, set()).add(status)
        if status == COUNTER_UNREADABLE:
            assert detail.endswith(f": not reconciled (its /metrics could not be read: {SLOW})")
    assert statuses == {"slowvllm": {COUNTER_UNREADABLE}, "slowunknown": {COUNTER_UNREADABLE},
                        "absent": {"no counter"}}


def test_an_unreadable_counter_blocks_where_the_family_exports_counters(warehouse):
    con, layout = warehouse
    results = {s: (ok, e, f) for s, ok, e, f in con.execute(
        "SELECT subject, success, expected, found FROM validations WHERE expectation = ?",
        [COUNTERS_READABLE.name]).fetchall()}
    expected = ("the server's /metrics read before and after the window, where its family "
                "exports counters")
    detail = ("vllm:generation_tokens_total: not reconciled (its /metrics could not be "
              f"read: {SLOW})")
    assert results[layout.window_id("slowvllm", 0, "code", 1)] == (
        False, expected, f"counter unreadable: {detail}; the server's family (vllm) exports "
                         "counters, so the window's token counts went unconfirmed")
    # a family not known: no counter named as if it were vLLM's (issue #43)
    unknown = ("the finished-requests counter (server family not known): not reconciled "
               f"(its /metrics could not be read: {SLOW})")
    assert results[layout.window_id("slowunknown", 0, "code", 1)] == (
        True, expected, f"counter unreadable, no known family: {unknown}; the server recorded "
                        "no family (arms.server_family), so nothing says it has counters: its "
                        "entries say counter_check 'counter unreadable'")
    assert results[layout.window_id("absent", 0, "code", 1)] == (
        True, expected, "every /metrics scrape read, or no /metrics endpoint (no counter)")


def test_entries_say_counter_unreadable_never_no_counter(warehouse):
    """The blocked arm's entries name the rule (and rest on no window: no label); the arm of
    no known family publishes, labelled 'counter unreadable'; the one without /metrics
    publishes 'no counter' as before."""
    con, _ = warehouse
    entries = con.execute("SELECT arm, counter_check, publishable, blocked_by FROM entries"
                          ).fetchall()
    labels: dict[str, set] = {}
    for arm, check, publishable, blocked_by in entries:
        labels.setdefault(arm, set()).add(check)
        blocked = COUNTERS_READABLE.name in (blocked_by or "")
        assert blocked == (arm == "slowvllm"), (arm, blocked_by)
        assert not (arm == "slowvllm" and publishable)
    assert labels == {"slowvllm": {None}, "slowunknown": {COUNTER_UNREADABLE},
                      "absent": {"no counter"}}
    published = {arm for arm, in con.execute("SELECT DISTINCT arm FROM published_entries"
                                             ).fetchall()}
    assert published == {"slowunknown", "absent"}
