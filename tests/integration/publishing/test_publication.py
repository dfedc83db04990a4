"""Publication: validated-only exports, a verifying manifest, byte-stable re-export,
report.html rendered in headless Chromium (its sections in reading order, its charts also
as files), and `benchledger explain`'s lineage."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import duckdb
import pytest

from benchledger.cli import main as cli_main
from benchledger.publishing.export import PublicationError, export_run, write_publication
from benchledger.raw.layout import RunLayout
from benchledger.rules import CATALOGUE
from benchledger.warehouse.db import connect
from benchledger.warehouse.derive import derive_entries
from benchledger.warehouse.load import load_run_dir
from benchledger.warehouse.validate import validate_run
from tests.browser import opened
from tests.sweeps import simulator_arm, sweep
from tests.synthetic import RUN_ID, S, request_row, write_synthetic_run

pytestmark = pytest.mark.integration

SWEEP = sweep("pub", [simulator_arm("good"),
                      simulator_arm("broken", {"speculative": False,
                                               "num_speculative_tokens": 2})],
              defaults={"requests": 5, "restarts": 2})
# The files every publication holds (the manifest lists them, the charts aside).
EXPORTED_FILES = ("entries.json", "entries.csv", "entries.md", "comparisons.json",
                  "report.html")


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
    assert any(name.startswith("charts/") for name in listed)  # the report's charts
    assert all(name.startswith("charts/") for name in set(listed) - set(EXPORTED_FILES))
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
    markdown = (exported / "entries.md").read_text()
    assert "| broken |" not in markdown
    # how the server's counters checked each number travels with it, in both formats
    assert "| counters |" in markdown.splitlines()[4]
    checks = {r["counter_check"] for r in rows}
    assert checks and checks <= {"reconciled", "lower bound", "partial", "no counter"}
    assert all(f"| {r['counter_check']} |" in markdown for r in rows)


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


class Page(HTMLParser):
    """What a reader sees of the report: headings, tables (under the heading they follow),
    headline numbers (the entry each card line shows, and its value) and figures (title,
    caption, and the elements their inline SVG draws, with matplotlib's group ids:
    PathCollection_* are scatter points, xtick_* the x axis ticks)."""

    def __init__(self, dom: str):
        super().__init__()
        self.headings: list[str] = []  # the h2s, in order
        self.section: str | None = None  # the nearest heading above, h2 or h3
        self.tables: list[dict] = []  # {"section", "rows": [[cell text]], "classes"}
        self.figures: list[dict] = []  # {"title", "caption", "tags": Counter, "groups"}
        self.numbers: list[dict] = []  # {"entry", "value", "labels"} of the headline cards
        self.chart_links: list[str] = []
        self.scripts = 0
        self.dom = dom
        self._text: list[str] | None = None
        self._number_field: str | None = None
        self._figure: dict | None = None
        self._group: list[str] = []  # ids of the open SVG <g> elements
        self.feed(dom)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        section = self.section
        css = attrs.get("class") or ""
        if tag == "script":
            self.scripts += 1
        elif tag in ("h2", "h3", "td", "th", "figcaption"):
            self._text = []
        elif tag == "table":
            self.tables.append({"section": section, "rows": [], "classes": []})
        elif tag == "tr":
            self.tables[-1]["rows"].append([])
            self.tables[-1]["classes"].append(css)
        elif tag == "div" and css == "number":
            self.numbers.append({"entry": attrs["data-entry"]})
        elif tag == "span" and css in ("value", "labels") and self.numbers:
            self._number_field, self._text = css, []
        elif tag == "a" and (attrs.get("href") or "").startswith("charts/"):
            self.chart_links.append(attrs["href"])
        elif tag == "figure":
            self._figure = {"title": None, "caption": None, "tags": Counter(),
                            "markers": Counter(), "groups": [], "svg": None}
            self.figures.append(self._figure)
        if self._figure is not None and tag not in ("figure", "figcaption", "h3", "a"):
            self._figure["tags"][tag] += 1
            if tag == "svg" and self._figure["svg"] is None:
                self._figure["svg"] = attrs
            if tag == "g":
                self._group.append(attrs.get("id") or "")
                self._figure["groups"].append(self._group[-1])
            if (tag == "use" and any(g.startswith("PathCollection") for g in self._group)
                    and not any(g.startswith("legend") for g in self._group)):
                collection = next(g for g in reversed(self._group)
                                  if g.startswith("PathCollection"))
                self._figure["markers"][collection] += 1  # one scatter point

    def handle_endtag(self, tag):
        text = None if self._text is None else " ".join("".join(self._text).split())
        if tag == "span" and self._number_field is not None:
            self.numbers[-1][self._number_field] = text
            self._number_field, self._text = None, None
            return
        if tag == "h3" and self._figure is not None:
            self._figure["title"] = text
        elif tag in ("h2", "h3"):
            self.section = text
        if tag == "h2":
            self.headings.append(text)
        elif tag in ("td", "th"):
            self.tables[-1]["rows"][-1].append(text)
        elif tag == "figcaption":
            self._figure["caption"] = text
        elif tag == "figure":
            self._figure = None
        elif tag == "g" and self._figure is not None and self._group:
            self._group.pop()
        if tag in ("h2", "h3", "td", "th", "figcaption"):
            self._text = None

    def handle_data(self, data):
        if self._text is not None:
            self._text.append(data)

    def table(self, section: str) -> list[dict]:
        """The rows of the table under a heading, as {column: cell text}."""
        (table,) = [t for t in self.tables if t["section"] == section]
        header, *rows = table["rows"]
        return [dict(zip(header, row, strict=True)) for row in rows]


# Top-down, as issue #28 asks: what the run was for first, then what it rests on.
REPORT_SECTIONS = ["Verdicts", "Headline entries", "Charts", "History of this sweep", "Workload",
                   "Blocked entries (not published)", "The ruler's own error (T17)",
                   "Provenance", "Every published entry"]


def test_report_needs_nothing_from_the_network(exported):
    # One small inline script (sorting, expand/collapse, printing) and inline SVG and CSS:
    # no src or href leaves the publication's folder.
    page = (exported / "report.html").read_text()
    assert Page(page).scripts == 1
    assert "<script src" not in page.lower() and "<link" not in page.lower()
    assert not re.search(r"""(src|href)=['"]?(https?:)?//""", page)


@pytest.fixture(scope="module")
def rendered(exported, tmp_path_factory):
    """report.html as headless Chromium rendered it: the DOM it built and a screenshot."""
    shot = tmp_path_factory.mktemp("chromium") / "report.png"
    with opened(exported / "report.html", 1200, 2400) as seen:
        dom = seen.page.content()
        seen.page.screenshot(path=str(shot))
        assert seen.errors == []
    return Page(dom), shot


def test_rendered_report_reads_top_down_with_the_published_headline_values(
        rendered, warehouse):
    page, _ = rendered
    assert page.headings == REPORT_SECTIONS
    assert page.scripts == 1
    with duckdb.connect(str(warehouse), read_only=True) as con:
        # the cards' picks, asked of the warehouse: per-request decode and TTFT p50/p90,
        # window-level output throughput (one load point in this run)
        expected = con.execute(
            "SELECT entry_id, value, unit, population, numerator, scope FROM published_entries "
            "WHERE run_id = ? AND ((metric = 'decode_rate' AND statistic = 'mean' "
            "AND scope <> 'aggregate' AND numerator = 'output_tokens') "
            "OR (metric = 'throughput' AND scope = 'aggregate' "
            "AND numerator = 'output_tokens') "
            "OR (metric = 'ttft' AND statistic IN ('p50', 'p90')))", [RUN_ID]).fetchall()
        unpublished = set(con.execute("SELECT arm, workload, metric FROM entries "
                                      "WHERE run_id = ? AND NOT publishable", [RUN_ID]).fetchall())
        rule_blocks = set(con.execute(
            "SELECT b.rule, e.arm, e.workload, e.metric, e.statistic FROM entry_blocks AS b "
            "JOIN entries AS e USING (entry_id) WHERE e.run_id = ?", [RUN_ID]).fetchall())
    assert len(expected) == 4
    shown = {n["entry"]: n for n in page.numbers}
    assert set(shown) == {entry_id for entry_id, *_ in expected}
    for entry_id, value, unit, population, numerator, scope in expected:
        # as published, latencies (stored in seconds) read in ms like every table
        assert shown[entry_id]["value"] == f"{value * 1000 if unit == 's' else value:.4g}"
        labels = shown[entry_id]["labels"].split(" · ")
        assert labels[0] == "2 restarts"
        assert {population, scope, "c=1"} <= set(labels)
        assert numerator is None or numerator in labels
    # no comparison in this sweep: the verdicts say so, in words
    verdicts = page.dom.split('<section id="verdicts">', 1)[1].split("</section>", 1)[0]
    assert "No verdict: this run compared no arms" in verdicts
    # blocked entries, grouped by the rule that blocked them, each with expected and found
    groups = [t for t in page.tables if t["classes"][1:] and
              all(c == "blocked" for c in t["classes"][1:])
              and t["section"] != "Beneath the blocked entries: restarts left out, "
                                  "windows failed"]
    blocked = [(t["section"], row) for t in groups
               for row in [dict(zip(t["rows"][0], r, strict=True)) for r in t["rows"][1:]]]
    assert {(r["arm"], r["workload"], r["metric"]) for _, r in blocked} == unpublished
    assert ("broken", "code", "decode_rate") in unpublished  # the arm with the bad window
    assert {(section.split(" (")[0], r["arm"], r["workload"], r["metric"], r["statistic"])
            for section, r in blocked} == rule_blocks  # each under the rule that blocked it
    assert all(r["expected"] and r["found"] for _, r in blocked)
    # beneath them, each rule that failed on a restart, window or request, with counts
    beneath = page.table("Beneath the blocked entries: restarts left out, windows failed")
    entry_rules = {rule.name for rule in CATALOGUE if rule.applies_to == "entry"}
    failed_rules = {s.split(" (")[0] for s, _ in blocked} - entry_rules
    assert failed_rules  # the broken arm's window failed a rule beneath its entries
    assert failed_rules <= {r["rule"] for r in beneath}
    assert all(0 < int(r["n_failed"]) <= int(r["n_checked"]) for r in beneath)


def test_rendered_charts_draw_the_published_requests_and_are_files_too(rendered, exported):
    page, _ = rendered
    # no ladder (one concurrency), no frontier and no server log lines in this run
    assert [f["title"] for f in page.figures] == [
        "Requests per restart", "Arms side by side", "TTFT vs input length",
        "Requested and delivered lengths"]
    for figure in page.figures:
        assert figure["caption"]
        svg = figure["svg"]
        assert svg is not None and float(svg["width"].removesuffix("pt")) > 100
        assert float(svg["height"].removesuffix("pt")) > 100
        assert figure["tags"]["path"] > 20  # axes, ticks, glyphs and the data drawn
    dots, bars, ttft, *_ = page.figures
    # the published arm's 2 restarts x 5 requests, one dot each (legend keys aside); the
    # broken arm is not drawn
    assert sorted(dots["markers"].values()) == [5, 5]
    assert list(ttft["markers"].values()) == [10]

    def ticks(figure, axis):
        return sum(g.startswith(f"{axis}tick_") for g in figure["groups"])

    assert ticks(dots, "x") == 4  # r0, r1, then the request- and restart-level intervals
    assert ticks(bars, "x") == 1  # one bar group: the published arm only
    assert "LineCollection_1" in bars["groups"]  # its 95% CI whisker
    # every chart drawn is a file of the publication, listed in its manifest, and the same
    # drawing as the page's
    listed = {line.split("  ")[1] for line in
              (exported / "MANIFEST.sha256").read_text().splitlines()}
    charts = {name for name in listed if name.startswith("charts/")}
    assert charts == set(page.chart_links) and len(charts) == len(page.figures)
    html_text = (exported / "report.html").read_text()
    for name in charts:
        svg = (exported / name).read_text()
        assert svg.startswith("<?xml") and svg[svg.index("<svg"):] in html_text


def test_report_screenshot_is_not_blank(rendered):
    import matplotlib.image

    _, shot = rendered
    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[:2] == (2400, 1200)
    assert pixels.std() > 0.05  # not a blank page
    assert (pixels[..., :3].mean(axis=2) < 0.5).mean() > 0.005  # text and plot ink
    # colour: the plots' markers and bars, not only black text on white
    rgb = pixels[..., :3]
    assert ((rgb.max(axis=2) - rgb.min(axis=2)) > 0.3).mean() > 0.001


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


# A URL a page would load or follow from elsewhere: an attribute naming one (src, href,
# srcset, ...) or CSS's url() and @import, http(s) or scheme-relative. Read by this test's
# own pattern over every file, not by the code under test.
OUTSIDE = re.compile(r"""(?:\b(?:src|href|srcset|poster|data|action)\s*=\s*["']?\s*"""
                     r"""|url\(\s*["']?|@import\s+["']?)(?:https?:)?//""", re.I)


def test_the_published_folder_opens_offline_and_loads_nothing_from_elsewhere(exported):
    found = {path.relative_to(exported).as_posix(): OUTSIDE.findall(
        path.read_text(errors="replace")) for path in exported.rglob("*") if path.is_file()}
    assert len(found) > len(EXPORTED_FILES)  # every file, the charts included
    assert {name: hits for name, hits in found.items() if hits} == {}


def test_gx_data_docs_stay_with_the_run_and_the_report_says_where(exported, warehouse):
    # GX's pages load jQuery, Bootstrap and Vega from public CDNs: they stay beside the
    # run's raw data, out of the publication; the report names where, as text.
    assert not (exported / "gx-data-docs").exists()
    with connect(warehouse, read_only=True) as con:
        (docs,), = con.execute("SELECT data_docs_path FROM runs WHERE run_id = ?",
                               [RUN_ID]).fetchall()
    index = Path(docs) / "index.html"
    assert index.exists()
    pages = " ".join(p.read_text(errors="replace") for p in index.parent.rglob("*.html"))
    for suite in ("restarts", "windows", "measured_requests", "entries"):
        assert suite in pages
    report = (exported / "report.html").read_text()
    assert f"<code>gx-data-docs/{Path(docs).name}/index.html</code>" in report
    assert "gx-data-docs" not in " ".join(re.findall(r"href='[^']*'", report))
    assert str(Path(docs).parent) not in report  # no path of the publishing host


def test_a_page_that_would_load_from_elsewhere_is_refused_before_anything_is_written(
        warehouse, tmp_path):
    with connect(warehouse, read_only=True) as con:
        (docs,), = con.execute("SELECT data_docs_path FROM runs WHERE run_id = ?",
                               [RUN_ID]).fetchall()
    # what the publication held before: the run's Data Docs as GX renders them
    files = {f"gx-data-docs/{p.relative_to(docs).as_posix()}": p.read_bytes()
             for p in Path(docs).rglob("*.html")}
    files["notes.html"] = (b"<p>src=https://example.org is text, as is "
                           b"&lt;img src='https://example.org/x.png'&gt;</p>"
                           b"<a href='charts/x.svg#top'>a chart</a>")
    out = tmp_path / "pub"
    with pytest.raises(PublicationError, match=r"loads nothing from elsewhere, but "
                                               rf"{len(files) - 1} of its files name URLs "
                                               r"outside it: gx-data-docs/\S+\.html: "
                                               r"https://cdn\.") as err:
        write_publication(out, files)
    assert "notes.html" not in str(err.value)
    assert not out.exists()
    write_publication(out, {"notes.html": files["notes.html"]})  # text and a relative link
    for planted in (b"<link rel=stylesheet href=//cdn.example.org/x.css>",
                    b"<svg><image xlink:href='http://example.org/x.png'/></svg>",
                    b"<style>@import 'https://example.org/x.css';</style>",
                    b"<div style='background: url(https://example.org/x.png)'></div>",
                    b"<img srcset='a.png 1x, https://example.org/b.png 2x'>"):
        with pytest.raises(PublicationError, match="example.org"):
            write_publication(tmp_path / "other", {"page.html": planted})


# --- publishing never touches a user's files ----------------------------------------------

def publish_into(warehouse, out, capsys) -> tuple[int, str, str]:
    code = cli_main(["publish", "--warehouse", str(warehouse), "--out", str(out),
                     "--run", RUN_ID])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def snapshot(folder) -> dict:
    """Every entry under `folder` (symlinks as their target text, never followed)."""
    found = {}
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if path.is_symlink():
            found[name] = ("symlink", os.readlink(path))
        elif path.is_file():
            found[name] = ("file", path.read_bytes(), path.stat().st_mtime_ns)
        else:
            found[name] = ("dir",)
    return found


def manifest_names(folder) -> set[str]:
    return {line.split("  ", 1)[1]
            for line in (folder / "MANIFEST.sha256").read_text().splitlines()}


def test_publish_refuses_a_used_folder_it_does_not_own(warehouse, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "entries.json").write_text("my own notes\n")
    (out / "thesis.tex").write_text("\\documentclass{article}\n")
    before = snapshot(out)
    code, stdout, err = publish_into(warehouse, out, capsys)
    assert code == 2 and "published" not in stdout
    assert f"{out} is not empty and was not written by benchledger publish" in err
    assert snapshot(out) == before  # nothing deleted, overwritten or added


def test_publish_never_writes_through_a_symlink(warehouse, tmp_path, capsys):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    code, _, err = publish_into(warehouse, link, capsys)
    assert code == 2 and f"{link} is a symlink" in err
    assert list(real.iterdir()) == []


def test_republishing_into_its_own_folder_replaces_only_what_it_wrote(warehouse, tmp_path,
                                                                      capsys):
    out = tmp_path / "pub"
    assert publish_into(warehouse, out, capsys)[0] == 0
    first = snapshot(out)
    assert ".benchledger-publication" in first
    written = manifest_names(out)
    assert {"entries.json", "report.html"} <= written and "MANIFEST.sha256" not in written
    # the user adds their own things next to the publication
    (out / "notes.md").write_text("my notes\n")
    (out / "charts" / "mine.txt").write_text("mine\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("not to be hashed\n")
    (out / "link-to-secret").symlink_to(secret)

    assert publish_into(warehouse, out, capsys)[0] == 0
    again = snapshot(out)
    assert again["notes.md"][1] == b"my notes\n"
    assert again["charts/mine.txt"][1] == b"mine\n"
    assert again["link-to-secret"] == ("symlink", str(secret))
    assert manifest_names(out) == written  # only what it wrote; no user file, no symlink
    for name in written:  # byte-identical republication
        assert again[name][1] == first[name][1], name
    if shutil.which("sha256sum"):
        subprocess.run(["sha256sum", "--check", "--quiet", "MANIFEST.sha256"], cwd=out,
                       check=True)


def test_republishing_refuses_a_listed_file_that_was_changed_or_replaced(warehouse, tmp_path,
                                                                         capsys):
    out = tmp_path / "pub"
    assert publish_into(warehouse, out, capsys)[0] == 0
    (out / "entries.md").write_text("edited by hand\n")
    code, _, err = publish_into(warehouse, out, capsys)
    assert code == 2 and "entries.md differs from what benchledger wrote" in err
    assert (out / "entries.md").read_text() == "edited by hand\n"

    (out / "entries.md").unlink()
    target = tmp_path / "elsewhere.md"
    target.write_text("a user's file\n")
    (out / "entries.md").symlink_to(target)
    code, _, err = publish_into(warehouse, out, capsys)
    assert code == 2 and "entries.md is no longer the regular file benchledger wrote" in err
    assert target.read_text() == "a user's file\n" and (out / "entries.md").is_symlink()


def test_publish_never_overwrites_an_unlisted_file_in_its_own_folder(warehouse, tmp_path,
                                                                     capsys):
    out = tmp_path / "pub"
    assert publish_into(warehouse, out, capsys)[0] == 0
    manifest = out / "MANIFEST.sha256"
    kept = [line for line in manifest.read_text().splitlines()
            if not line.endswith("  comparisons.json")]
    manifest.write_text("\n".join(kept) + "\n")  # comparisons.json is not ours any more
    before = (out / "comparisons.json").read_bytes()
    code, _, err = publish_into(warehouse, out, capsys)
    assert code == 2 and "comparisons.json exists and benchledger did not write it" in err
    assert (out / "comparisons.json").read_bytes() == before
    assert (out / "entries.json").exists()  # refused before anything was removed


def test_data_docs_symlinks_are_not_followed_into_the_publication(warehouse, tmp_path,
                                                                  capsys):
    with connect(warehouse, read_only=True) as con:
        (docs,), = con.execute("SELECT data_docs_path FROM runs WHERE run_id = ?",
                               [RUN_ID]).fetchall()
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2\n")
    link = Path(docs) / "innocent.html"
    link.symlink_to(secret)
    try:
        out = tmp_path / "pub"
        assert publish_into(warehouse, out, capsys)[0] == 0
    finally:
        link.unlink()
    assert not (out / "gx-data-docs" / "innocent.html").exists()
    assert "gx-data-docs/innocent.html" not in manifest_names(out)
    assert all(b"hunter2" not in p.read_bytes() for p in out.rglob("*") if p.is_file())
