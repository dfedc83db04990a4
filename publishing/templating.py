"""The one Jinja environment of publishing/: report.html, the benchledger page and
entries.md are rendered from templates/ (installed with the package: pyproject's
package data, `templates/*`, which takes one flat folder: hence report_*.html, ui_*.html
rather than subfolders). HTML templates escape every value (autoescape by the file's extension);
the Markdown template does not (HTML entities there are Markdown's business: its cells go
through the `md` filter, publishing/formatting.md_text). Numbers are formatted by the
filters of publishing/formatting.py."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from benchledger.publishing.formatting import FILTERS

TEMPLATES = Path(__file__).parent / "templates"


@cache
def environment() -> jinja2.Environment:
    """Templates from the package's own folder (the repository's publishing/templates, or
    the installed benchledger/publishing/templates). An undefined name is an error, never
    an empty string: a misspelt field fails the test that renders it."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html",),
                                            default_for_string=True, default=False),
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
        keep_trailing_newline=True)
    env.filters.update(FILTERS)
    return env


def render(name: str, **context: Any) -> str:
    """A whole file (a page, entries.md)."""
    return environment().get_template(name).render(**context)


def fragment(name: str, **context: Any) -> Markup:
    """A piece of a page, rendered by its (autoescaped HTML) template, for another template
    to place as it is: every value in it was escaped when it was rendered, so it is safe
    HTML by construction. The only Markup made of template output."""
    if not name.endswith(".html"):
        raise ValueError(f"{name}: only an HTML template's output is safe HTML")
    return Markup(render(name, **context))
