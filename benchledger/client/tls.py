"""One TLS context per process for benchledger's httpx clients.

httpx builds a new `ssl.SSLContext` for every client, reading the CA bundle each time:
about 30 ms of CPU. A readiness wait asks many times, a window's clock sampler every
`clock_interval_s` (ten times a second in some sweeps: a third of a core taken from the
timed client beside it), and every metrics scrape makes a client. The context is built once,
on first use, with httpx's own defaults (its CA bundle, verification on, SSL_CERT_FILE and
SSL_CERT_DIR honoured); an SSLContext may serve many connections and threads at once.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The process's TLS context for httpx clients (`verify=tls_context()`)."""
    return httpx.create_ssl_context()
