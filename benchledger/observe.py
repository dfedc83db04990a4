"""What the server and the node say while a window is measured (docs/protocol.md: T2, T3, T10).

Three observers bracket the measured window (warm-up stays outside):

- MetricsScrape: the server's Prometheus text right before and right after the window,
  kept raw; the warehouse parses it and reconciles the counters' deltas with what the
  client received.
- LogSlice: the server log lines written during the window (by byte offset, so no clock
  guessing), kept raw; the warehouse parses vLLM's periodic throughput lines.
- ClockSampler: the node's GPU SM clocks sampled during the window, from `nvidia-smi`
  or an HTTP endpoint; a node whose clock could not be read is recorded as such.

Observers never raise into the measurement: what failed is recorded in their result.
"""

from __future__ import annotations

import csv
import io
import subprocess
import threading
from datetime import UTC, datetime
from pathlib import Path

import httpx

LOG_SLICE_LIMIT = 4_000_000  # bytes of server log kept per window
NVIDIA_SMI_QUERY = ("index,clocks.sm,clocks.max.sm,pstate,clocks_throttle_reasons.active,"
                    "utilization.gpu")


def _now() -> str:
    return datetime.now(UTC).isoformat()


class MetricsScrape:
    """Prometheus text before and after the window."""

    def __init__(self, url: str | None):
        self.url = url
        self.result: dict = {"url": url, "before": None, "after": None, "errors": []}

    def _fetch(self, phase: str) -> None:
        if not self.url:
            return
        try:
            response = httpx.get(self.url, timeout=10.0)
            response.raise_for_status()
            self.result[phase] = {"scraped_at": _now(), "text": response.text}
        except httpx.HTTPError as exc:
            self.result["errors"].append(f"{phase}: {type(exc).__name__}: {exc}")

    def start(self) -> None:
        self._fetch("before")

    def stop(self) -> None:
        self._fetch("after")


class LogSlice:
    """The lines the server logged during the window."""

    def __init__(self, path: str | None):
        self.path = Path(path) if path else None
        self.start_offset = 0
        self.result: dict = {"path": path, "lines": [], "errors": []}

    def start(self) -> None:
        if self.path and self.path.exists():
            self.start_offset = self.path.stat().st_size

    def stop(self) -> None:
        if not self.path:
            return
        try:
            with open(self.path, "rb") as log:
                log.seek(self.start_offset)
                data = log.read(LOG_SLICE_LIMIT)
        except OSError as exc:
            self.result["errors"].append(f"cannot read {self.path}: {exc.strerror}")
            return
        text = data.decode("utf-8", errors="replace")
        self.result.update(from_offset=self.start_offset,
                           lines=text.splitlines(), truncated=len(data) == LOG_SLICE_LIMIT)


def parse_nvidia_smi(text: str) -> list[dict]:
    """Rows of `nvidia-smi --query-gpu=<NVIDIA_SMI_QUERY> --format=csv,noheader,nounits`."""
    gpus = []
    for row in csv.reader(io.StringIO(text)):
        if len(row) < 6:
            continue
        index, sm, max_sm, pstate, throttle, util = (c.strip() for c in row[:6])
        gpus.append({"index": int(index), "sm_clock_mhz": float(sm),
                     "max_sm_clock_mhz": float(max_sm), "pstate": pstate,
                     "throttle_reasons": throttle,
                     "utilization_gpu": float(util) if util not in ("", "[N/A]") else None})
    return gpus


def read_clocks(source: str, url: str | None) -> list[dict]:
    """One reading of every GPU of this node; raises on any failure."""
    if source == "nvidia-smi":
        out = subprocess.run(["nvidia-smi", f"--query-gpu={NVIDIA_SMI_QUERY}",
                              "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, check=True)
        return parse_nvidia_smi(out.stdout)
    if source == "http":
        response = httpx.get(url or "", timeout=5.0)
        response.raise_for_status()
        return list(response.json()["gpus"])
    raise ValueError(f"unknown clock source {source!r}")


class ClockSampler:
    """Samples the node's GPU clocks every `interval_s` while the window runs."""

    def __init__(self, source: str, url: str | None, node: str, interval_s: float = 0.5):
        self.source, self.url, self.node, self.interval_s = source, url, node, interval_s
        self.result: dict = {"source": source, "url": url, "node": node, "samples": [],
                             "errors": []}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample_once(self) -> None:
        try:
            gpus = read_clocks(self.source, self.url)
        except Exception as exc:  # recorded: an unreadable clock is "unchecked", not a crash
            if len(self.result["errors"]) < 20:
                self.result["errors"].append(f"{type(exc).__name__}: {exc}")
            return
        sampled_at = _now()
        for gpu in gpus:
            self.result["samples"].append({"sampled_at": sampled_at, **gpu})

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample_once()
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        if self.source == "none":
            return
        self._thread = threading.Thread(target=self._run, name="clock-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=15)
        self._sample_once()  # the window's last moment, while it may still be loaded


def observe_all(observers: list) -> tuple:
    """Start/stop callables that run every observer (for measure_window's hooks)."""

    def start() -> None:
        for observer in observers:
            observer.start()

    def stop() -> None:
        for observer in observers:
            observer.stop()

    return start, stop
