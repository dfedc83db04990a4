"""Issue #43, item 2: an external server that cannot be reached is named, with its fix,
within seconds and before Airflow starts: nothing listening, TLS against plain HTTP and
plain HTTP against TLS, an untrusted certificate, a name that does not resolve, a base_url
ending in /v1. Each case is a real socket on loopback: a plain HTTP server, a TLS one
with a certificate made here, a port nothing listens on, one that accepts and never
answers."""

from __future__ import annotations

import datetime
import http.server
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchledger.cli import main
from benchledger.local.run import CliError, _check_external_servers
from benchledger.server.preflight import unreadable_clock, why_not_answering
from benchledger.sweep.spec import SweepError, load_sweep
from tests.sweeps import NO_CLOCK, defaults, external_arm, sweep, write_sweep

# The bound for the connection mistakes, the whole command included.
SAID_WITHIN_S = 15.0


class _Answers404(http.server.BaseHTTPRequestHandler):
    """Any HTTP answer will do: a 404 says a server is there."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def _serve(context: ssl.SSLContext | None = None) -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers404)
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def plain_port() -> Iterator[int]:
    yield from _serve()


@pytest.fixture(scope="module")
def tls_port(tmp_path_factory) -> Iterator[int]:
    """A TLS server with a self-signed certificate for 127.0.0.1, made here."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    folder = tmp_path_factory.mktemp("tls")
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    yield from _serve(context)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_server_that_answers_passes_whatever_its_status(plain_port):
    assert why_not_answering(f"http://127.0.0.1:{plain_port}", "/health") is None


def test_nothing_listening_is_named_connection_refused():
    port = _closed_port()
    why = why_not_answering(f"http://127.0.0.1:{port}", "/health")
    assert why == (f"nothing listens at 127.0.0.1:{port} (connection refused): start the "
                   "server, or correct the port in base_url")


def test_https_against_plain_http_says_use_http(plain_port):
    why = why_not_answering(f"https://127.0.0.1:{plain_port}", "/health")
    assert why is not None and why.startswith(
        f"base_url is https:// but 127.0.0.1:{plain_port} does not speak TLS"), why
    assert why.endswith(f"use http://127.0.0.1:{plain_port}"), why


def test_http_against_tls_says_use_https(tls_port):
    why = why_not_answering(f"http://127.0.0.1:{tls_port}", "/health")
    assert why == (f"base_url is http:// but 127.0.0.1:{tls_port} speaks TLS: use "
                   f"https://127.0.0.1:{tls_port}")


def test_an_untrusted_certificate_is_named_with_where_to_trust_it(tls_port):
    why = why_not_answering(f"https://127.0.0.1:{tls_port}", "/health")
    assert why is not None and "does not trust" in why and "SSL_CERT_FILE" in why, why


def test_a_name_that_does_not_resolve_is_named():
    # .invalid never resolves (RFC 6761); resolvers answer it locally
    why = why_not_answering("http://no-such-host.invalid:8000", "/health")
    assert why is not None and "'no-such-host.invalid' of base_url does not resolve" in why


def test_a_server_that_accepts_and_never_answers_is_bounded():
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        started = time.monotonic()
        why = why_not_answering(f"http://127.0.0.1:{port}", "/health", timeout_s=0.5)
    assert why is not None and why.startswith(
        f"no HTTP answer from http://127.0.0.1:{port}/health within 0.5 s"), why
    assert time.monotonic() - started < 5  # the bound, not the readiness wait


def _sweep_file(tmp_path: Path, base_url: str, restarts: int = 2) -> Path:
    return write_sweep(tmp_path / "own.toml", sweep(
        "own-server", [external_arm("mine", base_url, **NO_CLOCK)],
        defaults=defaults(restarts=restarts)))


def test_run_refuses_an_unreachable_server_before_airflow_starts(tmp_path, capsys):
    port = _closed_port()
    started = time.monotonic()
    code = main(["run", str(_sweep_file(tmp_path, f"http://127.0.0.1:{port}")),
                 "--warehouse", str(tmp_path / "wh.duckdb")])
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 2 and elapsed < SAID_WITHIN_S, (code, elapsed)
    assert err.startswith("benchledger run: the sweep cannot be measured as it says on "
                          "this machine (a server not ready, a clock that cannot be read); "
                          "nothing was run:"), err
    assert (f"arm 'mine' (base_url http://127.0.0.1:{port}): nothing listens at "
            f"127.0.0.1:{port} (connection refused)") in err, err
    assert not (tmp_path / "wh.duckdb").exists()
    assert not (tmp_path / "wh-data").exists()  # no lock, no Airflow home, no raw folder


