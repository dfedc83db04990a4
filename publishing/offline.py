"""A publication opens offline: none of its pages loads or links anything from elsewhere
(issue #39, item 10). Every HTML, SVG and CSS file of a publication is read with the
standard library's HTML parser (tags and attributes as a browser tokenises them, so a
name shown as escaped text is never taken for a tag), and each URL it names in an
attribute (src, href, srcset, ...), a `style` or a `<style>` (url(), @import) or a meta
refresh must stay inside the folder: relative, a fragment, or inline data."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import PurePosixPath
from urllib.parse import urlsplit

# The attributes that name a URL a browser loads or follows (HTML and SVG).
URL_ATTRIBUTES = frozenset({
    "src", "href", "srcset", "poster", "data", "action", "formaction", "background",
    "cite", "longdesc", "manifest", "ping", "xlink:href", "codebase", "archive", "icon",
    "usemap", "profile"})
# Schemes that reach outside the folder (a `file:` URL names this machine's files, which
# the folder's reader does not have).
OUTSIDE_SCHEMES = frozenset({"http", "https", "ftp", "ws", "wss", "file"})
# The files a browser renders and so may load from elsewhere; the data files (JSON, CSV,
# Markdown source) hold text as written, never read as markup by the publication.
CHECKED_SUFFIXES = frozenset({".html", ".htm", ".svg", ".css", ".xhtml"})

_CSS_URL = re.compile(r"""url\(\s*['"]?([^'")\s]+)|@import\s+['"]([^'"]+)""", re.I)
_REFRESH_URL = re.compile(r"url\s*=\s*['\"]?([^'\"\s;]+)", re.I)


def is_outside(url: str) -> bool:
    """Whether `url` reaches outside the folder: a scheme of OUTSIDE_SCHEMES, or a
    scheme-relative `//host/...`."""
    url = url.strip()
    if url.startswith(("//", "\\\\")):
        return True
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError:  # not a URL at all (an unbalanced IPv6 bracket): refuse it
        return True
    return scheme in OUTSIDE_SCHEMES


def _css_urls(text: str) -> list[str]:
    return [a or b for a, b in _CSS_URL.findall(text)]


class _UrlCollector(HTMLParser):
    """Every URL the markup names where a browser would load or follow it."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.urls: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._attributes(tag, attrs)
        self._in_style = tag == "style"

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._attributes(tag, attrs)

    def _attributes(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name.lower(): value or "" for name, value in attrs}
        for name, value in values.items():
            if name == "srcset" or name == "imagesrcset":
                self.urls += [part.split()[0] for part in value.split(",") if part.split()]
            elif name in URL_ATTRIBUTES:
                self.urls.append(value)
            elif name == "style":
                self.urls += _css_urls(value)
        if tag == "meta" and values.get("http-equiv", "").lower() == "refresh":
            self.urls += _REFRESH_URL.findall(values.get("content", ""))

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.urls += _css_urls(data)


def outside_references(name: str, data: bytes) -> list[str]:
    """The URLs of one file of a publication that reach outside it (empty: none, or a file
    no browser renders as a page)."""
    suffix = PurePosixPath(name).suffix.lower()
    if suffix not in CHECKED_SUFFIXES:
        return []
    text = data.decode("utf-8", errors="replace")
    if suffix == ".css":
        urls = _css_urls(text)
    else:
        collector = _UrlCollector()
        collector.feed(text)
        collector.close()
        urls = collector.urls
    return sorted({url for url in urls if is_outside(url)})


def outside_references_of(files: dict[str, bytes]) -> dict[str, list[str]]:
    """Per file of a publication (by relative path), the URLs that reach outside it."""
    found = {name: outside_references(name, data) for name, data in sorted(files.items())}
    return {name: urls for name, urls in found.items() if urls}
