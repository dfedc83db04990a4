"""Hostile import files (issue #22, items 1, 2 and 11): impossible values, duplicates,
requested lengths passed off as usage, and files too large to parse.

Each file is a real fixture (tests/fixtures/imports) with one value changed. A refused file
gives one line naming the file, the record and the field, the value found and what was
expected, exit status 2, and nothing is loaded (the warehouse is not even created).
"""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from benchledger.cli import main
from benchledger.imports import parse_evidence
from benchledger.warehouse.db import connect
from tests.conftest import REPO

FIXTURES = REPO / "tests" / "fixtures" / "imports"
GUIDELLM = FIXTURES / "guidellm" / "usage.json"
GUIDELLM_REQUESTED = FIXTURES / "guidellm" / "requested.json"
AIPERF = FIXTURES / "aiperf" / "usage"
VLLM = FIXTURES / "vllm-bench" / "result.json"
REPORT = FIXTURES / "report" / "field-notes.csv"


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def rows(path: Path, sql: str, params=None) -> list[tuple]:
    with connect(path, read_only=True) as con:
        return con.execute(sql, params or []).fetchall()


def refused(capsys, tmp_path: Path, tool: str, file: Path, *extra: str) -> str:
    """Import `file`; it must be refused in one line, exit 2, with nothing written."""
    warehouse = tmp_path / "w.duckdb"
    code, out, err = cli(capsys, "import", tool, str(file), "--warehouse", str(warehouse),
                         *extra)
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("benchledger import: ") and "nothing was loaded" in err
    assert not warehouse.exists()
    return err


# --- GuideLLM: one value changed in the real report ----------------------------------------


def guidellm_copy(tmp_path: Path, change: Callable[[dict], None]) -> Path:
    report = json.loads(GUIDELLM.read_text())
    change(report)
    path = tmp_path / "hostile-guidellm.json"
    path.write_text(json.dumps(report))  # NaN and Infinity as Python's json writes them
    return path


def _request(report: dict, index: int = 2) -> dict:
    return report["benchmarks"][0]["requests"]["successful"][index]


def _set_timing(name: str, value: float) -> Callable[[dict], None]:
    return lambda report: _request(report)["info"]["timings"].__setitem__(name, value)


def _set_tokens(value) -> Callable[[dict], None]:
    def change(report: dict) -> None:
        _request(report)["output_tokens"] = value
        _request(report)["output_metrics"]["text_tokens"] = value
    return change


def _set_benchmark(name: str, value) -> Callable[[dict], None]:
    return lambda report: report["benchmarks"][0].__setitem__(name, value)


def _set_reported_rate(report: dict) -> None:
    report["benchmarks"][1]["metrics"]["output_tokens_per_second"]["successful"]["mean"] = (
        float("nan"))


GUIDELLM_VALUES = [
    # (what changed, the change, what the one line must name)
    ("negative duration", _set_benchmark("duration", -38.4),
     ["benchmarks[0]", "duration", "-38.4", "expected"]),
    ("infinite duration", _set_benchmark("duration", float("inf")),
     ["benchmarks[0]", "duration", "Infinity", "expected"]),
    ("NaN end time", _set_benchmark("end_time", float("nan")),
     ["benchmarks[0]", "end_time", "NaN", "expected"]),
    ("NaN timing", _set_timing("first_token_iteration", float("nan")),
     ["benchmarks[0].requests.successful[2]", "request_id", "first_token_iteration", "NaN",
      "expected"]),
    ("Infinity timing", _set_timing("request_end", float("inf")),
     ["benchmarks[0].requests.successful[2]", "request_end", "Infinity", "expected"]),
    ("a request that ends before it starts", _set_timing("request_end", 1e9),
     ["benchmarks[0].requests.successful[2]", "request_end", "expected"]),
    ("10^30 tokens", _set_tokens(10**30),
     ["benchmarks[0].requests.successful[2]", "output_tokens", "1" + "0" * 30,
      "expected a non-negative integer"]),
    ("30.5 tokens", _set_tokens(30.5),
     ["benchmarks[0].requests.successful[2]", "output_tokens", "30.5",
      "expected a non-negative integer"]),
    ("negative tokens", _set_tokens(-3),
     ["benchmarks[0].requests.successful[2]", "output_tokens", "-3", "expected"]),
    ("a NaN rate", _set_reported_rate,
     ["benchmarks[1]", "output_tokens_per_second", "NaN", "expected"]),
]