def test_a_clock_this_machine_cannot_read_is_refused_naming_the_two_keys(tmp_path, capsys,
                                                                        plain_port,
                                                                        monkeypatch):
    """Issue #43, item 2: a first sweep against a CPU server that says nothing of clocks
    reads them with nvidia-smi (the default), which this machine lacks (PATH holds no
    nvidia-smi here, whatever the machine has): refused in seconds, naming the keys,
    instead of a run that measures for minutes and publishes nothing."""
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi on it
    path = write_sweep(tmp_path / "cpu.toml", sweep(
        "cpu-server", [external_arm("mine", f"http://127.0.0.1:{plain_port}")],
        defaults=defaults(restarts=1, clock=None)))
    started = time.monotonic()
    code = main(["run", str(path), "--warehouse", str(tmp_path / "wh.duckdb")])
    err = capsys.readouterr().err
    assert code == 2 and time.monotonic() - started < SAID_WITHIN_S, (code, err)
    assert ("arm 'mine': clock_source is \"nvidia-smi\" (the default) and this machine has "
            "no nvidia-smi") in err, err
    assert 'clock_source = "none" and require_clock_check = false' in err
    assert not (tmp_path / "wh-data").exists()


def test_a_clock_check_is_refused_only_where_it_cannot_run():
    def nowhere(name: str) -> None:
        return None

    assert unreadable_clock("nvidia-smi", True, which=nowhere) is not None
    assert unreadable_clock("nvidia-smi", True, which=lambda name: f"/usr/bin/{name}") is None
    assert unreadable_clock("nvidia-smi", False, which=nowhere) is None  # waived
    for read_over_http in ("dcgm", "http", "none"):
        assert unreadable_clock(read_over_http, True, which=nowhere) is None


def test_a_base_url_ending_in_v1_is_refused_when_the_file_is_read(tmp_path):
    with pytest.raises(SweepError) as refused:
        load_sweep(_sweep_file(tmp_path, "http://127.0.0.1:8000/v1/"))
    assert ("arms[0].base_url: 'http://127.0.0.1:8000/v1/' ends in /v1, which benchledger "
            "adds itself (/v1/chat/completions): give the server's root, "
            "'http://127.0.0.1:8000'") in str(refused.value)




def test_every_unreachable_arm_is_listed_at_once(tmp_path, plain_port):
    ports = [_closed_port(), plain_port]
    doc = sweep("two", [external_arm("down", f"http://127.0.0.1:{ports[0]}", **NO_CLOCK),
                        external_arm("tls", f"https://127.0.0.1:{ports[1]}", **NO_CLOCK)],
                defaults=defaults(restarts=1))
    with pytest.raises(CliError) as refused:
        _check_external_servers(load_sweep(write_sweep(tmp_path / "two.toml", doc)))
    lines = str(refused.value).splitlines()
    assert len(lines) == 3, lines
    assert lines[1].startswith("  arm 'down' ") and "connection refused" in lines[1], lines
    assert lines[2].startswith("  arm 'tls' ") and "does not speak TLS" in lines[2], lines


# --- the probe request: the arm's model and token count, before anything runs -----------


@pytest.fixture(scope="module")
def no_stream_usage():
    """A server that streams no usage, as llama-cpp-python's does (the simulator's mode)."""
    from tests.conftest import start_simulator, stop_process_group

    proc, base = start_simulator("--no-stream-usage", "--step-ms", "1")
    yield base
    stop_process_group(proc)


def _probed(tmp_path: Path, base_url: str, **arm_keys: object) -> Path:
    return write_sweep(tmp_path / "probe.toml", sweep(
        "probed", [external_arm("mine", base_url, **NO_CLOCK, **arm_keys)],
        defaults=defaults(restarts=1)))


