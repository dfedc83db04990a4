"""The benchledger page (publishing/ui_app.py) on a hostile warehouse: a run of 203,000
entries, a sweep of 1,100 runs and an entry resting on 200,000 requests (issue #39, item
13: one 74 MB page of such a run took 15 s inside the API server, its RSS 560 MB -> 1.35
GB). Each page is made in a fresh process, as the API server would make it: the seconds
of the request, the page's bytes, and the process's peak RSS before and after it.

    .venv/bin/python benchmarks/ui_pages.py --dir /tmp/ui-pages

The warehouse is tests/unit/publishing/test_ui_app.py's (build_big_warehouse: DuckDB from range(),
no row-by-row Python), built once into --dir. Prints one JSON line (benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):  # run as a script: make `benchmarks.` and `tests.` importable
    sys.path.insert(0, str(REPO))

MIB = 1024 * 1024
# The pages measured: a name, the path and its parameters (beyond the warehouse).
PAGES = {
    "index": ("/", {}),
    "run": ("/run", {"run": "big-01099"}),
    "run, published page 300": ("/run", {"run": "big-01099", "published_page": "300"}),
    "sweep": ("/sweep", {"sweep": "big"}),
    "entry of 200,000 requests": ("/entry", {"entry": "e000000"}),
}


def peak_rss_mib() -> float:
    status = Path("/proc/self/status").read_text()
    return round(int(re.search(r"VmHWM:\s+(\d+)", status).group(1)) / 1024, 1)


def child(warehouse: Path, name: str) -> None:
    """One page in this fresh process; prints its JSON figures."""
    from fastapi.testclient import TestClient

    from benchledger.publishing import ui_app

    client = TestClient(ui_app.create_app(lambda: [warehouse.resolve()]))
    client.get("/")  # the app's first request (imports on first use) is not the page's
    path, params = PAGES[name]
    before = peak_rss_mib()
    start = time.perf_counter()
    response = client.get(path, params={"warehouse": str(warehouse), **params}
                          if path != "/" else {})
    seconds = time.perf_counter() - start
    print(json.dumps({"status": response.status_code, "seconds": round(seconds, 3),
                      "bytes": len(response.content),
                      "mib": round(len(response.content) / MIB, 3),
                      "peak_rss_mib_before": before, "peak_rss_mib_after": peak_rss_mib()}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/ui-pages"))
    parser.add_argument("--child", nargs=2, metavar=("WAREHOUSE", "PAGE"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(Path(args.child[0]), args.child[1])
        return
    from benchmarks.warehouse_scale import code_version, machine
    from tests.unit.publishing.test_ui_app import build_big_warehouse

    args.dir.mkdir(parents=True, exist_ok=True)
    warehouse = args.dir / "big.duckdb"
    if not warehouse.exists():
        build_big_warehouse(warehouse)
    pages = {}
    for name in PAGES:
        out = subprocess.run([sys.executable, __file__, "--child", str(warehouse), name],
                             capture_output=True, text=True, check=True, cwd=REPO)
        pages[name] = json.loads(out.stdout.strip().splitlines()[-1])
    print(json.dumps({"benchmark": "ui_pages", "date": datetime.now(UTC).isoformat(
        timespec="seconds"), **code_version(), "machine": machine(), "pages": pages}))


if __name__ == "__main__":
    main()