@pytest.mark.parametrize(("change", "named"), [(c, n) for _, c, n in GUIDELLM_VALUES],
                         ids=[what for what, _, _ in GUIDELLM_VALUES])
def test_guidellm_impossible_values_are_refused_in_one_line(tmp_path, capsys, change, named):
    path = guidellm_copy(tmp_path, change)
    err = refused(capsys, tmp_path, "guidellm", path)
    assert path.name in err
    for part in named:
        assert part in err, (part, err)


def _duplicate_record(report: dict) -> None:
    bench = report["benchmarks"][0]
    bench["requests"]["successful"].append(copy.deepcopy(bench["requests"]["successful"][1]))
    totals = bench["metrics"]["request_totals"]
    totals["successful"] += 1
    totals["total"] += 1


def _duplicate_benchmark(report: dict) -> None:
    report["benchmarks"].append(copy.deepcopy(report["benchmarks"][0]))


def test_a_duplicated_guidellm_request_record_is_refused(tmp_path, capsys):
    path = guidellm_copy(tmp_path, _duplicate_record)
    err = refused(capsys, tmp_path, "guidellm", path)
    last = len(json.loads(GUIDELLM.read_text())["benchmarks"][0]["requests"]["successful"])
    assert f"benchmarks[0].requests.successful[{last}]" in err
    assert "benchmarks[0].requests.successful[1]" in err and "twice" in err


def test_a_duplicated_guidellm_benchmark_is_refused_not_published_twice(tmp_path, capsys):
    path = guidellm_copy(tmp_path, _duplicate_benchmark)
    err = refused(capsys, tmp_path, "guidellm", path)
    assert "benchmarks[2] repeats benchmarks[0]" in err and "twice" in err


# --- GuideLLM: what proves the server's usage (trap T13) -----------------------------------


def test_a_real_guidellm_file_without_usage_is_not_usage_and_publishes_no_token_rate(
        tmp_path, capsys):
    """GuideLLM 0.8.1 against a server that streams no usage and stops at 30 tokens, asked
    for 100 (max_completion_tokens, ignore_eos): it writes its own 100 as text_tokens."""
    report = json.loads(GUIDELLM_REQUESTED.read_text())
    assert report["metadata"]["guidellm_version"] == "0.8.1"
    records = [r for b in report["benchmarks"] for r in b["requests"]["successful"]]
    assert {r["output_metrics"]["text_tokens"] for r in records} == {100}
    assert {r["info"]["timings"]["token_iterations"] for r in records} == {30}
    assert all('"ignore_eos":true' in r["request_args"] for r in records)
    warehouse = tmp_path / "w.duckdb"
    code, out, _ = cli(capsys, "import", "guidellm", str(GUIDELLM_REQUESTED), "--warehouse",
                       str(warehouse))
    assert code == 0
    run_id = parse_evidence("guidellm", GUIDELLM_REQUESTED).run_id
    assert rows(warehouse, "SELECT DISTINCT token_source FROM request_records JOIN windows "
                           "USING (window_id) WHERE run_id = ? AND status = 'completed'",
                [run_id]) == [("requested",)]
    assert "the requested output length" in out and "no token rate" in out
    rates = rows(warehouse, "SELECT publishable, blocked_by FROM entries WHERE run_id = ? "
                            "AND unit = 'tok/s'", [run_id])
    assert rates and all(not ok and "token_source_is_usage" in why for ok, why in rates)
    assert rows(warehouse, "SELECT count(*) FROM published_entries WHERE run_id = ? AND "
                           "unit = 'tok/s'", [run_id]) == [(0,)]


