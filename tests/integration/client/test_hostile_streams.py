"""What a hostile probe's streams and counters got through (issue #22, items 3, 9, 10, 13,
14), driven end to end the way a user runs a sweep: one `benchledger run` in a child
process (Airflow dag.test, DuckDB), one `server = "command"` arm per case
(tests/faults/fault_server.py) beside a clean control. The helpers are the fault suite's
(tests/integration/local/test_fault_suite.py); docs/faults.md has the rows.

- bom: every stream opens with a UTF-8 byte order mark; the requests complete (it failed
  them: "a line that is not an SSE field").
- longline: one measured request carries a 15 MB comment line mid-stream; it completes
  with its 8 tokens, like the others (the reader was quadratic in a line's length).
- belowevents: one measured request reports 1 token for its 8 text events; usage_plausible
  blocks the window (it passed: only the upper side was checked).
- buffered: every answer arrives whole in one write (a proxy that buffers); the window's
  per-request timing entries are blocked by streams_not_buffered, its throughput publishes
  (TTFT = the whole answer's time was published, unlabelled).
- slowmetrics: a vLLM-family server whose /metrics answers after 3 s, scraped with a 0.5 s
  bound; its windows are `counter unreadable` and blocked by counters_readable (they were
  `no counter`, the label of a server without /metrics, and published).
- interrupted (issue #39): llama-cpp-python's default at concurrency 4: each arriving
  request ends the stream in progress with `[DONE]` and no finish_reason; the cut requests
  (as many as the server's log says it cut) are `failed` with a "stream cut" error (they
  were `completed` with 0 tokens, and the window's success fraction 1.0 published), the
  progress line counts them, nothing of the window publishes.

Request numbering (the fault server counts POSTs from 1): one warm-up, so request 1 is
`w0000` and request n >= 2 is `m{n-2:04d}`.
"""

from __future__ import annotations

import shlex
import uuid
from dataclasses import dataclass

import pytest

from benchledger.rules import COUNTERS_READABLE, STREAMS_NOT_BUFFERED, USAGE_PLAUSIBLE
from tests.integration.local.test_fault_suite import (
    CLEAN_OUTPUT_TOKENS,
    WARMUP,
    CliRun,
    Fault,
    processes_tagged,
    published,
    query,
    request_suffix,
    run_cli,
    window_and_requests,
)

pytestmark = pytest.mark.integration

REQUESTS = 5
ALL = tuple(range(1, WARMUP + REQUESTS + 1))  # every request, the warm-up included
METRICS_DELAY_S = 3.0
METRICS_TIMEOUT_S = 0.5
INTERRUPTED_CONCURRENCY = 4
# each stream waits this long before its first word, so the next arrival nearly always
# finds it in progress (an 8-word stream alone lasts 40 ms, shorter than a loaded client's
# pause between a cut and its next request); the server's log says which it really cut
INTERRUPTED_PREFILL_MS = 300


@dataclass(frozen=True)
class HostileFault(Fault):
    """A fault arm whose server takes flags beyond its mode."""

    flags: tuple[str, ...] = ()

    def command(self, tag: str) -> str:
        return super().command(tag) + "".join(f" {shlex.quote(f)}" for f in self.flags)


ARMS = (
    HostileFault("control", "clean"),
    HostileFault("bom", "bom", hits=ALL, hit_statuses=frozenset({"completed"})),
    HostileFault("longline", "long-line", hits=(3,), hit_statuses=frozenset({"completed"})),
    HostileFault("belowevents", "usage-below-events", hits=(4,), damaged=True,
                 hit_statuses=frozenset({"completed"})),
    HostileFault("buffered", "buffered", hits=ALL, hit_statuses=frozenset({"completed"})),
    HostileFault("slowmetrics", "clean", damaged=True,
                 flags=("--metrics", "--metrics-delay-s", str(METRICS_DELAY_S)),
                 extra_keys={"server_family": "vllm",
                             "metrics_timeout_s": METRICS_TIMEOUT_S}),
    HostileFault("interrupted", "interrupt", hits=ALL, damaged=True,
                 hit_statuses=frozenset({"completed", "failed"}),
                 flags=("--first-event-ms", str(INTERRUPTED_PREFILL_MS)),
                 extra_keys={"concurrency": [INTERRUPTED_CONCURRENCY]}),
)
BY_ARM = {arm.arm: arm for arm in ARMS}


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory) -> CliRun:
    workdir, tag = tmp_path_factory.mktemp("hostile"), f"hostile-streams-{uuid.uuid4().hex}"
    return run_cli(workdir, "hostile", ARMS, tag)


