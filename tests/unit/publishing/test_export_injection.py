"""Exports a program opens cannot be turned against its reader (issue #22, item 6): a text
cell of a CSV export that a spreadsheet would take for a formula starts with a single
quote (OWASP), and every text cell of entries.md is escaped, so HTML in a name is shown,
never rendered. Through the real path: an old report imported with hostile names, then
published."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from benchledger.cli import main
from benchledger.imports import parse_evidence
from benchledger.publishing.evidence import csv_safe, csv_text, md_text
from benchledger.publishing.export import export_run
from benchledger.warehouse.db import connect
from tests.conftest import REPO

REPORT = REPO / "tests" / "fixtures" / "imports" / "report" / "field-notes.csv"
IMG = "<img src=x onerror=alert(1)>"
HOSTILE = {  # column of the report -> what an attacker wrote there
    "profile": '=HYPERLINK("http://x","y")',
    "record_id": "=cmd|' /C calc'!A0",
    "model": "+1+1",
    "runtime": "@SUM(1)",
    "backend": "-2+3",
    "hardware": f"{IMG} | `tick` [link](javascript:alert(1)) & more",
    "notes": IMG,
}
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("injection")
    rows = list(csv.DictReader(io.StringIO(REPORT.read_text())))
    row = next(r for r in rows if r["record_id"] == "ladder-c1") | HOSTILE
    report = folder / "hostile.csv"
    with open(report, "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerow(row)
    warehouse = folder / "w.duckdb"
    assert main(["import", "report", str(report), "--warehouse", str(warehouse)]) == 0
    with connect(warehouse, read_only=True) as con:
        return export_run(con, parse_evidence("report", report).run_id, folder / "pub")


def csv_cells(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def test_no_csv_cell_is_a_formula(published):
    rows = csv_cells(published / "historical_entries.csv")
    assert rows, "the hostile row published nothing"
    cells = [cell for row in rows for cell in row.values()]
    formulas = [c for c in cells if c.startswith(FORMULA_STARTS) and not is_number(c)]
    assert formulas == []
    for text in HOSTILE.values():
        if text.startswith(FORMULA_STARTS):
            assert "'" + text in cells, text  # kept, neutralised, not dropped
    # The JSON keeps every text as written: only spreadsheets evaluate cells.
    entries = json.loads((published / "historical_entries.json").read_text())
    assert {e["profile"] for e in entries} == {HOSTILE["profile"]}
    assert {e["record_id"] for e in entries} == {HOSTILE["record_id"]}


def test_every_csv_export_is_neutralised(published):
    for path in sorted(published.glob("*.csv")):
        cells = [cell for row in csv_cells(path) for cell in row.values()]
        assert not [c for c in cells if c.startswith(FORMULA_STARTS) and not is_number(c)], path


def test_markdown_cells_show_html_as_text(published):
    markdown = (published / "entries.md").read_text()
    assert IMG not in markdown and "<img" not in markdown
    assert "&lt;img src=x onerror=alert(1)&gt;" in markdown
    assert "\\| \\`tick\\` \\[link\\](javascript:alert(1)) &amp; more" in markdown
    section = markdown.split("## Historical evidence", 1)[1]
    table = [line for line in section.splitlines() if line.startswith("|")]
    columns = [len(re.findall(r"(?<!\\)\|", line)) for line in table]
    assert len(table) >= 3 and set(columns) == {columns[0]}  # no cell split by a pipe


def test_a_markdown_renderer_makes_no_tag_of_them(published):
    markdown_it = pytest.importorskip("markdown_it")
    renderer = markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table")
    html = renderer.render((published / "entries.md").read_text())
    assert "<table>" in html  # the sections are still tables
    assert "<img" not in html and "<a " not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    cells = html.split("<td>")
    assert any("=HYPERLINK(" in cell for cell in cells)


def test_csv_safe_neutralises_text_cells_only():
    frame = pd.DataFrame({"name": ["=1+1", "\t=1", "\r=1", "-2", "plain", None, "a=b"],
                          "value": [-2.0, -1.5, 3.0, -0.0, 1.0, None, 2.0],
                          "count": [-1, 2, 3, 4, 5, 6, 7]})
    safe = csv_safe(frame)
    assert safe["name"].tolist()[:5] == ["'=1+1", "'\t=1", "'\r=1", "'-2", "plain"]
    assert safe["name"].tolist()[6] == "a=b" and pd.isna(safe["name"].tolist()[5])
    assert safe["value"].tolist()[:2] == [-2.0, -1.5] and safe["count"].tolist()[0] == -1
    rows = list(csv.reader(io.StringIO(csv_text(frame), newline="")))
    assert [row[0] for row in rows[1:4]] == ["'=1+1", "'\t=1", "'\r=1"]  # one cell each
    assert rows[1][1] == "-2.0" and len(rows) == 1 + len(frame)
    assert frame["name"].tolist()[0] == "=1+1"  # the caller's frame is left as it was


@pytest.mark.parametrize(("text", "shown"), [
    (IMG, "&lt;img src=x onerror=alert(1)&gt;"),
    ("a|b", "a\\|b"),
    ("`x`", "\\`x\\`"),
    ("[a](b)", "\\[a\\](b)"),
    ("a & b", "a &amp; b"),
    ("two\nlines", "two lines"),
    ("c:\\path", "c:\\\\path"),
    ("decode_rate", "decode_rate"),
])
def test_md_text_escapes(text, shown):
    assert md_text(text) == shown
