"""The benchledger page of the Airflow UI as a reader sees it (issue #43, item 4): the
demo's run page and one of its entry pages (the lineage and explain text), rendered by
the app (publishing/ui_app.py) and opened in headless Chromium at a 1,400 px window.
Nothing makes the page wider than the window: a wide table scrolls inside its own box,
and the explain text wraps. Screenshots are kept under build/test-artifacts/ui/.

The pages are the app's answers written to files: they load nothing from elsewhere and run
no script (the app's own contract), so a file shows what the iframe shows. The demo run is
the session's one (tests/conftest.py bundled_demo)."""

from __future__ import annotations

import duckdb
import pytest
from fastapi.testclient import TestClient

from benchledger.publishing import ui_app
from tests.browser import ARTIFACTS, chromium_binary, opened

pytestmark = pytest.mark.integration

WIDTH, HEIGHT = 1400, 900

# Every drawn element's right edge, except inside a box that scrolls on its own (the
# page's tables sit in `.scroll`), and the page's own width and scroll width.
OUTSIDE_SCROLLERS = """() => {
  const width = document.documentElement.clientWidth;
  const scrolls = e => { for (let p = e.parentElement; p && p !== document.body;
                              p = p.parentElement) {
      const x = getComputedStyle(p).overflowX;
      if (x === 'auto' || x === 'scroll') return true; }
    return false; };
  const wider = [];
  for (const e of document.querySelectorAll('body *')) {
    const box = e.getBoundingClientRect();
    if (box.width > 0 && box.right > width + 0.5 && !scrolls(e)) {
      wider.push(`${e.tagName.toLowerCase()}#${e.id}.${e.getAttribute('class') || ''} ` +
                 `right ${box.right}`);
    }
  }
  return {width, scrollWidth: document.documentElement.scrollWidth, wider};
}"""


@pytest.fixture(scope="module")
def pages(bundled_demo, tmp_path_factory):
    """The demo's run page and the entry page of its longest explain text, as files."""
    chromium_binary()  # skip (or fail under CI) before anything else
    assert bundled_demo["returncode"] == 0, bundled_demo["output"]
    warehouse = bundled_demo["warehouse"].resolve()
    with duckdb.connect(str(warehouse), read_only=True) as con:
        run_id, = con.execute("SELECT run_id FROM runs ORDER BY started_at DESC "
                              "LIMIT 1").fetchone()
        # a blocked entry: its page lists the rules, and its explain text the most
        entry_id, = con.execute("SELECT entry_id FROM current_entries WHERE run_id = ? "
                                "ORDER BY publishable, entry_id LIMIT 1", [run_id]).fetchone()
    client = TestClient(ui_app.create_app(lambda: [warehouse]))
    folder = tmp_path_factory.mktemp("ui-pages")
    found = {}
    for name, path, params in (("run", "/run", {"run": run_id}),
                               ("entry", "/entry", {"entry": entry_id})):
        answer = client.get(path, params={"warehouse": str(warehouse), **params})
        assert answer.status_code == 200, answer.text[:500]
        found[name] = folder / f"{name}.html"
        found[name].write_text(answer.text)
    return found


@pytest.mark.parametrize("name", ["run", "entry"])
def test_nothing_is_wider_than_the_page_and_a_screenshot_is_kept(pages, name):
    shots = ARTIFACTS / "ui"
    shots.mkdir(parents=True, exist_ok=True)
    with opened(pages[name], WIDTH, HEIGHT) as seen:
        seen.page.screenshot(path=str(shots / f"demo-{name}-page-1400.png"), full_page=True)
        found = seen.page.evaluate(OUTSIDE_SCROLLERS)
        assert seen.errors == [] and all(url.startswith("file:") for url in seen.requests)
    assert 0 < found["width"] <= WIDTH
    assert found["scrollWidth"] <= found["width"] and found["wider"] == [], found


def test_the_explain_text_wraps_inside_the_page(pages):
    with opened(pages["entry"], WIDTH, HEIGHT) as seen:
        box = seen.page.evaluate("""() => { const e = document.getElementById('explain');
            return {width: e.getBoundingClientRect().width, scroll: e.scrollWidth,
                    client: e.clientWidth}; }""")
    assert box["width"] <= WIDTH
    assert box["scroll"] <= box["client"] + 1, box  # wrapped, not a line to scroll after