def failed_rules(run: CliRun, window_id: str) -> dict[str, tuple[str, str]]:
    return {r["expectation"]: (r["expected"], r["found"]) for r in query(
        run.warehouse, "SELECT expectation, expected, found FROM validations "
                       "WHERE run_id = ? AND subject = ? AND NOT success",
        [run.run_id, window_id])}


def entries(run: CliRun, arm: str) -> list[dict]:
    return query(run.warehouse, "SELECT * FROM entries WHERE run_id = ? AND arm = ?",
                 [run.run_id, arm])


def test_the_run_ends_and_every_request_is_a_row_that_balances(hostile_run):
    assert hostile_run.dag_state == "success", hostile_run.output[-3000:]
    assert "Traceback (most recent call last)" not in hostile_run.output
    assert processes_tagged(hostile_run.tag) == []
    for fault in ARMS:
        window, rows = window_and_requests(hostile_run, fault.arm)
        assert len(rows) == WARMUP + REQUESTS, fault.arm
        assert window["submitted"] == window["completed"] + window["failed"] + \
            window["unresolved"], fault.arm


@pytest.mark.parametrize("arm", ["bom", "longline"])
def test_a_bom_and_a_15_mb_line_leave_every_request_complete(hostile_run, arm):
    _, rows = window_and_requests(hostile_run, arm)
    for number in ALL:
        row = rows[request_suffix(number)]
        assert (row["status"], row["error"], row["output_tokens"], row["chunks"]) == (
            "completed", None, CLEAN_OUTPUT_TOKENS, CLEAN_OUTPUT_TOKENS), (arm, number)
    assert published(hostile_run, arm), arm  # nothing wrong with these numbers


def test_usage_below_the_text_events_is_recorded_and_blocks(hostile_run):
    window, rows = window_and_requests(hostile_run, "belowevents")
    hit = rows[request_suffix(BY_ARM["belowevents"].hits[0])]
    assert (hit["status"], hit["output_tokens"], hit["chunks"]) == ("completed", 1, 8)
    expected, found = failed_rules(hostile_run, window["window_id"])[USAGE_PLAUSIBLE.name]
    assert "output_tokens below chunks (1)" in found
    assert f"{hit['request_id']} (output_tokens 1 below chunks 8)" in found
    assert published(hostile_run, "belowevents") == []


def test_answers_delivered_in_one_read_publish_no_timing_entry(hostile_run):
    window, _ = window_and_requests(hostile_run, "buffered")
    views = query(hostile_run.warehouse, "SELECT delivered_in_one_read, ttft_s, decode_tok_s, "
                                         "rate_withheld FROM requests WHERE window_id = ? "
                                         "AND NOT is_warmup", [window["window_id"]])
    assert len(views) == REQUESTS
    for v in views:
        assert v["delivered_in_one_read"] and v["ttft_s"] is None and v["decode_tok_s"] is None
        assert v["rate_withheld"].startswith("one read: all 8 content events"), v
    _, found = failed_rules(hostile_run, window["window_id"])[STREAMS_NOT_BUFFERED.name]
    assert found.startswith(f"delivered in one read: {REQUESTS} of {REQUESTS} arrived whole "
                            "in one read (100%)")
    by_metric = {}
    for e in entries(hostile_run, "buffered"):
        by_metric.setdefault((e["metric"], e["scope"]), []).append(e)
    for key in [("ttft", "single_stream"), ("decode_rate", "single_stream"),
                ("tpot", "single_stream"), ("e2e_latency", "single_stream")]:
        for e in by_metric[key]:
            assert not e["publishable"] and STREAMS_NOT_BUFFERED.name in e["blocked_by"], key
    for e in by_metric[("decode_rate", "aggregate")]:  # a span of stamps, as TTFT's
        assert not e["publishable"] and STREAMS_NOT_BUFFERED.name in e["blocked_by"]
    shown = {(e["metric"], e["scope"]) for e in published(hostile_run, "buffered")}
    assert ("throughput", "aggregate") in shown
    assert not {m for m, _ in shown} & {"ttft", "decode_rate", "tpot", "prefill_rate"}
    # the control streamed: its TTFT publishes
    assert ("ttft", "single_stream") in {(e["metric"], e["scope"])
                                         for e in published(hostile_run, "control")}


