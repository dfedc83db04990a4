"""A private PostgreSQL server for a test: Debian's binaries (`make postgres` installs
them), a fresh cluster in a temporary folder owned by the `postgres` user (PostgreSQL
refuses to run as root), listening on 127.0.0.1 at a free port, trust authentication
(only this machine's loopback reaches it), stopped and removed afterwards.

Where the binaries are missing the test is skipped with a message, except under CI,
where that is a failure."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_postgres(*args: str, namespace: str | None = None) -> list[str]:
    """Run as the postgres user when we are root (PostgreSQL refuses root), in a network
    namespace when one is given."""
    line = ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else list(args)
    return ["ip", "netns", "exec", namespace, *line] if namespace else line


@contextlib.contextmanager
def postgres_server(database: str = "airflow", host: str = "127.0.0.1",
                    namespace: str | None = None) -> Iterator[str]:
    """Yields the URL of a new, empty database on a private server listening on `host`
    (in the network namespace `namespace`, when given)."""
    bindir = _bindir()
    if bindir is None or (os.geteuid() == 0 and not _user_exists("postgres")):
        if "CI" in os.environ:
            pytest.fail("CI is set but Debian's PostgreSQL is not installed: `make test` "
                        "(make postgres) installs the postgresql package")
        pytest.skip("no PostgreSQL binaries under /usr/lib/postgresql: install Debian's "
                    "postgresql (`make postgres`); with CI set this is a failure")
    folder = Path(tempfile.mkdtemp(prefix="bl-pg-"))
    data, sockets = folder / "data", folder / "sockets"
    sockets.mkdir()
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
        shutil.chown(sockets, "postgres")
    port = _free_port() if namespace is None else 5432
    log = folder / "server.log"
    try:
        subprocess.run(_as_postgres(str(bindir / "initdb"), "-D", str(data), "-A", "trust",
                                    "-U", "postgres", "-E", "UTF8"),
                       check=True, capture_output=True, timeout=120)
        if host != "127.0.0.1":  # initdb trusts loopback only; add the host's own subnet
            with (data / "pg_hba.conf").open("a") as hba:
                hba.write("host all all samenet trust\n")
        subprocess.run(_as_postgres(
            str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60",
            "-o", f"-p {port} -k {sockets} -c listen_addresses={host} "
                  "-c max_connections=200 -c fsync=off", "start", namespace=namespace),
            check=True, capture_output=True, timeout=120)
        subprocess.run(_as_postgres(str(bindir / "createdb"), "-h", host, "-p", str(port),
                                    "-U", "postgres", database, namespace=namespace),
                       check=True, capture_output=True, timeout=60)
        yield f"postgresql://postgres@{host}:{port}/{database}"
    finally:
        if data.exists():
            subprocess.run(_as_postgres(str(bindir / "pg_ctl"), "-D", str(data), "-m",
                                        "immediate", "-w", "stop", namespace=namespace),
                           capture_output=True, timeout=60, check=False)
        shutil.rmtree(folder, ignore_errors=True)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
