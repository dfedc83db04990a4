"""Parsers for what servers say: vLLM /metrics text and vLLM log lines (fixtures written
from vLLM's documented formats, v1 and the older v0 logger), nvidia-smi's CSV."""

from __future__ import annotations

import json
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest

from benchledger.server.telemetry import NodeSource, TelemetrySampler, parse_nvidia_smi
from benchledger.warehouse.observations import clock_rows, log_rows, metric_samples
from tests.reference import reconcile_requests

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def test_vllm_metrics_text_is_parsed_sample_by_sample():
    samples = metric_samples((FIXTURES / "vllm_metrics.txt").read_text())
    by_name = {}
    for name, labels, value in samples:
        by_name.setdefault(name, []).append((json.loads(labels), value))
    assert by_name["vllm:generation_tokens_total"] == [
        ({"engine": "0", "model_name": "Qwen/Qwen3-8B"}, 7680.0)]
    reasons = {labels["finished_reason"]: v for labels, v in by_name["vllm:request_success_total"]}
    assert reasons == {"stop": 3.0, "length": 57.0, "abort": 2.0}
    assert by_name["vllm:spec_decode_num_accepted_tokens_total"][0][1] == 4920.0
    # histograms keep their buckets apart, each its own sample
    buckets = by_name["vllm:time_to_first_token_seconds_bucket"]
    assert [labels["le"] for labels, _ in buckets] == ["0.02", "0.1", "+Inf"]


def test_vllm_log_lines_keep_each_counter_under_its_own_name():
    lines = (FIXTURES / "vllm_server.log").read_text().splitlines()
    rows = log_rows(lines)
    assert [r["kind"] for r in rows] == ["throughput", "spec_decode", "throughput",
                                         "throughput"]
    v1, spec, peak, v0 = rows
    assert (v1["prompt_tok_s"], v1["generation_tok_s"], v1["running_reqs"]) == (1520.4, 27.1, 1)
    assert spec["accepted_tok_s"] == 29.4 and spec["mean_acceptance_length"] == 2.61
    assert "generation_tok_s" not in spec  # accepted throughput is not generation throughput
    assert peak["generation_tok_s"] == 40.7 and v0["generation_tok_s"] == 25.2
    # each row keeps its line as it was; the start-up and access lines give no row
    assert [(r["line_no"], r["text"]) for r in rows] == [(i, lines[i]) for i in (1, 2, 4, 5)]


def test_nvidia_smi_csv():
    text = ("0, 494, 2520, P0, 0x0000000000000000, 97, 212.40, 70123\n"
            "1, 2385, 2520, P0, 0x0000000000000004, 98, [N/A], [N/A]\n")
    gpus = parse_nvidia_smi(text)
    assert [(g["gpu"], g["sm_clock_mhz"], g["max_sm_clock_mhz"], g["power_w"],
             g["memory_used_mib"]) for g in gpus] == [
        (0, 494.0, 2520.0, 212.4, 70123.0), (1, 2385.0, 2520.0, None, None)]
    # the throttle mask is DCGM's clock-event bitmask (NVML's bits), named the same way
    assert [(g["clock_event_reasons"], g["clock_event_names"]) for g in gpus] == [
        (0, ""), (4, "power_cap")]
    assert all(g["energy_j"] is None for g in gpus)  # never a 0 where nothing was read
    # an answer to the older query (six columns) is read too
    assert parse_nvidia_smi("0, 2400, 2520, P0, 0x0, 99\n")[0]["power_w"] is None


def test_node_clocks_rows_of_windows_measured_before_gpu_telemetry():
    samples = [{"sampled_at": "t", "index": 0, "sm_clock_mhz": 494.0, "utilization_gpu": 97},
               {"sampled_at": "t", "index": 1, "sm_clock_mhz": 2385.0, "utilization_gpu": 98}]
    rows = clock_rows({"node": "n1", "samples": samples})
    assert [(r["node"], r["gpu"], r["sm_clock_mhz"], r["under_load"]) for r in rows] == [
        ("n1", 0, 494.0, True), ("n1", 1, 2385.0, True)]
    idle = clock_rows({"node": "n1", "samples": [{"index": 0, "utilization_gpu": 0}]})
    assert idle[0]["under_load"] is False  # 0% utilization: the GPU was idle then