def test_an_arm_counting_usage_on_a_server_without_it_is_refused_with_the_advice(
        tmp_path, no_stream_usage, capsys):
    started = time.monotonic()
    code = main(["run", str(_probed(tmp_path, no_stream_usage)),
                 "--warehouse", str(tmp_path / "wh.duckdb")])
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 2 and elapsed < SAID_WITHIN_S, (code, elapsed, err)
    assert "arm 'mine'" in err and "the server reported no usage" in err, err
    assert 'Set the arm\'s token_count = "logprobs"' in err, err
    assert not (tmp_path / "wh-data").exists()


def test_the_same_server_counted_from_logprobs_passes(tmp_path, no_stream_usage, capsys):
    _check_external_servers(load_sweep(_probed(tmp_path, no_stream_usage,
                                               token_count="logprobs")))
    assert capsys.readouterr().out == _RECONCILED.format(no_stream_usage)


# What the preflight says of the simulator's /metrics (vLLM's names).
_RECONCILED = ("arm 'mine': vllm counters ({}/metrics: vllm:* metric names): each window is "
               "reconciled against them\n")


def test_the_server_family_is_said_and_a_declared_family_it_does_not_carry_refused(
        tmp_path, no_stream_usage, capsys):
    with pytest.raises(CliError) as refused:
        _check_external_servers(load_sweep(_probed(tmp_path, no_stream_usage,
                                                   token_count="logprobs",
                                                   server_family="sglang")))
    assert ("server_family = 'sglang', but /metrics carries vllm counters "
            f"({no_stream_usage}/metrics: vllm:* metric names): set server_family = 'vllm' "
            'or "auto"') in str(refused.value), refused.value
    _check_external_servers(load_sweep(_probed(tmp_path, no_stream_usage,
                                               token_count="logprobs", metrics_path="/none")))
    assert capsys.readouterr().out == (
        f"arm 'mine': no counters to reconcile with ({no_stream_usage}/none: no endpoint: "
        "HTTP 404): its entries say so\n")


def test_a_model_the_server_does_not_serve_is_named(tmp_path, no_stream_usage):
    with pytest.raises(CliError) as refused:
        _check_external_servers(load_sweep(_probed(tmp_path, no_stream_usage,
                                                   model="llama-3-typo")))
    assert ("arm 'mine' (base_url " in str(refused.value)
            and "a probe request to /v1/chat/completions failed: HTTP 404" in str(refused.value)
            and "llama-3-typo" in str(refused.value)), refused.value


@pytest.fixture(scope="module")
def llama_like():
    """A server that answers HTTP 400 with an empty body to an X-Request-Id that is not a
    UUID and cuts the stream in progress when another request arrives, as
    llama-cpp-python 0.3's does (the simulator's modes of both)."""
    from tests.conftest import start_simulator, stop_process_group

    proc, base = start_simulator("--no-stream-usage", "--step-ms", "2", "--uuid-request-ids",
                                 "--interrupt-requests")
    yield base
    stop_process_group(proc)


def test_a_server_that_refuses_the_request_id_header_is_named_with_the_key(
        tmp_path, llama_like, capsys):
    started = time.monotonic()
    code = main(["run", str(_probed(tmp_path, llama_like, token_count="logprobs")),
                 "--warehouse", str(tmp_path / "wh.duckdb")])
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 2 and elapsed < SAID_WITHIN_S, (code, elapsed, err)
    assert ("arm 'mine' (base_url " in err and "the server refuses the X-Request-Id header "
            "(X-Request-Id: preflight/p0000 was answered HTTP 400) and answers the same " in err
            and "set request_id_header = false for this arm" in err), err
    _check_external_servers(load_sweep(_probed(tmp_path, llama_like, token_count="logprobs",
                                               request_id_header=False)))


def test_a_server_that_cuts_the_stream_in_progress_is_refused_above_one_in_flight(
        tmp_path, llama_like):
    def probed(concurrency: list[int]) -> Path:
        return write_sweep(tmp_path / "c.toml", sweep("probed", [external_arm(
            "mine", llama_like, token_count="logprobs", request_id_header=False,
            **NO_CLOCK)], defaults=defaults(restarts=1, concurrency=concurrency)))

    with pytest.raises(CliError) as refused:
        _check_external_servers(load_sweep(probed([1, 4])))
    said = str(refused.value)
    assert "concurrency reaches 4, but two requests sent together did not both complete (" \
        in said and "[DONE] arrived without a finish_reason" in said, said
    assert "concurrency = [1]" in said and "--interrupt_requests False" in said, said
    _check_external_servers(load_sweep(probed([1])))


