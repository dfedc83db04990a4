"""benchledger import: other tools' results and old reports as labelled evidence (issue #14).

The fixtures are real GuideLLM 0.8.1 and AIPerf 0.13.0 output (with and without the
server's usage), a vllm bench serve result written in vLLM's format, and a historical CSV
shaped like the field notes' dual-GH200 rows (tests/fixtures/imports/*/README.md).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from benchledger.cli import main
from benchledger.imports import parse_evidence
from benchledger.imports.evidence import SourceFile
from benchledger.publishing.export import export_run
from benchledger.warehouse import imports as warehouse_imports
from benchledger.warehouse.compare_by_hand import ComparisonRefused, compare_entries
from benchledger.warehouse.db import connect
from benchledger.warehouse.imports import import_evidence
from tests.conftest import REPO

FIXTURES = REPO / "tests" / "fixtures" / "imports"
GUIDELLM = FIXTURES / "guidellm" / "usage.json"
GUIDELLM_NO_USAGE = FIXTURES / "guidellm" / "no-usage.json"
AIPERF = FIXTURES / "aiperf" / "usage"
AIPERF_NO_USAGE = FIXTURES / "aiperf" / "no-usage"
VLLM = FIXTURES / "vllm-bench" / "result.json"
REPORT = FIXTURES / "report" / "field-notes.csv"
IMPORTS = (("guidellm", GUIDELLM), ("guidellm", GUIDELLM_NO_USAGE), ("aiperf", AIPERF),
           ("aiperf", AIPERF_NO_USAGE), ("vllm-bench", VLLM), ("report", REPORT))


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("imports") / "bench.duckdb"
    for tool, file in IMPORTS:
        assert main(["import", tool, str(file), "--warehouse", str(path)]) == 0
    return path


def rows(path: Path, sql: str, params=None) -> list[tuple]:
    with connect(path, read_only=True) as con:
        return con.execute(sql, params or []).fetchall()


def run_of(path: Path, tool: str, file: Path) -> str:
    return parse_evidence(tool, file).run_id


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# --- round trips on the real fixtures ------------------------------------------------------


def test_guidellm_round_trip_reproduces_its_own_numbers(warehouse):
    report = json.loads(GUIDELLM.read_text())
    run_id = run_of(warehouse, "guidellm", GUIDELLM)
    for bench in report["benchmarks"]:
        workload = f"concurrent@{bench['config']['strategy']['streams']}"
        totals = bench["metrics"]["request_totals"]
        own = {numerator: bench["metrics"][name]["successful"]["mean"]
               for numerator, name in (("output_tokens", "output_tokens_per_second"),
                                       ("input_plus_output_tokens", "tokens_per_second"))}
        published = dict(rows(warehouse, "SELECT numerator, value FROM published_entries "
                                         "WHERE run_id = ? AND workload = ? AND metric = "
                                         "'throughput'", [run_id, workload]))
        assert published == pytest.approx(own, rel=1e-9)
        window = rows(warehouse, "SELECT submitted, completed, failed, unresolved, "
                                 "(SELECT count(*) FROM request_records r WHERE r.window_id "
                                 "= w.window_id) FROM windows w WHERE run_id = ? AND "
                                 "workload = ?", [run_id, workload])
        assert window == [(totals["total"], totals["successful"], totals["errored"],
                           totals["incomplete"], totals["total"])]
    # GuideLLM recorded the server's usage for every request: labelled usage, and the
    # counts are the usage's
    recorded = [r["output_metrics"]["text_tokens"] for b in report["benchmarks"]
                for r in b["requests"]["successful"]]
    assert None not in recorded
    imported = rows(warehouse, "SELECT token_source, output_tokens FROM request_records r "
                               "JOIN windows USING (window_id) WHERE run_id = ? "
                               "ORDER BY r.request_id", [run_id])
    assert {source for source, _ in imported} == {"usage"}
    assert sorted(n for _, n in imported) == sorted(recorded)


def test_aiperf_round_trip_reproduces_its_own_numbers(warehouse):
    summary = json.loads((AIPERF / "profile_export_aiperf.json").read_text())
    records = (AIPERF / "profile_export.jsonl").read_text().splitlines()
    assert summary["input_config"]["endpoint"]["use_server_token_count"] is True
    run_id = run_of(warehouse, "aiperf", AIPERF)
    published = dict(rows(warehouse, "SELECT numerator, value FROM published_entries WHERE "
                                     "run_id = ? AND metric = 'throughput'", [run_id]))
    # AIPerf's window ends are written to the microsecond: equal within that rounding
    assert published == pytest.approx(
        {"output_tokens": summary["output_token_throughput"]["avg"],
         "input_plus_output_tokens": summary["total_token_throughput"]["avg"]}, rel=1e-5)
    assert rows(warehouse, "SELECT completed, (SELECT count(*) FROM request_records r WHERE "
                           "r.window_id = w.window_id) FROM windows w WHERE run_id = ?",
                [run_id]) == [(summary["request_count"]["avg"], len(records))]
    assert rows(warehouse, "SELECT DISTINCT token_source FROM request_records JOIN windows "
                           "USING (window_id) WHERE run_id = ?", [run_id]) == [("usage",)]
    # the chunk gaps AIPerf recorded are the request's event gaps, not per-token latencies
    first = json.loads(records[0])["metrics"]["inter_chunk_latency"]["value"]
    gaps = rows(warehouse, "SELECT event_gap_s FROM event_gaps WHERE request_id = ? "
                           "ORDER BY gap_index", [f"{run_id}/00-concurrency@2/m00000"])
    assert [g for g, in gaps] == pytest.approx([v / 1000 for v in first], abs=1e-9)


def test_vllm_bench_round_trip_keeps_what_the_file_does_not_say_unknown(warehouse):
    result = json.loads(VLLM.read_text())
    run_id = run_of(warehouse, "vllm-bench", VLLM)
    [(output, reported, total, failed, completed)] = rows(
        warehouse, "SELECT output_tok_s, reported_output_tok_s, total_tok_s, failed, completed "
                   "FROM imported_windows WHERE run_id = ?", [run_id])
    assert output == pytest.approx(result["output_throughput"], rel=1e-9) == reported
    assert total == pytest.approx(result["total_token_throughput"], rel=1e-9)
    assert (completed, failed) == (result["completed"], result["failed"])
    # vLLM does not record whether output_lens came from usage or its tokenizer
    assert rows(warehouse, "SELECT DISTINCT token_source FROM request_records JOIN windows "
                           "USING (window_id) WHERE run_id = ?", [run_id]) == [(None,)]
    [(flags,)] = rows(warehouse, "SELECT import_flags FROM runs WHERE run_id = ?", [run_id])
    assert "origin the tool did not record" in flags
    assert rows(warehouse, "SELECT count(*) FROM published_entries WHERE run_id = ?",
                [run_id]) == [(0,)]
    assert {r for r, in rows(warehouse, "SELECT DISTINCT b.rule FROM entry_blocks b JOIN "
                                        "entries e USING (entry_id) WHERE run_id = ?",
                             [run_id])} >= {"token_source_is_usage", "temperature_is_zero"}


# --- token counts that are not delivered counts ---------------------------------------------


@pytest.mark.parametrize(("tool", "file", "source", "meaning"), [
    ("guidellm", GUIDELLM_NO_USAGE, "chunks", "streamed chunks counted as tokens"),
    ("aiperf", AIPERF_NO_USAGE, "client_tokenizer", "client's own tokenizer count"),
])
def test_an_import_without_delivered_counts_is_flagged_and_publishes_no_token_rate(
        warehouse, tool, file, source, meaning):
    run_id = run_of(warehouse, tool, file)
    assert rows(warehouse, "SELECT DISTINCT token_source FROM request_records JOIN windows "
                           "USING (window_id) WHERE run_id = ? AND status = 'completed'",
                [run_id]) == [(source,)]
    [(flags,)] = rows(warehouse, "SELECT import_flags FROM runs WHERE run_id = ?", [run_id])
    assert meaning in flags and "no token rate" in flags
    # loaded whole, its rates derived and blocked, none published
    assert rows(warehouse, "SELECT count(*) FROM entries WHERE run_id = ? AND unit = 'tok/s'",
                [run_id])[0][0] > 0
    assert rows(warehouse, "SELECT count(*) FROM published_entries WHERE run_id = ? AND "
                           "unit = 'tok/s'", [run_id]) == [(0,)]
    blocked = rows(warehouse, "SELECT DISTINCT e.blocked_by LIKE '%token_source_is_usage%' "
                              "FROM entries e WHERE run_id = ? AND metric = 'throughput'",
                   [run_id])
    assert blocked == [(True,)]


def test_requested_lengths_are_flagged_and_publish_no_token_rate(tmp_path):
    evidence = parse_evidence("guidellm", GUIDELLM)
    requested = pa.array(["requested"] * evidence.requests.num_rows)
    evidence.requests = evidence.requests.set_column(
        evidence.requests.schema.get_field_index("token_source"), "token_source", requested)
    evidence.files = [SourceFile(GUIDELLM, "f" * 64, "guidellm-report", 12)]
    with connect(tmp_path / "w.duckdb") as con:
        result = import_evidence(con, evidence)
        published_rates = con.execute("SELECT count(*) FROM published_entries WHERE unit = "
                                      "'tok/s'").fetchall()
    assert any("the requested output length" in flag for flag in result.flags)
    assert result.entries > 0 and published_rates == [(0,)]


# --- historical reports -----------------------------------------------------------------------


def test_a_long_input_row_gives_two_entries_with_their_numerators_and_its_gaps_null(
        warehouse):
    entries = rows(warehouse, "SELECT numerator, value, concurrency, n_submitted, "
                              "n_completed, statistic, denominator, not_recorded, evidence "
                              "FROM published_entries WHERE record_id = 'archive-longin-1' "
                              "ORDER BY numerator")
    assert [(e[0], e[1]) for e in entries] == [("input_plus_output_tokens", 14346.87),
                                               ("output_tokens", 111.22)]
    for entry in entries:
        concurrency, submitted, completed, statistic, denominator, missing, evidence = entry[2:]
        assert (concurrency, submitted, completed, statistic) == (None, None, None, None)
        assert denominator.startswith("not recorded") and evidence == "historical"
        assert {"concurrency", "n_submitted", "elapsed_s", "statistic"} <= set(
            missing.split(", "))
    # nothing was derived from the rates: the report row keeps its empty cells empty
    assert rows(warehouse, "SELECT clients, requests, elapsed_s, completed FROM report_rows "
                           "WHERE record_id = 'archive-longin-1'") == [(None,) * 4]


def test_a_ladder_varying_in_concurrency_and_requests_is_flagged(warehouse):
    series = dict(rows(warehouse, "SELECT profile, varying FROM report_series WHERE "
                                  "evidence = 'historical'"))
    assert series == {"ladder": "concurrency, requests", "long-input": ""}
    warnings = rows(warehouse, "SELECT DISTINCT record_id, warning FROM entries WHERE "
                               "profile = 'ladder'")
    assert sorted(r for r, _ in warnings) == ["ladder-c1", "ladder-c2", "ladder-c4",
                                              "ladder-c8"]
    for _, warning in warnings:
        assert "concurrency 1, 2, 4, 8" in warning and "requests 128, 512" in warning
        assert "never a controlled experiment" in warning
    assert rows(warehouse, "SELECT DISTINCT warning FROM entries WHERE profile = "
                           "'long-input'") == [(None,)]


def test_a_derived_comparison_keeps_its_label_and_is_not_compared_with_a_raw_row(warehouse):
    [(derived, evidence)] = rows(warehouse, "SELECT entry_id, evidence FROM published_entries "
                                            "WHERE record_id = 'summary-longin-mean'")
    assert evidence == "derived_comparison"
    [(archived,)] = rows(warehouse, "SELECT entry_id FROM published_entries WHERE record_id "
                                    "= 'archive-longin-1' AND numerator = 'output_tokens'")
    with connect(warehouse, read_only=True) as con:
        with pytest.raises(ComparisonRefused, match="never a controlled experiment") as refused:
            compare_entries(con, derived, archived)
        assert "derived_comparison vs historical" in str(refused.value)
        # the same kind of evidence, the same profile and quantity: a difference, no finding
        c1, c8 = (con.execute("SELECT entry_id FROM entries WHERE record_id = ? AND metric = "
                              "'throughput'", [record]).fetchall()[0][0]
                  for record in ("ladder-c1", "ladder-c8"))
        compared = compare_entries(con, c1, c8)
    assert compared["difference"] == pytest.approx(602.9 - 102.2)
    assert compared["verdict"] == "not decidable"


def test_an_import_and_a_report_row_are_never_compared(warehouse):
    with connect(warehouse, read_only=True) as con:
        imported, historical = (con.execute(
            "SELECT entry_id FROM entries WHERE evidence = ? AND metric = 'throughput' AND "
            "numerator = 'output_tokens' LIMIT 1", [kind]).fetchall()[0][0]
            for kind in ("imported", "historical"))
        with pytest.raises(ComparisonRefused, match="evidence imported vs historical"):
            compare_entries(con, imported, historical)


def test_the_compare_command_refuses_across_evidence_kinds_saying_why(warehouse, capsys):
    [(derived,)] = rows(warehouse, "SELECT entry_id FROM published_entries "
                                   "WHERE record_id = 'summary-longin-mean'")
    [(archived,)] = rows(warehouse, "SELECT entry_id FROM published_entries WHERE record_id "
                                    "= 'archive-longin-1' AND numerator = 'output_tokens'")
    assert main(["compare", derived, archived, "--warehouse", str(warehouse)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("benchledger compare: refused: comparing entry")
    assert "never a controlled experiment" in err and "derived_comparison vs historical" in err
    with connect(warehouse, read_only=True) as con:
        c1, c8 = (con.execute("SELECT entry_id FROM entries WHERE record_id = ? AND metric = "
                              "'throughput'", [record]).fetchall()[0][0]
                  for record in ("ladder-c1", "ladder-c8"))
    assert main(["compare", c1, c8, "--warehouse", str(warehouse)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    # each side named; the difference and ratio at the terminal's precision, with the unit
    assert lines[0].startswith("quantity: throughput") and lines[0].endswith("in tok/s"), out
    assert lines[1].startswith("       a: 102.2 tok/s") and f"entry {c1})" in lines[1], out
    assert lines[2].startswith("       b: 602.9 tok/s") and f"entry {c8})" in lines[2], out
    assert lines[3:5] == ["   b - a: +500.7 tok/s", "   b / a: 5.9x"], out
    assert lines[5].startswith(" verdict: not decidable: two entries compared by hand"), out


def test_report_counts_that_do_not_add_up_block_the_row(tmp_path, capsys):
    header = REPORT.read_text().splitlines()[0]
    csv = tmp_path / "odd.csv"
    csv.write_text(header + "\nshort,,odd-1,,vllm,,,128,64,4,10,closed,warm,5.0,40.0,"
                            ",,,,,5,1,0,complete,\n")
    code, _, _ = cli(capsys, "import", "report", str(csv), "--warehouse",
                     str(tmp_path / "w.duckdb"))
    assert code == 0
    assert rows(tmp_path / "w.duckdb", "SELECT publishable, blocked_by LIKE "
                                       "'%request_counts_balance%10 != 5 + 1 + 0%' FROM "
                                       "entries") == [(False, True)]


# --- broken files, repeated files, one transaction --------------------------------------------


def broken_copies(tmp_path: Path) -> list[tuple[str, Path, str]]:
    """(tool, file, what the message must say) for a truncated or malformed file of each
    tool."""
    guidellm = tmp_path / "truncated.json"
    text = GUIDELLM.read_text()
    guidellm.write_text(text[: len(text) // 2])
    cut, short = tmp_path / "cut", tmp_path / "short"
    for folder in (cut, short):
        shutil.copytree(AIPERF, folder)
    lines = (AIPERF / "profile_export.jsonl").read_text().splitlines(keepends=True)
    (cut / "profile_export.jsonl").write_text("".join(lines[:-1]) + lines[-1][:40])
    (short / "profile_export.jsonl").write_text("".join(lines[:-2]))
    vllm = tmp_path / "vllm.json"
    result = json.loads(VLLM.read_text())
    result["ttfts"].pop()
    vllm.write_text(json.dumps(result))
    report = tmp_path / "report.csv"
    report.write_text(REPORT.read_text().replace(",111.22,", ",fast,"))
    return [("guidellm", guidellm, "not valid JSON, truncated or malformed"),
            ("aiperf", cut, "line 8: not valid JSON"),
            ("aiperf", short, "6 completed request records, but the summary counts 8"),
            ("vllm-bench", vllm, "per-request lists of different lengths"),
            ("report", report, "line 2, column output_tok_s: 'fast' is not a number")]


def test_a_truncated_or_malformed_file_is_refused_naming_it_and_nothing_is_loaded(
        tmp_path, capsys):
    warehouse = tmp_path / "w.duckdb"
    for tool, file, problem in broken_copies(tmp_path):
        code, _, err = cli(capsys, "import", tool, str(file), "--warehouse", str(warehouse))
        assert code == 2, err
        assert str(file.name) in err and problem in err and "nothing was loaded" in err
    assert not warehouse.exists()  # refused before the warehouse was even opened


def test_an_error_after_loading_leaves_nothing_behind(tmp_path, monkeypatch):
    def broken(con, run_id):
        raise RuntimeError("derivation failed")

    monkeypatch.setattr(warehouse_imports, "derive_imported", broken)
    with connect(tmp_path / "w.duckdb") as con:
        with pytest.raises(RuntimeError, match="derivation failed"):
            import_evidence(con, parse_evidence("guidellm", GUIDELLM))
        counts = [con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
                  for table in ("runs", "raw_files", "windows", "request_records",
                                "validations", "entries")]
    assert counts == [0] * 6


def test_the_same_file_imported_twice_is_loaded_once(warehouse, capsys):
    tables = ("runs", "raw_files", "windows", "request_records", "entries", "validations")
    before = [rows(warehouse, f"SELECT count(*) FROM {t}")[0][0] for t in tables]
    code, out, _ = cli(capsys, "import", "guidellm", str(GUIDELLM), "--warehouse",
                       str(warehouse))
    assert code == 0 and "already loaded" in out
    # AIPerf's import is known by its records, whichever of its files is named
    code, out, _ = cli(capsys, "import", "aiperf", str(AIPERF / "profile_export_aiperf.json"),
                       "--warehouse", str(warehouse))
    assert code == 0 and "already loaded" in out
    assert [rows(warehouse, f"SELECT count(*) FROM {t}")[0][0] for t in tables] == before


# --- exports: every kind in its own section --------------------------------------------------


def test_imported_entries_are_published_in_their_own_section(warehouse, tmp_path):
    run_id = run_of(warehouse, "guidellm", GUIDELLM)
    with connect(warehouse, read_only=True) as con:
        out = export_run(con, run_id, tmp_path / "pub")
        published = con.execute("SELECT count(*) FROM published_entries WHERE run_id = ?",
                                [run_id]).fetchall()[0][0]
    assert json.loads((out / "entries.json").read_text()) == []  # never merged with reruns
    imported = json.loads((out / "imported_entries.json").read_text())
    assert len(imported) == published and {e["evidence"] for e in imported} == {"imported"}
    assert "## Imported evidence" in (out / "entries.md").read_text()
    page = (out / "report.html").read_text()
    assert "Imported evidence" in page and "not recorded" in page
    assert "imported_entries.csv" in (out / "MANIFEST.sha256").read_text()


def test_historical_gaps_stay_visible_in_the_exports(warehouse, tmp_path):
    run_id = run_of(warehouse, "report", REPORT)
    with connect(warehouse, read_only=True) as con:
        out = export_run(con, run_id, tmp_path / "pub")
    historical = json.loads((out / "historical_entries.json").read_text())
    derived = json.loads((out / "derived_comparison_entries.json").read_text())
    assert {e["evidence"] for e in historical} == {"historical"}
    assert [e["record_id"] for e in derived] == ["summary-longin-mean"]
    long_input = [e for e in historical if e["record_id"] == "archive-longin-1"]
    assert {e["concurrency"] for e in long_input} == {None}
    assert all("concurrency" in e["not_recorded"] for e in long_input)
    markdown = (out / "entries.md").read_text()
    assert "## Historical evidence" in markdown and "## Derived comparisons" in markdown
    assert "| not recorded |" in markdown


def test_each_request_row_is_one_record_of_the_file():
    """Parsing alone: one row per record, the tool's own ids kept."""
    evidence = parse_evidence("aiperf", AIPERF)
    records = [json.loads(line) for line in
               (AIPERF / "profile_export.jsonl").read_text().splitlines()]
    assert evidence.requests.num_rows == len(records)
    assert evidence.requests.column("source_request_id").to_pylist() == [
        r["metadata"]["x_request_id"] for r in records]
    assert pc.all(pc.equal(evidence.requests.column("status"), "completed")).as_py()


def test_content_events_are_the_first_event_then_each_gap_after_the_one_before():
    from benchledger.imports.evidence import content_events

    first = pa.array([100, None, 200, 50], pa.int64())
    gaps = pa.array([[1, 2, 3], [5], [], None], pa.list_(pa.int64()))
    events, last, chunks = content_events(first, gaps)
    assert events.to_pylist() == [[100, 101, 103, 106], None, [200], [50]]
    assert last.to_pylist() == [106, None, 200, 50]
    assert chunks.to_pylist() == [4, 0, 1, 1]