def _metrics(before: float, after: float, counter="vllm:generation_tokens_total"):
    return pd.DataFrame([
        {"phase": "before", "name": counter, "labels": "{}", "value": before},
        {"phase": "after", "name": counter, "labels": "{}", "value": after}])


def _window(**overrides):
    values = {"window_id": "w", "run_id": "r", "failed": 0, "unresolved": 0,
              "reconcile_tolerance": 0.01, "observation_errors": None}
    values.update(overrides)
    return pd.Series(values)


REQUESTS = pd.DataFrame([{"is_warmup": False, "status": "completed", "output_tokens": 100,
                          "prompt_tokens": 10}] * 10
                        + [{"is_warmup": True, "status": "completed", "output_tokens": 100,
                            "prompt_tokens": 10}])


@pytest.mark.parametrize(("delta", "status"), [(1000, "match"), (1005, "match"),
                                               (1100, "mismatch"), (900, "mismatch")])
def test_generation_counter_reconciles_with_measured_usage_only(delta, status):
    rows = reconcile_requests(_window(), REQUESTS, _metrics(5000, 5000 + delta))
    generation = next(r for r in rows if r["counter"] == "vllm:generation_tokens_total")
    assert generation["client_value"] == 1000  # the warm-up request is outside the window
    assert generation["status"] == status
    assert generation["relative_error"] == pytest.approx(abs(delta - 1000) / 1000)


def test_unfinished_requests_make_the_client_count_a_lower_bound():
    rows = reconcile_requests(_window(unresolved=2), REQUESTS, _metrics(0, 1300))
    generation = next(r for r in rows if r["counter"] == "vllm:generation_tokens_total")
    assert generation["status"] == "lower bound" and generation["relative_error"] == 0


def test_a_server_without_the_counter_is_not_reconciled_but_says_why():
    rows = reconcile_requests(_window(), REQUESTS, _metrics(0, 5, counter="other_total"))
    assert {r["status"] for r in rows} == {"no counter"}
    assert "exposes no such counter" in rows[0]["detail"]
    failed_scrape = reconcile_requests(_window(observation_errors="metrics: before: timeout"),
                                     REQUESTS, _metrics(0, 1000))
    assert "no /metrics scrape" in failed_scrape[0]["detail"]


def test_telemetry_reads_nvidia_smi_before_during_after_and_records_a_missing_one(
        tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho '0, 2400, 2520, P0, 0x0000000000000000, 99, 400.5, 1'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    sampler = TelemetrySampler([NodeSource("node-a", "nvidia-smi")], interval_s=0.05)
    sampler.start()
    import time

    time.sleep(0.2)
    sampler.stop()
    samples = sampler.table().to_pylist()
    phases = [s["phase"] for s in samples]
    # one reading as the window starts, one as it ends, some between (4 in 0.2 s, fewer
    # on a busy machine)
    assert phases[0] == "before" and phases[-1] == "after" and "during" in phases
    assert {(s["node"], s["gpu"], s["sm_clock_mhz"], s["utilization_gpu"], s["power_w"])
            for s in samples} == {("node-a", 0, 2400.0, 99.0, 400.5)}
    assert sampler.result["errors"] == []
    assert sampler.result["nodes"][0]["samples"] == len(samples)

    fake.unlink()  # a node without nvidia-smi: recorded, never raised
    missing = TelemetrySampler([NodeSource("node-a", "nvidia-smi")], interval_s=0.05)
    missing.start()
    missing.stop()
    assert missing.table().num_rows == 0
    assert "FileNotFoundError" in missing.result["errors"][0]
    assert missing.result["errors"][0].startswith("node-a: before: ")


# --- observers under a hostile or broken server: bounded, recorded, never raised ---------

class ObservedHandler(BaseHTTPRequestHandler):
    """GET answers from server.script: "hang", "trickle", or (status, body text)."""

    protocol_version = "HTTP/1.0"

    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802 (http.server's naming)
        self.server.seen.append(self.headers.get("Authorization"))
        script = self.server.script
        if script == "hang":
            time.sleep(30)
            self.server.answered.set()  # (never before the 30 s)
            return
        self.send_response(200 if script == "trickle" else script[0])
        self.end_headers()
        if script == "trickle":
            for _ in range(100):  # 20 s, unless the reader hangs up
                self.wfile.write(b"# ")
                self.wfile.flush()
                time.sleep(0.2)
            self.server.answered.set()
            return
        self.wfile.write(script[1].encode())
        self.server.answered.set()


@pytest.fixture
def observed_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), ObservedHandler)
    server.daemon_threads = True
    server.seen = []
    # set when an answer was sent in full: a hang or trickle only after 30 or 20 s, so a
    # reader that gave up at its own bound returns before it is set, however slow the
    # machine (an ordering, not a stopwatch)
    server.answered = threading.Event()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


