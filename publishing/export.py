"""Validated-only exports: only rows of `published_entries` ever leave the warehouse.

One folder per publication:

    entries.json, entries.csv   every published entry, every label (the benchmark line)
    entries.md                  a Markdown table for a methodology page
    comparisons.json            every verdict, refuted hypotheses included
    report.html                 a static page with plots; blocked entries in their own section
    MANIFEST.sha256             `sha256sum -c` checks all of the above

Publishing the same warehouse twice gives byte-identical files: rows are sorted, and
derivation bookkeeping that differs between runs (derived_at) is left out.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import duckdb
import pandas as pd

from benchledger.publishing.read import comparisons, published_entries
from benchledger.publishing.report_html import render_report
from benchledger.warehouse.db import first_row

# Derivation bookkeeping that would make two exports of the same entries differ.
UNSTABLE_COLUMNS = ("derived_at",)


def _stable(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns=[c for c in UNSTABLE_COLUMNS if c in frame.columns])


def _json_records(frame: pd.DataFrame) -> str:
    records = json.loads(_stable(frame).to_json(orient="records", date_format="iso",
                                                 double_precision=10))
    return json.dumps(records, indent=1, sort_keys=True) + "\n"


def _md_number(value) -> str:
    if value is None or pd.isna(value):
        return "–"
    return f"{value:.4g}" if abs(value) < 10 else f"{value:.1f}"


def entries_markdown(entries: pd.DataFrame, run_id: str) -> str:
    """A Markdown table of the published entries, every label a reader needs."""
    header = ("| arm | workload | metric | statistic | phase | scope | c | numerator | value "
              "| 95% CI | n | restarts | population | prompts | drain | evidence |")
    lines = [f"# Published entries of run `{run_id}`", "",
             "Validated entries only; see docs/protocol.md of the benchledger project for "
             "what each label means.", "",
             header, "|" + "---|" * 16]
    for e in entries.itertuples():
        interval = ("–" if e.ci95_low is None or pd.isna(e.ci95_low)
                    else f"[{_md_number(e.ci95_low)}, {_md_number(e.ci95_high)}]")
        numerator = e.numerator if isinstance(e.numerator, str) else ""
        lines.append(
            f"| {e.arm} | {e.workload} | {e.metric} | {e.statistic} | {e.phase} | {e.scope} "
            f"| {e.concurrency} | {numerator} | {_md_number(e.value)} {e.unit} | {interval} "
            f"| {e.n_requests} | {e.n_restarts} | {e.population} | {e.prompt_cache or ''} "
            f"| {e.drain_status or ''} | {e.evidence} |")
    return "\n".join(lines) + "\n"


def write_manifest(out: Path) -> Path:
    """`sha256sum` format over every file of the folder (Data Docs included), so
    `sha256sum -c MANIFEST.sha256` verifies it."""
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*")
                   if p.is_file() and p.name != "MANIFEST.sha256")
    lines = [f"{hashlib.sha256((out / name).read_bytes()).hexdigest()}  {name}"
             for name in names]
    manifest = out / "MANIFEST.sha256"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest


DATA_DOCS = "gx-data-docs"  # the run's GX Data Docs, copied next to the report


def _copy_data_docs(con: duckdb.DuckDBPyConnection, run_id: str, out: Path) -> Path | None:
    row = first_row(con, "SELECT data_docs_path FROM runs WHERE run_id = ?", [run_id])
    source = Path(row[0]) if row and row[0] else None
    if source is None or not (source / "index.html").exists():
        return None
    target = out / DATA_DOCS
    if target.resolve() != source.resolve():
        shutil.rmtree(target, ignore_errors=True)
        # Only the rendered pages travel; GX's own stores stay with the run's raw data.
        shutil.copytree(source, target, ignore=shutil.ignore_patterns(".*"))
    return Path(DATA_DOCS) / "index.html"


def export_run(con: duckdb.DuckDBPyConnection, run_id: str, out: Path) -> Path:
    """Write one run's publication into `out` (created if needed)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    data_docs = _copy_data_docs(con, run_id, out)
    entries = published_entries(con, run_id)
    (out / "entries.json").write_text(_json_records(entries))
    _stable(entries).to_csv(out / "entries.csv", index=False)
    (out / "entries.md").write_text(entries_markdown(entries, run_id))
    # Verdicts are published like entries, refuted hypotheses included.
    (out / "comparisons.json").write_text(_json_records(comparisons(con, run_id)))
    (out / "report.html").write_text(render_report(con, run_id, data_docs))
    write_manifest(out)
    return out