def _token_sources(tmp_path: Path, change: Callable[[dict], None]) -> list:
    """The token source of each completed request of the changed report."""
    requests = parse_evidence("guidellm", guidellm_copy(tmp_path, change)).requests
    return [source for source, status in zip(requests.column("token_source").to_pylist(),
                                             requests.column("status").to_pylist(),
                                             strict=True) if status == "completed"]


def _asked(count: int | None, *, ignore_eos: bool = True) -> Callable[[dict], None]:
    """Each successful request's body as GuideLLM writes it when its data names an output
    length: max_tokens that length and ignore_eos."""
    def change(report: dict) -> None:
        for bench in report["benchmarks"]:
            for record in bench["requests"]["successful"]:
                args = json.loads(record["request_args"])
                tokens = record["output_metrics"]["text_tokens"]
                args["body"]["max_tokens"] = tokens if count is None else count
                args["body"]["ignore_eos"] = ignore_eos
                record["request_args"] = json.dumps(args)
    return change


def _no_prompt_usage(report: dict) -> None:
    for bench in report["benchmarks"]:
        for record in bench["requests"]["successful"]:
            record["input_metrics"]["text_tokens"] = None


def test_guidellm_counts_equal_to_what_it_asked_for_are_not_usage(tmp_path):
    # the count equals the length GuideLLM asked for with ignore_eos: its own filled-in
    # value, whatever the server did
    assert set(_token_sources(tmp_path, _asked(None))) == {"requested"}
    # no prompt count came back: GuideLLM heard no usage, so its count is the request's
    assert set(_token_sources(tmp_path, _no_prompt_usage)) == {"requested"}
    # a count other than the one asked for can only be the server's usage
    assert set(_token_sources(tmp_path, _asked(100))) == {"usage"}
    assert set(_token_sources(tmp_path, lambda report: None)) == {"usage"}


# --- AIPerf ---------------------------------------------------------------------------------