PROMETHEUS = "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total 42\n"


def test_metrics_scrape_keeps_prometheus_text_and_sends_the_key(observed_server):
    from benchledger.server.observe import MetricsScrape

    server, base = observed_server
    server.script = (200, PROMETHEUS)
    scrape = MetricsScrape(base + "/metrics", {"Authorization": "Bearer k"})
    scrape.start()
    scrape.stop()
    assert scrape.result["before"]["text"] == scrape.result["after"]["text"] == PROMETHEUS
    assert scrape.result["errors"] == [] and server.seen == ["Bearer k", "Bearer k"]


def test_repeated_gets_read_the_ca_bundle_once(observed_server, monkeypatch):
    """A clock sampled ten times a second makes a client each time: each used to build its
    own TLS context (the CA bundle read again, ~30 ms of CPU beside the timed client)."""
    import ssl

    from benchledger.client.tls import tls_context
    from benchledger.server.observe import bounded_get

    server, base = observed_server
    server.script = (200, PROMETHEUS)
    loads = []
    real = ssl.SSLContext.load_verify_locations
    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations",
                        lambda self, *a, **k: (loads.append(a or k), real(self, *a, **k))[1])
    tls_context.cache_clear()
    answers = [bounded_get(base + "/clocks", 2.0).text for _ in range(5)]
    assert answers == [PROMETHEUS] * 5 and len(server.seen) == 5
    assert len(loads) == 1  # one context, verification on, for every client of the process
    assert tls_context().verify_mode == ssl.CERT_REQUIRED


@pytest.mark.parametrize(("script", "recorded"), [
    ((404, "no metrics here"), "HTTP 404"),
    ((200, "<html>not prometheus</html>\n"), "not Prometheus text"),
    ((200, "vllm:generation_tokens_total not-a-number\n"), "not Prometheus text"),
    ("hang", "AnswerTooSlow"),
    ("trickle", "AnswerTooSlow"),
])
def test_a_metrics_page_that_cannot_be_kept_is_an_error_within_the_bound(observed_server,
                                                                         script, recorded):
    from benchledger.server.observe import MetricsScrape

    server, base = observed_server
    server.script = script
    scrape = MetricsScrape(base + "/metrics", timeout_s=0.5)
    scrape.start()
    if script in ("hang", "trickle"):  # given up at the bound, not after the whole answer
        assert not server.answered.is_set()
    assert scrape.result["before"] is None  # nothing the warehouse would fail to parse
    assert len(scrape.result["errors"]) == 1
    assert scrape.result["errors"][0].startswith(f"before: {base}/metrics: ")
    assert recorded in scrape.result["errors"][0]


def test_a_metrics_url_nobody_listens_on_is_recorded():
    from benchledger.server.lifecycle import free_port
    from benchledger.server.observe import MetricsScrape

    scrape = MetricsScrape(f"http://127.0.0.1:{free_port()}/metrics")
    scrape.start()
    assert "ConnectError" in scrape.result["errors"][0]


