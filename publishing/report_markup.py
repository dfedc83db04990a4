"""The report's HTML pieces shared by its sections: escaped text, numbers with their
intervals, tables that never run off the page, and figures."""

from __future__ import annotations

import html
import re

import pandas as pd

from benchledger.publishing.report_charts import Chart, inline_svg


def esc(value: object) -> str:
    return html.escape(cell(value))


def cell(value: object) -> str:
    """A value as a table shows it: 4 significant digits, empty for NULL."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def interval(low: float | None, high: float | None) -> str:
    """[low, high], or 'no interval' where there is none (one restart, one request)."""
    if low is None or pd.isna(low) or high is None or pd.isna(high):
        return "no interval"
    return f"[{cell(float(low))}, {cell(float(high))}]"


def table(frame: pd.DataFrame, columns: list[str], css: str = "") -> str:
    """A table of `columns`, each cell escaped. Its layout is fixed to the page's width
    and long values wrap (CSS), so no table is ever wider than the page."""
    if frame.empty:
        return "<p class='note'>(none)</p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for row in frame[columns].itertuples(index=False):
        cells = "".join(f"<td>{esc(value)}</td>" for value in row)
        body.append(f"<tr class='{css}'>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


# A chart drawn wider than this (points) takes the whole row of the charts' grid.
WIDE_CHART_PT = 500


def figure(chart: Chart | None) -> str:
    """A chart inline, with its caption and the name of its file in the publication."""
    if chart is None:
        return ""
    width = re.search(r'<svg[^>]*\swidth="([0-9.]+)pt"', chart.svg)
    css = " class='wide'" if width and float(width.group(1)) > WIDE_CHART_PT else ""
    return (f"<figure id='chart-{html.escape(chart.name)}'{css}>"
            f"<h3>{html.escape(chart.title)}</h3>"
            f"{inline_svg(chart.svg)}<figcaption>{html.escape(chart.caption)} "
            f"<a href='{html.escape(chart.path)}'>{html.escape(chart.path)}</a></figcaption>"
            "</figure>")


def details(summary: str, body: str) -> str:
    """A collapsible block (opened for print by the page's script)."""
    return f"<details><summary>{html.escape(summary)}</summary>{body}</details>"
