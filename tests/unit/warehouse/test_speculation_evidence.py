"""Speculation from evidence on synthetic windows (issue #23, item 2): the chunk criterion of
the view window_speculation and what rule n_at_least_min and the entries make of it."""

from __future__ import annotations

import pytest

from benchledger.raw.layout import RunLayout
from tests.sweeps import simulator_arm, sweep
from tests.synthetic import RUN_ID, derived_warehouse, request_row, write_synthetic_run

SWEEP = sweep("unit", [simulator_arm("a")], defaults={"requests": 5, "warmup": 0, "restarts": 1})


def derived(tmp_path, chunks):
    layout = RunLayout(tmp_path / "data", RUN_ID)
    wid = layout.window_id("a", 0, "code", 1)
    rows = [request_row(wid, i, tokens=21, chunks=chunks) for i in range(5)]
    write_synthetic_run(tmp_path, SWEEP, {("a", 0, "code"): (rows, {})})
    return derived_warehouse(layout.run_dir), wid


@pytest.mark.parametrize(("chunks", "observed"), [
    (None, None),  # one token per event: a plain stream
    (20, None),  # one token without text (a stop token): still plain
    (19, None),  # 21 <= 1.1 x (19 + 1): an odd event that carried two besides
    (7, "observed: chunks"),  # 3 tokens per event: speculation
])
def test_chunks_show_speculation_only_beyond_a_plain_streams_slack(tmp_path, chunks, observed):
    con, wid = derived(tmp_path, chunks)
    try:
        (shown,), = con.execute("SELECT speculation_observed FROM window_speculation "
                                "WHERE window_id = ?", [wid]).fetchall()
        assert shown == observed
        (success, expected), = con.execute(
            "SELECT success, expected FROM validations WHERE subject = ? "
            "AND expectation = 'n_at_least_min'", [wid]).fetchall()
        sources = {s for s, in con.execute("SELECT DISTINCT speculation_source FROM entries")
                   .fetchall()}
    finally:
        con.close()
    assert sources == {observed}
    if observed is None:
        assert success and expected == "completed >= 5"
    else:
        assert not success
        assert expected == ("completed >= 15 (speculative, observed: chunks: tokens per "
                            "chunk 3.00; the sweep declared it non-speculative, n >= 5)")
