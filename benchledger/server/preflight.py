"""Before a run: does something speak HTTP where each external server should be, and can
each arm's clock be read here?

An external arm's server is not benchledger's to start, so it must already answer when the
run begins. Without this check a wrong port or a stopped server cost a new user the whole
readiness wait (`ready_timeout_s`, 120 s by default) and Airflow's start before the cause,
and `https://` against a plain-HTTP server surfaced as a timeout of the wrong thing. Here
each mistake is named with its fix in a second or two, before Airflow starts: nothing
listening (connection refused), a host name that does not resolve, TLS against plain HTTP
(and plain HTTP against TLS), a certificate not trusted, no answer at all.

Any HTTP answer passes, whatever its status: a 401 says the server is there (the API key is
the readiness wait's business, and no key is sent from here), a 404 that the health path is
elsewhere (the readiness wait falls back to /v1/models). What a server says once it
answers is judged where it always was, by the readiness wait and the rules.
"""

from __future__ import annotations

import shutil
import socket
import ssl
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx

from benchledger.server.observe import AnswerTooSlow, bounded_get, error_text

# Long enough for a TCP and TLS handshake across a data centre, and for a busy server's
# first answer; short enough that a mistake is said within seconds.
PREFLIGHT_TIMEOUT_S = 10.0
# Answers a TLS server gives to plain HTTP, or a plain server to a TLS ClientHello, as
# OpenSSL words them.
_PLAIN_HTTP_TO_TLS = ("wrong version number", "record layer failure", "packet length too long",
                      "http request", "unknown protocol", "unexpected eof")


def why_not_answering(base_url: str, path: str,
                      timeout_s: float = PREFLIGHT_TIMEOUT_S) -> str | None:
    """None when `base_url` + `path` gets an HTTP answer (any status); otherwise what is
    wrong, in one sentence that ends with what to change."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    where = f"{host}:{port}"
    url = base_url.rstrip("/") + "/" + path.lstrip("/")
    try:
        bounded_get(url, timeout_s, max_bytes=65_536)
        return None
    except (httpx.HTTPError, OSError) as error:
        failure: BaseException = error
    causes = _chain(failure)
    if any(isinstance(c, ConnectionRefusedError) for c in causes):
        return (f"nothing listens at {where} (connection refused): start the server, or "
                "correct the port in base_url")
    if any(isinstance(c, socket.gaierror) for c in causes):
        return (f"the host {host!r} of base_url does not resolve here: correct the name, or "
                "give its address")
    if any(isinstance(c, ssl.SSLCertVerificationError) for c in causes):
        reason = next(c for c in causes if isinstance(c, ssl.SSLCertVerificationError))
        return (f"{where} presents a TLS certificate this machine does not trust "
                f"({getattr(reason, 'verify_message', '') or reason}): give its CA bundle in "
                "SSL_CERT_FILE")
    text = " ".join(str(c).lower() for c in causes)
    if parts.scheme == "https" and (any(isinstance(c, ssl.SSLError) for c in causes)
                                    or any(word in text for word in _PLAIN_HTTP_TO_TLS)):
        return (f"base_url is https:// but {where} does not speak TLS (the TLS handshake "
                f"failed: {error_text(causes[-1])}): use http://{where}")
    if isinstance(failure, (httpx.TimeoutException, AnswerTooSlow)):
        return (f"no HTTP answer from {url} within {timeout_s:g} s ({error_text(failure)}): "
                "check the address and port in base_url, and that nothing between blocks it")
    # A TLS server given plain HTTP closes the connection or answers with a TLS alert.
    if parts.scheme == "http" and _speaks_tls(host, port, timeout_s):
        return f"base_url is http:// but {where} speaks TLS: use https://{where}"
    return f"{url} gives no HTTP answer ({error_text(failure)}): check base_url"


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and its causes, outermost first (httpx wraps the socket's error)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _speaks_tls(host: str, port: int, timeout_s: float) -> bool:
    """Whether a TLS handshake succeeds at host:port (certificate not checked: the
    question is only which protocol listens there)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw, \
                context.wrap_socket(raw, server_hostname=host or None):
            return True
    except (OSError, ValueError):
        return False


def unreadable_clock(clock_source: str, require_clock_check: bool,
                     which: Callable[[str], str | None] = shutil.which) -> str | None:
    """Why an arm's clock check cannot run on this machine, or None: `clock_source =
    "nvidia-smi"` (the default) with no nvidia-smi here fails every restart's
    clock_under_load (T10), so the run would measure for nothing and publish nothing.
    A check the sweep waived (require_clock_check = false), or one read over HTTP (http,
    dcgm: the readiness wait and the rule judge those), is not refused here."""
    if clock_source != "nvidia-smi" or not require_clock_check or which("nvidia-smi"):
        return None
    return ("clock_source is \"nvidia-smi\" (the default) and this machine has no "
            "nvidia-smi, so every restart would fail clock_under_load and nothing would "
            "publish: a GPU server's clocks over HTTP need clock_source = \"dcgm\" or "
            "\"http\" with a clock_url; a server without GPU clocks to read (a CPU "
            "server, a remote one) needs clock_source = \"none\" and "
            "require_clock_check = false (its entries are labelled clock-unchecked)")
