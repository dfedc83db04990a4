"""GPU telemetry from every node of a deployment, sampled during each measured window
(docs/protocol.md: T10 over the deployment, the energy entries).

A model served across nodes is as fast as its slowest GPU, wherever that GPU sits, so the
clock check and the energy entries read every node the arm's deployment spans
(benchledger.sweep.topology), not just the one that measures. The sweep's `clock_source` says
how each node is read:

- `dcgm`: NVIDIA's dcgm-exporter page at the node's `clock_url` (default
  http://{address}:9400/metrics), parsed by benchledger.server.dcgm: SM clock and its maximum,
  power, the energy counter, utilisation, memory used, the clock-event reasons and the
  power limit where the exporter's counters add it;
- `http`: nvidia-smi's fields as JSON at the node's `clock_url` ({"gpus": [...]}: the
  simulator's /clocks), with `power_w`, `energy_j` and `power_limit_w` where an endpoint
  adds them;
- `nvidia-smi`: run on the measuring node (a deployment on one node; a sweep whose arm
  spans nodes cannot name it and still require the check: benchledger.sweep.spec refuses it).

`TelemetrySampler` reads every node when the measured window starts (phase `before`),
from then on every `interval_s` while it runs (`during`: the first at once, as the first
requests go out) and when it ends (`after`), each node from its own thread, so a slow
exporter delays nobody else's readings. The energy over a window is the `after` counter
minus the `before` counter of each GPU (warehouse view window_energy).
Samples are rows (node, GPU, when, each field; a field a source lacks is None, never 0),
which the window writer stores as Parquet and the loader puts into `gpu_telemetry`; the
`before` and `after` dcgm pages are kept as text in the window's observations, what the
energy entries rest on. Nothing here raises into the measurement: a node that cannot be
read is recorded (its errors, no samples) and judged by the clock rule. Nor does anything
here judge a reading: a page that lies (negative power, a counter that goes backwards,
freezes or jumps, a GPU it stops listing) is stored as it was read, and the warehouse
finds the window's energy unreadable (view window_energy, rule of effect
block_energy_entries).
"""

from __future__ import annotations

import csv
import io
import socket
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from benchledger.server.dcgm import clock_event_names, parse_dcgm_page
from benchledger.server.observe import METRICS_LIMIT, bounded_get, error_text, same_origin
from benchledger.sweep import topology
from benchledger.sweep.spec import ArmPlan

HTTP_TIMEOUT_S = 5.0  # one node's reading, the whole answer
NVIDIA_SMI_TIMEOUT_S = 10.0
MAX_RECORDED_ERRORS = 20  # per node and window: a broken exporter must not grow the file
PAGE_LIMIT = 4_000_000  # characters of one kept before/after page
NVIDIA_SMI_QUERY = ("index,clocks.sm,clocks.max.sm,pstate,clocks_throttle_reasons.active,"
                    "utilization.gpu,power.draw,memory.used")
PHASES = ("before", "during", "after")

# One row per GPU and reading: the columns of <window>.telemetry.parquet (the window writer
# adds restart_id and window_id) and of the warehouse's gpu_telemetry.
SAMPLE_SCHEMA = pa.schema([
    ("node", pa.string()), ("source", pa.string()), ("phase", pa.string()),
    ("sampled_at", pa.timestamp("us", tz="UTC")), ("gpu", pa.int32()),
    ("uuid", pa.string()), ("model", pa.string()), ("hostname", pa.string()),
    ("sm_clock_mhz", pa.float64()), ("max_sm_clock_mhz", pa.float64()),
    ("mem_clock_mhz", pa.float64()), ("power_w", pa.float64()), ("energy_j", pa.float64()),
    ("utilization_gpu", pa.float64()), ("memory_used_mib", pa.float64()),
    ("clock_event_reasons", pa.int64()), ("clock_event_names", pa.string()),
    ("pstate", pa.string()),
    # the GPU's power limit, where its source reports one (the energy checks' ceiling)
    ("power_limit_w", pa.float64()),
])
READING_COLUMNS = tuple(SAMPLE_SCHEMA.names[4:])  # what one GPU's reading holds


@dataclass(frozen=True)
class NodeSource:
    """How one node of the deployment is read: its name, its source and, for http and
    dcgm, its URL (None there: the node serves nothing to read, recorded as an error);
    `headers` only where the URL is the head's own server (the API key goes nowhere else)."""

    node: str
    source: str  # nvidia-smi | http | dcgm
    url: str | None = None
    headers: dict[str, str] | None = None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else None


