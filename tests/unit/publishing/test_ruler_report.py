"""What the publication shows of the ruler's own error (issue #21, T17): each window's client
lag, CPU share, bunched events and bursts in the run's tables and report, and the entries'
client_lag_p99_ms and n_burst labels in entries.md."""

from __future__ import annotations

from tests.synthetic import request_row, ruler
from tests.unit.rules.test_ruler_error import N, burst, spread, warehouse


def test_the_report_shows_each_windows_ruler(tmp_path):
    from benchledger.publishing import read
    from benchledger.publishing.export import entries_markdown
    from benchledger.publishing.report import run_tables
    from benchledger.publishing.report_html import render_report

    def rows_of(wid):
        return [request_row(wid, i, reads=burst() if i == 0 else spread()) for i in range(N)]

    con, layout = warehouse(tmp_path, [None, ruler(80.0, lag_p50_ms=60.0, cpu_share=0.98,
                                                   bunched=0.41, workers=4)], rows_of)
    windows = read.ruler(con, layout.run_id)
    assert list(windows["burst_requests"]) == [1, 1]
    assert list(windows["lag_within_bound"]) == [True, False]
    text = run_tables(con, layout.run_id)
    section = text.split("The ruler's own error per window (T17)")[1].split("\n\n")[0]
    lines = section.splitlines()[1:]
    assert "lag p99 ms" in lines[0] and "bursts" in lines[0]
    assert lines[1].split()[-2:] == ["not", "measured"] and " 1/5 " in lines[1]
    assert "80" in lines[2] and "98%" in lines[2] and "41%" in lines[2]
    assert lines[2].split()[-2:] == ["BEYOND", "BOUND"] and lines[2].split()[4] == "4"
    page = render_report(con, layout.run_id)
    ruler_part = page.split("<h2>The ruler's own error (T17)</h2>")[1].split("<h2>")[0]
    assert "<td>80</td>" in ruler_part and "<td>0.98</td>" in ruler_part
    assert "client lag p50 &lt;= 50 ms (a tenth of the median TTFT, 500 ms)" in ruler_part
    published = read.published_entries(con, layout.run_id)
    markdown = entries_markdown(published, layout.run_id)
    assert "| client lag p99 ms | bursts |" in markdown.splitlines()[4]
    throughput = [line for line in markdown.splitlines() if "| throughput |" in line]
    assert throughput and all("| 80.0 | 2 |" in line for line in throughput)
