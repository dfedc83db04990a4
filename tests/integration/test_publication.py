"""Publication: validated-only exports, a verifying manifest, byte-stable re-export,
report.html rendered in headless Chromium, and `benchledger explain`'s lineage."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import textwrap

import duckdb
import pytest
from benchledger.publishing.export import EXPORTED_FILES, export_run
from benchledger.warehouse.db import connect, load_run_dir
from benchledger.warehouse.derive import derive_entries
from benchledger.warehouse.validate import validate_run

from benchledger.cli import main as cli_main
from benchledger.restart import RunLayout
from tests.synthetic import RUN_ID, S, request_row, write_synthetic_run

pytestmark = pytest.mark.integration

SWEEP = textwrap.dedent("""
    [sweep]
    name = "pub"
    [defaults]
    requests = 5
    restarts = 2
    [[arms]]
    name = "good"
    server = "simulator"
    model = "sim-model"
    [[arms]]
    name = "broken"
    server = "simulator"
    model = "sim-model"
    [arms.simulator]
    speculative = false
    num_speculative_tokens = 2
    [[workloads]]
    name = "code"
""")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--enable-logging=stderr",
                  "--v=0"]


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pub")
    layout = RunLayout(tmp / "data", RUN_ID)
    windows = {}
    for arm in ("good", "broken"):
        for k, decode_s in ((0, 1.0), (1, 0.9)):
            wid = layout.window_id(arm, k, "code", 1)
            rows = [request_row(wid, i, decode_s=decode_s * (1 + 0.02 * i),
                                prompt_tokens=40 + 10 * i) for i in range(5)]
            if arm == "broken" and k == 1:
                rows[0]["t_first_ns"] = rows[0]["t_done_ns"] + S  # fails ttft_not_above_e2e
            windows[(arm, k, "code")] = (rows, {})
    write_synthetic_run(tmp, SWEEP, windows)
    path = tmp / "wh.duckdb"
    with connect(path) as con:
        load_run_dir(con, layout.run_dir)
        validate_run(con, RUN_ID, docs_dir=layout.data_docs_dir)
        derive_entries(con, RUN_ID, docs_dir=layout.data_docs_dir)
    return path


@pytest.fixture(scope="module")
def exported(warehouse, tmp_path_factory):
    out = tmp_path_factory.mktemp("export")
    with connect(warehouse, read_only=True) as con:
        export_run(con, RUN_ID, out)
    return out


def published_ids(warehouse):
    with duckdb.connect(str(warehouse), read_only=True) as con:
        return {r for r, in con.execute("SELECT entry_id FROM published_entries").fetchall()}


def test_manifest_verifies_every_exported_file(exported):
    listed = {}
    for line in (exported / "MANIFEST.sha256").read_text().splitlines():
        digest, name = line.split("  ")
        listed[name] = digest
    assert set(EXPORTED_FILES) <= set(listed)
    assert all(name.startswith("gx-data-docs/") for name in set(listed) - set(EXPORTED_FILES))
    for name, digest in listed.items():
        assert hashlib.sha256((exported / name).read_bytes()).hexdigest() == digest
    if shutil.which("sha256sum"):
        subprocess.run(["sha256sum", "--check", "--quiet", "MANIFEST.sha256"],
                       cwd=exported, check=True)


def test_exports_hold_published_entries_only(exported, warehouse):
    rows = json.loads((exported / "entries.json").read_text())
    assert rows and {r["entry_id"] for r in rows} == published_ids(warehouse)
    assert {r["arm"] for r in rows} == {"good"}  # the broken arm is blocked
    for field in ("model", "server_kind", "effective_config_sha256", "run_id", "evidence",
                  "mean_prompt_tokens", "mean_output_tokens", "max_tokens", "n_submitted",
                  "concurrency", "arrival", "prompt_cache", "drain_status", "numerator",
                  "denominator", "phase", "scope", "statistic", "population", "n_failed",
                  "n_unresolved", "n_requests", "n_restarts", "ci95_low", "harness_version"):
        assert field in rows[0], field  # the benchmark line travels with every entry
    assert "| broken |" not in (exported / "entries.md").read_text()


def test_blocked_entries_appear_only_in_the_reports_blocked_section(exported):
    page = (exported / "report.html").read_text()
    head, blocked = page.split("<h2>Blocked entries (not published)</h2>")
    assert "ttft_not_above_e2e" in blocked and "<td>broken</td>" in blocked
    assert "<td>broken</td>" not in head and "ttft_not_above_e2e" not in head


def test_republishing_is_byte_identical(warehouse, exported, tmp_path):
    with connect(warehouse, read_only=True) as con:
        export_run(con, RUN_ID, tmp_path)
    for name in (*EXPORTED_FILES, "MANIFEST.sha256"):
        assert (tmp_path / name).read_bytes() == (exported / name).read_bytes(), name


def _chromium(*args: str, cwd=None) -> subprocess.CompletedProcess:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    assert binary, "chromium is installed by `make test` / .ci/run (Debian package chromium)"
    return subprocess.run([binary, *CHROMIUM_FLAGS, *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def console_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines()
            if "CONSOLE" in line and re.search(r"error|uncaught", line, re.I)]


def test_report_renders_in_headless_chromium(exported, tmp_path):
    page = (exported / "report.html").as_uri()
    dom = _chromium(f"--user-data-dir={tmp_path / 'profile-dom'}", "--dump-dom", page)
    assert dom.returncode == 0
    assert dom.stdout.count("<svg") >= 3  # restart dots, arms side by side, TTFT, ...
    assert console_errors(dom.stderr) == []
    shot = tmp_path / "report.png"
    run = _chromium(f"--user-data-dir={tmp_path / 'profile-shot'}", "--window-size=1200,2400",
                    f"--screenshot={shot}", page)
    assert run.returncode == 0 and shot.exists()
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)
    assert pixels.std() > 0.05  # not a blank page
    assert (pixels[..., :3].mean(axis=2) < 0.5).mean() > 0.005  # text and plot ink


def test_console_error_detection_works(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>console.error('boom')</script></body></html>")
    run = _chromium(f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", bad.as_uri())
    assert console_errors(run.stderr), run.stderr[-2000:]


def test_explain_lists_requests_raw_files_and_expectations(warehouse, capsys):
    with duckdb.connect(str(warehouse), read_only=True) as con:
        (entry_id,), = con.execute(
            "SELECT entry_id FROM published_entries WHERE metric = 'decode_rate' "
            "AND scope = 'single_stream'").fetchall()
        shas = {s for s, in con.execute("SELECT DISTINCT raw_file_sha256 FROM entry_lineage "
                                        "WHERE entry_id = ? AND raw_file_sha256 IS NOT NULL",
                                        [entry_id]).fetchall()}
    assert cli_main(["explain", entry_id, "--warehouse", str(warehouse), "--limit", "100"]) == 0
    out = capsys.readouterr().out
    assert "Requests (10):" in out and "/good/r0/code-c1/m0000" in out
    assert all(sha in out for sha in shas) and len(shas) == 2
    assert "[pass] windows/accounting_balances" in out
    assert "[pass] entries/rate_numerator_labelled" in out


def test_gx_data_docs_travel_with_the_report_and_are_linked(exported):
    index = exported / "gx-data-docs" / "index.html"
    assert index.exists()
    assert "href='gx-data-docs/index.html'" in (exported / "report.html").read_text()
    pages = " ".join(p.read_text(errors="replace") for p in index.parent.rglob("*.html"))
    for suite in ("restarts", "windows", "measured_requests", "entries"):
        assert suite in pages
