"""The benchledger page's tables a page at a time (issue #39, item 13: a run of 203,000
entries was one 74 MB page, made in 15 s inside the API server). Each table reads at most
PAGE_ROWS rows from its query (LIMIT/OFFSET, bound parameters) and counts the rest in SQL;
its pager says which rows these are of how many, and links the previous and next pages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from fastapi import HTTPException

# The most rows one table shows on one page.
PAGE_ROWS = 500


@dataclass(frozen=True)
class Link:
    """A link of the page: its text and where it goes (templates/ui_macros.html)."""

    text: str
    href: str


def href(page: str, **params: Any) -> str:
    """A link to another page of the app, relative, so it works under any mount path."""
    return f"{page}?{urlencode({k: str(v) for k, v in params.items()})}"


@dataclass(frozen=True)
class Paged:
    """Which page of a table is shown: `number` (1-based) of `total` rows, PAGE_ROWS each;
    `param` is the query parameter that chooses it."""

    param: str
    number: int
    total: int

    @property
    def offset(self) -> int:
        return (self.number - 1) * PAGE_ROWS

    @property
    def last(self) -> int:
        """The last page (1 for an empty table: its one page says it is empty)."""
        return max(1, -(-self.total // PAGE_ROWS))


def paged(param: str, number: int, total: int, what: str) -> Paged:
    """The page asked for, or a 404 naming the parameter and the last page there is."""
    asked = Paged(param, number, total)
    if number > asked.last:
        raise HTTPException(404, f"{param} {number}: beyond the last page ({asked.last}) of "
                                 f"{what} ({total:,} rows, {PAGE_ROWS} a page)")
    return asked


@dataclass(frozen=True)
class Pager:
    """`entries 1-500 of 203,000`, the previous and next page of its table, and which
    page of how many (templates/ui_macros.html draws it)."""

    table_id: str
    shown: str
    previous: Link | None
    next: Link | None
    page: str | None


def pager(table_id: str, noun: str, shown: Paged, page: str, **params: Any) -> Pager | None:
    """The pager of a table (`params`: the page's other parameters, the other tables'
    pages among them); None for an empty table."""
    if shown.total == 0:
        return None

    def link(number: int, text: str) -> Link:
        return Link(text, href(page, **params, **{shown.param: number}))

    first, last_row = shown.offset + 1, min(shown.offset + PAGE_ROWS, shown.total)
    return Pager(
        table_id, f"{noun} {first:,}-{last_row:,} of {shown.total:,}",
        link(shown.number - 1, f"previous {PAGE_ROWS}") if shown.number > 1 else None,
        link(shown.number + 1, f"next {min(PAGE_ROWS, shown.total - last_row):,}")
        if shown.number < shown.last else None,
        f"page {shown.number:,} of {shown.last:,}" if shown.last > 1 else None)
