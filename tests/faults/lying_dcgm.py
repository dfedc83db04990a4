"""A dcgm-exporter `/metrics` page that lies on purpose, for the energy tests (issue #39).

    python -m tests.faults.lying_dcgm --port N        (it needs only the stdlib)
    server, base_url = serve_in_thread()               (in a test's own process)
    render(mode, scrape, elapsed_s)                    (the page text itself)

GET /<mode>/metrics answers the page of that mode: two GPUs (`gpu="0"`, `gpu="1"`) as
NVIDIA's dcgm-exporter prints them (its field names, `# HELP`/`# TYPE` lines, labels; the
energy counter in mJ), at their maximum SM clock and 100% utilisation, so the clock rule
passes them and only their energy is in question. Every path counts its own GETs from 1
(`scrape`); `elapsed_s` is the seconds since the server started. Modes (MODES):

- honest: 250 W and a counter that grows by 250 W, a power limit of 300 W
  (DCGM_FI_DEV_POWER_MGMT_LIMIT): a page that can be true, the control;
- negative-power: -600 W and no energy counter at all;
- backwards: -150 W and a counter that falls by 300 W;
- frozen: 250 W (limit 300 W) and a counter that never moves;
- jump: 250 W (limit 300 W) and a counter that grows by 10^15 mJ per scrape;
- vanish: honest, but only the path's first scrape (the deployment's listing when it is
  ready) lists GPU 1; every later page lists GPU 0 alone.

Written by hand from dcgm-exporter's field names; it shares no code with benchledger
(neither its parser, benchledger/server/dcgm.py, nor the simulator's page), so a bug in either
cannot hide in the page that tests it.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODES = {
    "honest": "250 W, a counter growing by 250 W, limit 300 W (a page that can be true)",
    "negative-power": "-600 W, no energy counter",
    "backwards": "-150 W, a counter falling by 300 W",
    "frozen": "250 W (limit 300 W), a counter that never moves",
    "jump": "250 W (limit 300 W), a counter growing by 10^15 mJ per scrape",
    "vanish": "honest, but GPU 1 is listed on the path's first scrape only",
}
BASE_MJ = 900_000_000  # the counter when the server started: 900 kJ since driver load
JUMP_MJ = 10**15  # what the jumping counter adds per scrape
SM_CLOCK_MHZ = 1980
FIELDS = (  # name, type, help (dcgm-exporter's default-counters.csv wording)
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MAX_SM_CLOCK", "gauge", "Maximum supported SM clock for the device."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "gauge", "Power management limit (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
     "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
)


def readings(mode: str, scrape: int, elapsed_s: float) -> dict[str, float | int | None]:
    """One GPU's values on this page (None: the field is not printed)."""
    power: float = 250.0
    limit: float | None = 300.0
    energy: float | None = BASE_MJ + 250.0 * elapsed_s * 1000
    if mode == "negative-power":
        power, limit, energy = -600.0, None, None
    elif mode == "backwards":
        power, limit, energy = -150.0, None, BASE_MJ - 300.0 * elapsed_s * 1000
    elif mode == "frozen":
        energy = BASE_MJ
    elif mode == "jump":
        energy = BASE_MJ + JUMP_MJ * scrape
    return {"DCGM_FI_DEV_SM_CLOCK": SM_CLOCK_MHZ, "DCGM_FI_DEV_MAX_SM_CLOCK": SM_CLOCK_MHZ,
            "DCGM_FI_DEV_POWER_USAGE": power, "DCGM_FI_DEV_POWER_MGMT_LIMIT": limit,
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": None if energy is None else int(energy),
            "DCGM_FI_DEV_GPU_UTIL": 100}


def render(mode: str, scrape: int, elapsed_s: float, hostname: str = "liar") -> str:
    """The whole page of `mode` at its `scrape`-th GET, `elapsed_s` after the start."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r} (one of {', '.join(MODES)})")
    gpus = [0] if mode == "vanish" and scrape > 1 else [0, 1]
    values = readings(mode, scrape, elapsed_s)
    lines = []
    for name, kind, help_text in FIELDS:
        if values[name] is None:
            continue
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for gpu in gpus:
            labels = (f'gpu="{gpu}",UUID="GPU-00000000-0000-0000-0000-00000000000{gpu}",'
                      f'device="nvidia{gpu}",modelName="Lying GPU",Hostname="{hostname}"')
            lines.append(f"{name}{{{labels}}} {values[name]}")
    return "\n".join(lines) + "\n"


class LyingHandler(BaseHTTPRequestHandler):
    server: LyingServer

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        parts = self.path.split("?", 1)[0].strip("/").split("/")
        if len(parts) != 2 or parts[1] != "metrics" or parts[0] not in MODES:
            self.send_error(404, f"no page at {self.path} (GET /<mode>/metrics)")
            return
        body = render(parts[0], self.server.count(self.path),
                      time.monotonic() - self.server.started).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass  # quiet: a window reads it every few hundred milliseconds


class LyingServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str, port: int):
        super().__init__((host, port), LyingHandler)
        self.started = time.monotonic()
        self.scrapes: dict[str, int] = {}
        self.lock = threading.Lock()

    def count(self, path: str) -> int:
        """This GET's number on its path, from 1."""
        with self.lock:
            self.scrapes[path] = self.scrapes.get(path, 0) + 1
            return self.scrapes[path]


def serve_in_thread(host: str = "127.0.0.1") -> tuple[LyingServer, str]:
    """The server on a free port, in a daemon thread of this process: (server, base_url).
    The caller ends it: server.shutdown(); server.server_close()."""
    server = LyingServer(host, 0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                     daemon=True).start()
    return server, f"http://{host}:{server.server_address[1]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.lying_dcgm",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    server = LyingServer(args.host, args.port)
    print(f"serving on {args.host}:{server.server_address[1]}: GET /<mode>/metrics, modes "
          f"{', '.join(MODES)}", file=sys.stderr, flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