def test_an_external_arm_is_said_to_run_once_when_defaults_ask_for_restarts(
        tmp_path, no_stream_usage, capsys):
    for restarts in (3, 1, None):  # None: the file leaves it to the default (2), unsaid
        _check_external_servers(load_sweep(write_sweep(tmp_path / "r.toml", sweep(
            "probed", [external_arm("mine", no_stream_usage, token_count="logprobs",
                                    **NO_CLOCK)], defaults=defaults(restarts=restarts)))))
        said, family = capsys.readouterr().out, _RECONCILED.format(no_stream_usage)
        assert said.endswith(family), said
        assert said.removesuffix(family) == ("" if restarts in (1, None) else (
            "arm 'mine' is external: measured once, as one server instance ([defaults] "
            "restarts = 3 applies to the servers benchledger starts)\n"))


def test_an_error_page_is_said_in_one_line(tmp_path, plain_port):
    """A server that speaks HTTP but not the API (http.server answers POST with a 501
    page of HTML): the run is refused in one line, the page cut."""
    with pytest.raises(CliError) as refused:
        _check_external_servers(load_sweep(_sweep_file(
            tmp_path, f"http://127.0.0.1:{plain_port}", restarts=1)))
    lines = str(refused.value).splitlines()
    assert len(lines) == 2 and "failed: HTTP 501: <!DOCTYPE HTML>" in lines[1], lines
    assert lines[1].endswith("..."), lines


def test_a_missing_api_key_is_named_before_anything_runs(tmp_path, no_stream_usage,
                                                         monkeypatch):
    monkeypatch.delenv("PREFLIGHT_TEST_KEY", raising=False)
    with pytest.raises(CliError, match="arms.api_key_env names the environment variable "
                                       "PREFLIGHT_TEST_KEY, which is not set"):
        _check_external_servers(load_sweep(_probed(tmp_path, no_stream_usage,
                                                   api_key_env="PREFLIGHT_TEST_KEY")))


class _HostileAnswer(_Answers404):
    """Answers the probe with an error that would clear the terminal and repeats the key."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        key = self.headers.get("Authorization", "").removeprefix("Bearer ")
        body = f"refused \x1b[2J\x1b[31m for key {key}".encode()
        self.send_response(500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_what_the_server_answers_is_shown_not_obeyed_and_never_shows_the_key(
        tmp_path, monkeypatch):
    monkeypatch.setenv("PREFLIGHT_TEST_KEY", "sk-very-secret-value")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HostileAnswer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(CliError) as refused:
            _check_external_servers(load_sweep(_probed(
                tmp_path, f"http://127.0.0.1:{server.server_port}",
                api_key_env="PREFLIGHT_TEST_KEY")))
    finally:
        server.shutdown()
        server.server_close()
    said = str(refused.value)
    assert "HTTP 500: refused \\x1b[2J\\x1b[31m for key" in said, said
    assert "\x1b" not in said and "sk-very-secret-value" not in said, said


def test_a_request_refused_for_its_id_says_which_header_it_carried(llama_like):
    """A window's row, not only the preflight: an empty HTTP 400 names the header sent."""
    from benchledger.client.probe import _probe_one
    from benchledger.client.target import Target
    from tests.sweeps import SIM_MODEL

    refused = _probe_one(Target(llama_like, SIM_MODEL, token_count="logprobs"), 10.0)
    assert refused.status == "failed" and refused.http_status == 400, refused.error
    assert refused.error == (
        "HTTP 400: (an empty body; the request carried X-Request-Id: preflight/p0000: a "
        "server that refuses it, as llama-cpp-python's does any id that is not a UUID, "
        "needs the arm's request_id_header = false)")
    answered = _probe_one(Target(llama_like, SIM_MODEL, token_count="logprobs",
                                 request_id_header=False), 10.0)
    assert answered.status == "completed" and answered.finish_reason, answered.error