def _reading(**values: Any) -> dict[str, Any]:
    """One GPU's reading with every READING_COLUMNS key (None where not given)."""
    reading = dict.fromkeys(READING_COLUMNS)
    reading.update(values)
    mask = reading["clock_event_reasons"]
    reading["clock_event_names"] = clock_event_names(mask)
    return reading


def _hex_mask(text: str) -> int | None:
    try:
        return int(text, 16)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def _csv_number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def parse_nvidia_smi(text: str) -> list[dict[str, Any]]:
    """Readings of `nvidia-smi --query-gpu=<NVIDIA_SMI_QUERY> --format=csv,noheader,nounits`
    (an answer without the power and memory columns, from an older query, is read too)."""
    readings = []
    for row in csv.reader(io.StringIO(text)):
        if len(row) < 6:
            continue
        cells = [c.strip() for c in row]
        index, sm, max_sm, pstate, reasons, util = cells[:6]
        power, memory = (cells[6:8] + [""] * 2)[:2]
        readings.append(_reading(
            gpu=int(index), sm_clock_mhz=_csv_number(sm), max_sm_clock_mhz=_csv_number(max_sm),
            pstate=pstate, clock_event_reasons=_hex_mask(reasons),
            utilization_gpu=_csv_number(util), power_w=_csv_number(power),
            memory_used_mib=_csv_number(memory)))
    return readings


def _http_reading(gpu: Any, url: str) -> dict[str, Any]:
    """One GPU of an HTTP clock answer, checked: the loader must not meet odd values."""
    if not isinstance(gpu, dict):
        raise ValueError(f"{url}: a GPU reading is not an object: {str(gpu)[:100]!r}")
    for key in ("index", "sm_clock_mhz", "max_sm_clock_mhz"):
        if _number(gpu.get(key)) is None:
            raise ValueError(f"{url}: GPU reading {key} is not a number: "
                             f"{str(gpu.get(key))[:100]!r}")
    reasons = gpu.get("throttle_reasons")
    return _reading(gpu=int(gpu["index"]), sm_clock_mhz=_number(gpu["sm_clock_mhz"]),
                    max_sm_clock_mhz=_number(gpu["max_sm_clock_mhz"]),
                    pstate=str(gpu.get("pstate", ""))[:16],
                    clock_event_reasons=_hex_mask(reasons) if isinstance(reasons, str)
                    else None,
                    utilization_gpu=_number(gpu.get("utilization_gpu")),
                    power_w=_number(gpu.get("power_w")), energy_j=_number(gpu.get("energy_j")),
                    memory_used_mib=_number(gpu.get("memory_used_mib")),
                    power_limit_w=_number(gpu.get("power_limit_w")))