def test_a_slow_metrics_endpoint_is_unreadable_and_blocks(hostile_run):
    window, _ = window_and_requests(hostile_run, "slowmetrics")
    statuses = query(hostile_run.warehouse, "SELECT status, detail FROM reconciliations "
                                            "WHERE window_id = ?", [window["window_id"]])
    assert statuses and {s["status"] for s in statuses} == {"counter unreadable"}
    assert all("AnswerTooSlow" in s["detail"] for s in statuses), statuses
    _, found = failed_rules(hostile_run, window["window_id"])[COUNTERS_READABLE.name]
    assert found.startswith("counter unreadable: ") and "(vllm) exports counters" in found
    assert published(hostile_run, "slowmetrics") == []
    # a server without /metrics is still `no counter`, and publishes
    control, _ = window_and_requests(hostile_run, "control")
    assert {s["status"] for s in query(hostile_run.warehouse,
                                       "SELECT status FROM reconciliations WHERE window_id = ?",
                                       [control["window_id"]])} == {"no counter"}
    assert {e["counter_check"] for e in published(hostile_run, "control")} == {"no counter"}


def test_the_terminal_names_each_blocking_rule_with_its_arm(hostile_run):
    lines = hostile_run.output.splitlines()
    for rule, arm in [(USAGE_PLAUSIBLE.name, "belowevents"),
                      (STREAMS_NOT_BUFFERED.name, "buffered"),
                      (COUNTERS_READABLE.name, "slowmetrics")]:
        assert any(line.strip().startswith(f"{rule}:") and f"{arm}/" in line
                   for line in lines), (rule, arm, hostile_run.output[-4000:])


def test_streams_cut_by_the_server_are_failed_counted_and_never_published(hostile_run):
    window, rows = window_and_requests(hostile_run, "interrupted")
    measured = [r for r in rows.values() if not r["is_warmup"]]
    cut = [r for r in measured if r["status"] == "failed"]
    # the server decides which streams it cuts (a stream that ends before the next arrival
    # is finished): its own log counts them, and each is one failed row, warm-up included
    logs = [log for log in hostile_run.data_dir.rglob("server.log")
            if log.parent.parent.name == "interrupted"]  # <run>/interrupted/r<k>/server.log
    server_cut = sum(log.read_text(errors="replace").count("interrupt: a newer request arrived")
                     for log in logs)
    failed = [r for r in rows.values() if r["status"] == "failed"]
    assert logs and len(failed) == server_cut, ([(r["status"], r["error"]) for r in rows.values()],
                                                 server_cut)
    assert cut, [(r["status"], r["error"]) for r in measured]
    for row in cut:
        assert row["finish_reason"] is None and row["http_status"] == 200
        assert row["error"].startswith("stream cut: [DONE] arrived without a finish_reason"), \
            row["error"]
    for row in measured:  # whatever completed was finished by the server
        if row["status"] == "completed":
            assert row["finish_reason"] in ("stop", "length"), row
    assert window["failed"] == len(cut) and window["completed"] == REQUESTS - len(cut)
    fractions = query(hostile_run.warehouse,
                      "SELECT value, publishable FROM entries WHERE run_id = ? AND arm = ? "
                      "AND metric = 'success_fraction'", [hostile_run.run_id, "interrupted"])
    assert fractions and all(f["value"] is None or f["value"] < 1 for f in fractions), fractions
    assert published(hostile_run, "interrupted") == []
    # the window's last progress line counts the cut requests among the failed
    done = [line for line in hostile_run.output.splitlines()
            if "progress:" in line and "/interrupted/" in line and " done:" in line]
    assert done and f"{len(cut)} failed ({len(cut)} cut short by the server)" in done[-1], \
        (done, hostile_run.output[-3000:])