@pytest.mark.parametrize(("script", "recorded"), [
    ((200, json.dumps({"gpus": ["x"]})), "not an object"),
    ((200, json.dumps({"gpus": [{"index": 0, "sm_clock_mhz": "fast",
                                 "max_sm_clock_mhz": 2520}]})), "sm_clock_mhz is not a number"),
    ((200, json.dumps([1, 2])), "no list under 'gpus'"),
    ((200, "{not json"), "JSONDecodeError"),
    ((500, "boom"), "HTTP 500"),
    ("hang", "AnswerTooSlow"),
])
def test_a_broken_clock_endpoint_is_recorded_never_sampled(observed_server, monkeypatch,
                                                           script, recorded):
    from benchledger.server import telemetry

    monkeypatch.setattr(telemetry, "HTTP_TIMEOUT_S", 0.5)
    server, base = observed_server
    server.script = script
    sampler = TelemetrySampler([NodeSource("node-a", "http", base + "/clocks")],
                               interval_s=0.1)
    sampler.start()
    time.sleep(0.2)
    sampler.stop()
    if script == "hang":  # stopped with its probe cut at the bound, not after the hang
        assert not server.answered.is_set()
    assert sampler.table().num_rows == 0
    assert sampler.result["errors"] and recorded in sampler.result["errors"][0]


def test_a_hanging_nvidia_smi_is_cut_off_and_recorded(tmp_path, monkeypatch):
    from benchledger.server import telemetry

    fake = tmp_path / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\nexec {shutil.which('sleep')} 60\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(telemetry, "NVIDIA_SMI_TIMEOUT_S", 0.3)
    sampler = TelemetrySampler([NodeSource("node-a", "nvidia-smi")], interval_s=0.05)
    started = time.monotonic()
    sampler.start()
    sampler.stop()
    # cut at its bound (TimeoutExpired), long before the fake's 60 s were up: half of them
    # is a margin no loaded machine eats
    assert time.monotonic() - started < 30
    assert sampler.table().num_rows == 0
    assert any("TimeoutExpired" in e for e in sampler.result["errors"])


def test_an_observer_that_raises_is_recorded_and_the_others_still_run(tmp_path):
    from benchledger.server.observe import LogSlice, observe_all

    class Broken:
        def __init__(self):
            self.result = {"errors": []}

        def start(self):
            raise RuntimeError("observer bug")

        def stop(self):
            raise OSError(5, "Input/output error")

    log = tmp_path / "server.log"
    log.write_text("before\n")
    broken, slice_ = Broken(), LogSlice(str(log))
    start, stop = observe_all([broken, slice_])
    start()
    with open(log, "a") as out:
        out.write("during\n")
    stop()
    assert broken.result["errors"] == ["start: RuntimeError: observer bug",
                                       "stop: OSError: [Errno 5] Input/output error"]
    assert slice_.result["lines"] == ["during"]


def test_a_log_that_cannot_be_read_is_recorded(tmp_path):
    from benchledger.server.observe import LogSlice

    folder = tmp_path / "server.log"
    folder.mkdir()  # reading it fails (IsADirectoryError), as an unreadable log would
    log = LogSlice(str(folder))
    log.start()
    log.stop()
    assert log.result["lines"] == []
    assert log.result["errors"] and "IsADirectoryError" in log.result["errors"][0]


@pytest.mark.parametrize(("page", "energy", "power"), [
    ("sample_l4_kops_cncf-ai-conformance.prom", True, True),
    # a vGPU guest: neither power nor an energy counter, both None (never 0)
    ("sample_grid-a100-40c_vgpu_vks-v1.35_cncf-ai-conformance.prom", False, False),
])
def test_telemetry_reads_a_real_dcgm_exporter_page_keeping_it_whole(observed_server, page,
                                                                    energy, power):
    server, base = observed_server
    text = (FIXTURES / "dcgm" / page).read_text()
    server.script = (200, text)
    sampler = TelemetrySampler([NodeSource("gpu-node-2", "dcgm", base + "/metrics")],
                               interval_s=0.05)
    sampler.start()
    time.sleep(0.15)
    sampler.stop()
    rows = sampler.table().to_pylist()
    assert rows and {r["node"] for r in rows} == {"gpu-node-2"}
    assert {r["phase"] for r in rows} >= {"before", "after"}
    assert all((r["energy_j"] is not None) == energy for r in rows)
    assert all((r["power_w"] is not None) == power for r in rows)
    assert all(r["sm_clock_mhz"] is not None and r["uuid"].startswith("GPU-") for r in rows)
    assert all(r["max_sm_clock_mhz"] is None for r in rows)  # not a default exporter field
    # the pages that bracket the window are kept as the exporter printed them
    (node,) = sampler.result["nodes"]
    assert node["before_page"] == node["after_page"] == text