def read_node(source: NodeSource) -> tuple[list[dict[str, Any]], str | None]:
    """One reading of every GPU of a node: (readings, the page as text for dcgm). Raises
    on any failure; every wait is bounded."""
    if source.source == "nvidia-smi":
        out = subprocess.run(["nvidia-smi", f"--query-gpu={NVIDIA_SMI_QUERY}",
                              "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=True)
        here = socket.gethostname()
        return [{**r, "hostname": here} for r in parse_nvidia_smi(out.stdout)], None
    if source.source not in ("http", "dcgm"):
        raise ValueError(f"unknown telemetry source {source.source!r}")
    if not source.url:
        raise ValueError(f"node {source.node}: no telemetry URL (its process serves none)")
    answer = bounded_get(source.url, HTTP_TIMEOUT_S, source.headers, METRICS_LIMIT)
    if answer.status_code != 200:
        raise ValueError(f"{source.url}: HTTP {answer.status_code}")
    if answer.truncated:
        raise ValueError(f"{source.url}: answer larger than {METRICS_LIMIT} bytes")
    if source.source == "dcgm":
        readings = [_reading(**{k: gpu.get(k) for k in READING_COLUMNS
                                if k != "clock_event_names"})
                    for gpu in parse_dcgm_page(answer.text, source.url)]
        return readings, answer.text
    body = answer.json()
    gpus = body.get("gpus") if isinstance(body, dict) else None
    if not isinstance(gpus, list):
        raise ValueError(f"{source.url}: no list under 'gpus'")
    return [_http_reading(gpu, source.url) for gpu in gpus], None


def _now() -> datetime:
    return datetime.now(UTC)


class _NodeLog:
    """What was read from one node during one window: its rows, errors and kept pages."""

    def __init__(self, source: NodeSource):
        self.source = source
        self.rows: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.pages: dict[str, str] = {}
        self.lock = threading.Lock()

    def read(self, phase: str) -> None:
        try:
            readings, page = read_node(self.source)
        except Exception as exc:  # recorded: an unreadable node is unchecked, not a crash
            with self.lock:
                if len(self.errors) < MAX_RECORDED_ERRORS:
                    self.errors.append(f"{phase}: {error_text(exc)}"[:1000])
            return
        stamp = _now()
        rows = [{"node": self.source.node, "source": self.source.source, "phase": phase,
                 "sampled_at": stamp, **r} for r in readings]
        with self.lock:
            self.rows += rows
            if page is not None and phase != "during":
                self.pages[phase] = page[:PAGE_LIMIT]

    def summary(self) -> dict[str, Any]:
        return {"node": self.source.node, "source": self.source.source,
                "url": self.source.url, "samples": len(self.rows), "errors": self.errors,
                **{f"{phase}_page": text for phase, text in self.pages.items()}}


class TelemetrySampler:
    """Reads every node's GPUs before, during (every interval_s) and after a window.

    An observer of the window (benchledger.server.observe.observe_all): start() and stop() never
    raise; `result` is what goes into the window's observations, `table()` its samples."""

    def __init__(self, sources: list[NodeSource], interval_s: float = 0.5):
        self.interval_s = interval_s
        self.nodes = [_NodeLog(source) for source in sources]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.result: dict[str, Any] = {
            "source": sources[0].source if sources else "none", "interval_s": interval_s,
            "nodes": [], "errors": []}

    def _all(self, phase: str) -> None:
        if not self.nodes:
            return
        with ThreadPoolExecutor(max_workers=min(len(self.nodes), 32)) as pool:
            list(pool.map(lambda node: node.read(phase), self.nodes))

    def _loop(self, node: _NodeLog) -> None:
        # The first reading at once: the window's first requests are on their way as it
        # is taken, so even a window shorter than one interval is read under load.
        while True:
            node.read("during")
            if self._stop.wait(self.interval_s):
                return

    def start(self) -> None:
        self._all("before")
        for node in self.nodes:
            thread = threading.Thread(target=self._loop, args=(node,), daemon=True,
                                      name=f"telemetry-{node.source.node}")
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            # one reading is bounded (HTTP_TIMEOUT_S, NVIDIA_SMI_TIMEOUT_S): so is this join
            thread.join(timeout=max(HTTP_TIMEOUT_S, NVIDIA_SMI_TIMEOUT_S) + 5)
            if thread.is_alive():
                self.result["errors"].append(f"{thread.name}: did not stop in time")
        self._all("after")
        self.result["nodes"] = [node.summary() for node in self.nodes]
        self.result["errors"] += [f"{node.source.node}: {error}" for node in self.nodes
                                  for error in node.errors]

    def table(self) -> pa.Table:
        """Every sample of every node, in SAMPLE_SCHEMA (empty when none was read)."""
        rows = [row for node in self.nodes for row in node.rows]
        return pa.Table.from_pylist(rows, schema=SAMPLE_SCHEMA)


def gpus_of(sources: list[NodeSource]) -> list[dict[str, Any]]:
    """One reading of each node, for the restart's record of the deployment: per node its
    GPUs (index, UUID, model) or the error that kept them unknown."""
    def listed(source: NodeSource) -> dict[str, Any]:
        try:
            readings, _ = read_node(source)
        except Exception as exc:
            return {"node": source.node, "gpus": None, "telemetry_error": error_text(exc)}
        return {"node": source.node,
                "gpus": [{"gpu": r["gpu"], "uuid": r["uuid"], "model": r["model"]}
                         for r in readings]}

    if not sources:
        return []
    with ThreadPoolExecutor(max_workers=min(len(sources), 32)) as pool:
        return list(pool.map(listed, sources))


def deployment_sources(plan: ArmPlan, base_urls: dict[str, str | None],
                       headers: dict[str, str] | None = None) -> list[NodeSource]:
    """How each node of the arm's deployment is read, by its clock_source: nvidia-smi on
    the measuring node (the head's), or each node's clock_url (`base_urls`: each node's
    own process's base URL, by node; the API key's headers go only to the head's own
    server, as every request of benchledger's does)."""
    if plan.clock_source == "none":
        return []
    if plan.clock_source == "nvidia-smi":
        return [NodeSource(plan.arm.node, "nvidia-smi")]
    head_url = base_urls.get(plan.arm.node) or ""
    sources = []
    for member in topology.deployment(plan.arm):
        url = topology.telemetry_url(plan, member, base_urls.get(member.node))
        sources.append(NodeSource(member.node, plan.clock_source, url,
                                  headers if headers and same_origin(url, head_url) else None))
    return sources
