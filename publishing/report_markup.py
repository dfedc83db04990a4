"""The report's shared pieces, as its templates draw them (templates/report_macros.html):
tables that never run off the page, and figures; the templates escape every value and
format it (publishing/formatting.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pandas as pd
from markupsafe import Markup

from benchledger.publishing.report_charts import Chart, inline_svg

# A chart drawn wider than this (points) takes the whole row of the charts' grid.
WIDE_CHART_PT = 500


@dataclass(frozen=True)
class Table:
    """A table of `columns`, one tuple of values per row (each cell shown as `cell` shows
    it); `row_css` names every row's class (`blocked`), `css` the table's (`sortable`).
    Its layout is fixed to the page's width and long values wrap (CSS), so no table is
    ever wider than the page. No rows: the page says `(none)`."""

    columns: list[str]
    rows: list[tuple[Any, ...]]
    row_css: str = ""
    css: str = ""


def table(frame: pd.DataFrame, columns: list[str], row_css: str = "",
          css: str = "") -> Table:
    rows = [] if frame.empty else [tuple(r) for r in frame[columns].itertuples(index=False)]
    return Table(columns, rows, row_css, css)


@dataclass(frozen=True)
class Figure:
    """A chart inline, with its caption and the name of its file in the publication."""

    name: str
    title: str
    caption: str
    path: str
    svg: Markup
    wide: bool


def figure(chart: Chart) -> Figure:
    width = re.search(r'<svg[^>]*\swidth="([0-9.]+)pt"', chart.svg)
    return Figure(chart.name, chart.title, chart.caption, chart.path, inline_svg(chart.svg),
                  bool(width and float(width.group(1)) > WIDE_CHART_PT))
