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
from benchledger.server.preflight import why_not_answering
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
    assert err.startswith("benchledger run: the sweep's external servers cannot be "
                          "reached, nothing was run:"), err
    assert (f"arm 'mine' (base_url http://127.0.0.1:{port}): nothing listens at "
            f"127.0.0.1:{port} (connection refused)") in err, err
    assert not (tmp_path / "wh.duckdb").exists()
    assert not (tmp_path / "wh-data").exists()  # no lock, no Airflow home, no raw folder


def test_a_base_url_ending_in_v1_is_refused_when_the_file_is_read(tmp_path):
    with pytest.raises(SweepError) as refused:
        load_sweep(_sweep_file(tmp_path, "http://127.0.0.1:8000/v1/"))
    assert ("arms[0].base_url: 'http://127.0.0.1:8000/v1/' ends in /v1, which benchledger "
            "adds itself (/v1/chat/completions): give the server's root, "
            "'http://127.0.0.1:8000'") in str(refused.value)


def test_an_external_arm_is_said_to_run_once_when_defaults_ask_for_restarts(
        tmp_path, plain_port, capsys):
    _check_external_servers(load_sweep(_sweep_file(
        tmp_path, f"http://127.0.0.1:{plain_port}", restarts=3)))
    assert capsys.readouterr().out == (
        "arm 'mine' is external: measured once, as one server instance ([defaults] "
        "restarts = 3 applies to the servers benchledger starts)\n")
    _check_external_servers(load_sweep(_sweep_file(
        tmp_path, f"http://127.0.0.1:{plain_port}", restarts=1)))
    assert capsys.readouterr().out == ""


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