def aiperf_copy(tmp_path: Path, change_record: Callable[[dict], None] | None = None,
                change_summary: Callable[[dict], None] | None = None,
                duplicate: bool = False) -> Path:
    folder = tmp_path / "hostile-aiperf"
    shutil.copytree(AIPERF, folder)
    records = [json.loads(line) for line in
               (AIPERF / "profile_export.jsonl").read_text().splitlines()]
    summary = json.loads((AIPERF / "profile_export_aiperf.json").read_text())
    if change_record:
        change_record(records[2])
    if duplicate:
        records.append(copy.deepcopy(records[1]))
        summary["request_count"]["avg"] += 1
    if change_summary:
        change_summary(summary)
    (folder / "profile_export.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in records))
    (folder / "profile_export_aiperf.json").write_text(json.dumps(summary))
    return folder


def _metric(name: str, value) -> Callable[[dict], None]:
    return lambda record: record["metrics"][name].__setitem__("value", value)


def _gap(value: float) -> Callable[[dict], None]:
    return lambda record: record["metrics"]["inter_chunk_latency"]["value"].__setitem__(
        3, value)


def _meta(name: str, value) -> Callable[[dict], None]:
    return lambda record: record["metadata"].__setitem__(name, value)


AIPERF_VALUES = [
    ("negative TTFT", _metric("time_to_first_token", -5.0),
     ["line 3", "x_request_id", "time_to_first_token", "-5.0", "expected"]),
    ("NaN TTFT", _metric("time_to_first_token", float("nan")),
     ["line 3", "time_to_first_token", "NaN", "expected"]),
    ("Infinity chunk gap", _gap(float("inf")),
     ["line 3", "inter_chunk_latency", "Infinity", "expected"]),
    ("a request that ends before it starts", _meta("request_end_ns", 1),
     ["line 3", "request_end_ns", "expected"]),
    ("NaN start", _meta("request_start_ns", float("nan")),
     ["line 3", "request_start_ns", "NaN", "expected"]),
    ("10^30 tokens", _metric("usage_completion_tokens", 10**30),
     ["line 3", "usage_completion_tokens", "1" + "0" * 30, "expected a non-negative integer"]),
    ("30.5 tokens", _metric("usage_completion_tokens", 30.5),
     ["line 3", "usage_completion_tokens", "30.5", "expected a non-negative integer"]),
]


@pytest.mark.parametrize(("change", "named"), [(c, n) for _, c, n in AIPERF_VALUES],
                         ids=[what for what, _, _ in AIPERF_VALUES])
def test_aiperf_impossible_values_are_refused_in_one_line(tmp_path, capsys, change, named):
    folder = aiperf_copy(tmp_path, change)
    err = refused(capsys, tmp_path, "aiperf", folder)
    assert "profile_export.jsonl" in err
    for part in named:
        assert part in err, (part, err)


def test_an_aiperf_window_that_ends_before_it_starts_is_refused(tmp_path, capsys):
    def swap(summary: dict) -> None:
        summary["start_time"], summary["end_time"] = summary["end_time"], summary["start_time"]

    err = refused(capsys, tmp_path, "aiperf", aiperf_copy(tmp_path, change_summary=swap))
    assert "profile_export_aiperf.json" in err and "end_time" in err and "expected" in err


def test_a_duplicated_aiperf_record_is_refused(tmp_path, capsys):
    err = refused(capsys, tmp_path, "aiperf", aiperf_copy(tmp_path, duplicate=True))
    lines = len((AIPERF / "profile_export.jsonl").read_text().splitlines())
    assert f"line {lines + 1}" in err and "repeats line 2" in err and "twice" in err


# --- vllm bench serve -----------------------------------------------------------------------


def vllm_copy(tmp_path: Path, change: Callable[[dict], None]) -> Path:
    result = json.loads(VLLM.read_text())
    change(result)
    path = tmp_path / "hostile-vllm.json"
    path.write_text(json.dumps(result))
    return path


def _vllm_set(name: str, value, index: int | None = None) -> Callable[[dict], None]:
    def change(result: dict) -> None:
        if index is None:
            result[name] = value
        else:
            result[name][index] = value
    return change


def _vllm_duplicate(result: dict) -> None:
    for key in ("input_lens", "output_lens", "ttfts", "itls", "errors", "latencies",
                "start_times", "queue_times", "generated_texts"):
        if isinstance(result.get(key), list):
            result[key].append(copy.deepcopy(result[key][1]))
    result["completed"] += 1


VLLM_VALUES = [
    ("negative duration", _vllm_set("duration", -38.4), ["duration", "-38.4", "expected"]),
    ("infinite duration", _vllm_set("duration", float("inf")),
     ["duration", "Infinity", "expected"]),
    ("NaN TTFT", _vllm_set("ttfts", float("nan"), 3),
     ["request 3", "ttfts", "NaN", "expected"]),
    ("Infinity latency", _vllm_set("latencies", float("inf"), 1),
     ["request 1", "latencies", "Infinity", "expected"]),
    ("10^30 tokens", _vllm_set("output_lens", 10**30, 2),
     ["request 2", "output_lens", "1" + "0" * 30, "expected a non-negative integer"]),
    ("30.5 tokens", _vllm_set("output_lens", 30.5, 2),
     ["request 2", "output_lens", "30.5", "expected a non-negative integer"]),
    ("a NaN rate", _vllm_set("output_throughput", float("nan")),
     ["output_throughput", "NaN", "expected"]),
]


@pytest.mark.parametrize(("change", "named"), [(c, n) for _, c, n in VLLM_VALUES],
                         ids=[what for what, _, _ in VLLM_VALUES])
def test_vllm_bench_impossible_values_are_refused_in_one_line(tmp_path, capsys, change, named):
    path = vllm_copy(tmp_path, change)
    err = refused(capsys, tmp_path, "vllm-bench", path)
    assert path.name in err
    for part in named:
        assert part in err, (part, err)


def test_a_duplicated_vllm_bench_request_is_refused(tmp_path, capsys):
    err = refused(capsys, tmp_path, "vllm-bench", vllm_copy(tmp_path, _vllm_duplicate))
    assert "request 6 repeats request 1" in err and "twice" in err


def test_a_vllm_bench_rate_must_be_finite_but_inf_means_all_at_once(tmp_path, capsys):
    err = refused(capsys, tmp_path, "vllm-bench",
                  vllm_copy(tmp_path, _vllm_set("request_rate", float("nan"))))
    assert "summary: request_rate NaN, expected a finite rate > 0, or inf" in err
    # vLLM writes request_rate inf (JSON Infinity) for all requests at once: not refused
    path = vllm_copy(tmp_path, _vllm_set("request_rate", float("inf")))
    code, _, err = cli(capsys, "import", "vllm-bench", str(path), "--warehouse",
                       str(tmp_path / "w.duckdb"))
    assert code == 0, err


# --- historical reports ---------------------------------------------------------------------


def test_report_impossible_counts_and_duplicated_rows_are_refused(tmp_path, capsys):
    lines = REPORT.read_text().splitlines(keepends=True)
    header = lines[0].strip().split(",")
    ladder = lines[3]  # ladder-c1: no quoted cells
    assert ladder.startswith("ladder,historical,ladder-c1,")
    big = tmp_path / "big.csv"
    cells = ladder.rstrip("\n").split(",")
    cells[header.index("requests")] = "1" + "0" * 30
    big.write_text(lines[0] + ",".join(cells) + "\n")
    err = refused(capsys, tmp_path, "report", big)
    assert "line 2, column requests" in err and "1" + "0" * 30 in err
    twice = tmp_path / "twice.csv"
    twice.write_text("".join(lines) + ladder)
    err = refused(capsys, tmp_path, "report", twice)
    assert f"line {len(lines) + 1}" in err and "repeats line 4" in err and "twice" in err


# --- size: bounded before anything is read ---------------------------------------------------


@pytest.mark.parametrize(("tool", "file"), [("guidellm", GUIDELLM), ("aiperf", AIPERF),
                                            ("vllm-bench", VLLM), ("report", REPORT)])
def test_a_file_above_the_size_limit_is_refused_naming_its_size_and_the_limit(
        tmp_path, capsys, tool, file):
    err = refused(capsys, tmp_path, tool, file, "--max-bytes", "1000")
    assert "1000 bytes" in err and "--max-bytes" in err and "bytes" in err
    # raised above the file's size, the same file loads
    code, _, err = cli(capsys, "import", tool, str(file), "--warehouse",
                       str(tmp_path / "w.duckdb"), "--max-bytes", str(10**7))
    assert code == 0, err


def test_a_huge_sparse_file_is_refused_before_it_is_read(tmp_path, capsys, monkeypatch):
    from benchledger import imports
    from benchledger.imports import guidellm

    def never(*args, **kwargs):
        raise AssertionError("the file was read")

    monkeypatch.setattr(imports, "file_sha256", never)  # hashed before parsing
    monkeypatch.setattr(guidellm, "read_json", never)
    documented = 512 * 2**20  # the default docs/imports.md names
    huge = tmp_path / "huge.json"
    with huge.open("wb") as f:
        f.truncate(documented + 1)  # sparse: nothing is allocated
    err = refused(capsys, tmp_path, "guidellm", huge)
    assert "huge.json" in err and f"{documented + 1} bytes (512.0 MiB)" in err
    assert f"limit of {documented} bytes" in err and "--max-bytes" in err


def test_the_size_limit_can_be_set_in_the_environment(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("BENCHLEDGER_IMPORT_MAX_BYTES", "1000")
    err = refused(capsys, tmp_path, "guidellm", GUIDELLM)
    assert "1000 bytes" in err and "BENCHLEDGER_IMPORT_MAX_BYTES" in err
