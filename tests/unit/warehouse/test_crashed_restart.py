"""A crashed restart publishes none of its numbers (issue #11).

"A server that died during the window is a failed restart, not a measurement: none of that
restart's numbers may publish (the restart and its windows stay in the warehouse, marked)."
A synthetic run where one of two restarts of an arm ended 'crashed' (the status the restart
slot records when the server process ended during measurement) while its windows look
fine, and far faster than its sibling's: the rule restart_healthy blocks every entry of the
arm, and the crashed restart's requests appear in no value, no restart mean, no lineage,
no variance report and no comparison, while the raw rows stay, marked.
"""

from __future__ import annotations

import pytest

from benchledger import rules as R
from benchledger.raw.layout import RunLayout, read_json
from benchledger.warehouse.compare import derive_comparisons
from tests.sweeps import simulator_arm, sweep
from tests.synthetic import (
    RUN_ID,
    derived_warehouse,
    request_row,
    write_as_a_step,
    write_synthetic_run,
)

N = 6
SWEEP = sweep("crash", [simulator_arm("steady", model="m"),
                        simulator_arm("crashy", {"step_ms": 5.0}, model="m")],
              defaults={"requests": N, "restarts": 2}, workloads=["code", "prose"],
              comparisons=[{"a": "steady", "b": "crashy", "metric": "decode_rate"}])
# Decode seconds per request: restart 1 of crashy is 10x faster than anything else, so a
# number it fed would stand out.
DECODE_S = {("steady", 0): 1.0, ("steady", 1): 1.1, ("crashy", 0): 0.9, ("crashy", 1): 0.09}


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("crash")
    layout = RunLayout(tmp_path / "data", RUN_ID)
    windows = {}
    for (arm, k), decode_s in DECODE_S.items():
        for workload in ("code", "prose"):
            wid = layout.window_id(arm, k, workload, 1)
            rows = [request_row(wid, i, decode_s=decode_s + i / 100) for i in range(N)]
            windows[(arm, k, workload)] = (rows, {})
    write_synthetic_run(tmp_path, SWEEP, windows)
    manifest = layout.restart_manifest("crashy", 1)
    write_as_a_step(manifest, {**read_json(manifest), "status": "crashed",
                          "error": "server process ended during measurement (exited 1)"})
    con = derived_warehouse(layout.run_dir)
    derive_comparisons(con, RUN_ID)
    yield con, layout
    con.close()


def test_the_crash_fails_restart_healthy(warehouse):
    con, layout = warehouse
    # (Besides the warm-prompt prefill rates, which never publish: an entry rule.)
    failed = con.execute("SELECT subject, found FROM validations WHERE NOT success "
                         "AND suite <> 'entries'").fetchall()
    assert failed == [(layout.restart_id("crashy", 1), "'crashed'")]


def test_no_number_of_the_crashed_arm_is_published(warehouse):
    con, layout = warehouse
    assert con.execute("SELECT count(*) FROM published_entries WHERE arm = 'crashy'"
                       ).fetchall() == [(0,)]
    # Every entry of the arm (both workloads) is written, blocked by the crashed restart.
    rows = con.execute("SELECT e.workload, count(DISTINCT e.entry_id), "
                       "count(b.entry_id) FILTER (WHERE b.rule = ? AND b.subject = ?) "
                       "FROM current_entries e LEFT JOIN entry_blocks b USING (entry_id) "
                       "WHERE e.arm = 'crashy' GROUP BY ALL ORDER BY 1",
                       [R.RESTART_HEALTHY.name, layout.restart_id("crashy", 1)]).fetchall()
    assert [(w, n == blocks) for w, n, blocks in rows] == [("code", True), ("prose", True)]
    # The steady arm is untouched: its rates publish.
    assert con.execute("SELECT count(*) > 0 FROM published_entries WHERE arm = 'steady' "
                       "AND metric = 'decode_rate'").fetchall() == [(True,)]


def test_the_crashed_restart_feeds_no_value(warehouse):
    con, layout = warehouse
    crashed = layout.restart_id("crashy", 1)
    # Restart 0's requests alone: 20 tokens after the first over 0.9 s + i/100.
    expected = sum(20 / (0.9 + i / 100) for i in range(N)) / N
    values = con.execute("SELECT DISTINCT value, n_requests, n_restarts FROM current_entries "
                         "WHERE arm = 'crashy' AND metric = 'decode_rate' "
                         "AND scope = 'single_stream' AND statistic = 'mean'").fetchall()
    assert [(round(v, 9), n, r) for v, n, r in values] == [(round(expected, 9), N, 1)]
    assert con.execute("SELECT count(*) FROM entry_restart_means WHERE restart_id = ?",
                       [crashed]).fetchall() == [(0,)]
    assert con.execute("SELECT count(*) FROM entry_lineage l JOIN windows w "
                       "USING (window_id) WHERE w.restart_id = ?", [crashed]).fetchall() \
        == [(0,)]
    assert con.execute("SELECT count(*) FROM entry_requests q JOIN windows w "
                       "USING (window_id) WHERE w.restart_id = ?", [crashed]).fetchall() \
        == [(0,)]


def test_the_variance_report_and_comparison_leave_the_crashed_restart_out(warehouse):
    con, _ = warehouse
    variance = con.execute("SELECT workload, n_restarts, n_requests FROM variance_report "
                           "WHERE arm = 'crashy' AND metric = 'decode_rate' ORDER BY 1"
                           ).fetchall()
    assert variance == [("code", 1, N), ("prose", 1, N)]
    verdicts = con.execute("SELECT workload, verdict, reason, b_mean FROM comparisons "
                           "WHERE role = 'ab' ORDER BY 1").fetchall()
    assert [(w, v, m) for w, v, _, m in verdicts] == [("code", "not decidable", None),
                                                      ("prose", "not decidable", None)]
    assert all(reason.startswith("arm 'crashy': blocked: ") and R.RESTART_HEALTHY.name
               in reason for _, _, reason, _ in verdicts)


def test_the_crashed_restart_and_its_windows_stay_marked(warehouse):
    con, layout = warehouse
    crashed = layout.restart_id("crashy", 1)
    assert con.execute("SELECT status, error FROM restarts WHERE restart_id = ?",
                       [crashed]).fetchall() == [
        ("crashed", "server process ended during measurement (exited 1)")]
    assert con.execute("SELECT count(*), sum(submitted) FROM windows WHERE restart_id = ?",
                       [crashed]).fetchall() == [(2, 2 * N)]
    assert con.execute("SELECT count(*) FROM request_records r JOIN windows w "
                       "USING (window_id) WHERE w.restart_id = ?", [crashed]).fetchall() \
        == [(2 * N,)]
