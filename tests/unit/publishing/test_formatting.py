"""Numbers and units for people (publishing/formatting.py) and the one Jinja environment
(publishing/templating.py): a latency reads in ms with the digits its seconds had, the
exports' SI values are left alone, and a template escapes whatever a value holds."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from benchledger.publishing import formatting
from benchledger.publishing.export import entries_markdown
from benchledger.publishing.templating import environment, fragment, render

IMG = "<img src=x onerror=alert(1)>"


@pytest.mark.parametrize(("seconds", "shown"), [
    ("0.01076", "10.76"), ("0.354", "354"), ("0.3659", "365.9"), ("12.0", "12000"),
    ("0.0001235", "0.1235"), ("–", "–"), ("-0.0001652", "-0.1652"),
])
def test_a_latency_keeps_its_digits_in_ms(seconds, shown):
    assert formatting.shifted(seconds, "s") == shown
    assert formatting.shifted(seconds, "tok/s") == seconds  # other units as they are


def test_person_units_scale_latencies_only_and_leave_the_frame_alone():
    frame = pd.DataFrame({"value": [0.02, 480.0, None], "unit": ["s", "tok/s", "s"]})
    people = formatting.person_frame(frame, ["value"])
    assert people["unit"].tolist() == ["ms", "tok/s", "ms"]
    assert people["value"].tolist()[:2] == [20.0, 480.0] and math.isnan(people["value"][2])
    assert frame["value"].tolist()[0] == 0.02 and frame["unit"].tolist()[0] == "s"
    assert formatting.person_value(None, "s") is None


def test_each_surface_keeps_its_style():
    assert formatting.cell(80.0) == "80" and formatting.cell(None) == ""
    assert formatting.md_number(80.0) == "80.0" and formatting.md_number(None) == "–"
    assert formatting.text_number(0.5) == "0.5" and formatting.text_number(2.25) == "2.2"
    assert formatting.ui_number(203000) == "203,000" and formatting.ui_number(1234.5) == (
        "1,234.5")
    assert formatting.interval(None, 1.0) == "no interval"
    assert formatting.percent(0.415) == "41.5%" and formatting.percent(0.955, 0) == "96%"


def entry(metric: str, value: float, unit: str, arm: str = "a") -> dict:
    return {"arm": arm, "workload": "w", "metric": metric, "statistic": "p50",
            "phase": "prefill", "scope": "single_stream", "concurrency": 1,
            "numerator": None, "value": value, "unit": unit, "ci95_low": value * 0.5,
            "ci95_high": value * 1.5, "n_requests": 45, "n_restarts": 3,
            "population": "all_submitted", "prompt_cache": "warm", "drain_status": "complete",
            "token_source": "usage", "counter_check": "reconciled", "evidence": "rerun"}


def test_entries_md_shows_a_latency_in_ms_and_escapes_every_label():
    markdown = entries_markdown(pd.DataFrame([entry("ttft", 0.01076, "s", arm=IMG),
                                              entry("throughput", 480.0, "tok/s")]), "r`1")
    lines = markdown.splitlines()
    assert lines[0] == "# Published entries of run `r'1`"
    ttft = next(line for line in lines if "| ttft |" in line)
    assert "| 10.76 ms | [5.38, 16.14] |" in ttft
    assert "| 480.0 tok/s | [240.0, 720.0] |" in markdown
    assert IMG not in markdown and "&lt;img src=x onerror=alert(1)&gt;" in ttft


def test_html_templates_escape_and_markdown_templates_do_not():
    env = environment()
    assert env.from_string("{{ x }}").render(x=IMG) == (
        "&lt;img src=x onerror=alert(1)&gt;")  # a string template is HTML too
    assert env.get_template("report_findings.html").render(
        title="t", lines=[IMG]).count("<img") == 0
    assert render("evidence.md", sections=[], not_recorded="not recorded") == ""
    with pytest.raises(ValueError, match="only an HTML template"):
        fragment("entries.md", run_id="r", entries=[])
