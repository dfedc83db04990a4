"""A private S3-compatible HTTP server for a test: moto's standalone server (the dev extra
installs `moto[server]`), listening on `host` at a free port (in a network namespace
when one is given), one bucket made, stopped afterwards. Credentials are dummies: moto
accepts any, and the tests only ever hand them over through the environment.

Where moto is missing the test is skipped with a message, except under CI, where that is
a failure."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "benchledger-test", "AWS_SECRET_ACCESS_KEY":
               "never-stored-secret", "AWS_REGION": "us-east-1"}


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    bucket: str
    namespace: str | None = None  # where it listens: only that namespace's bridge reaches it
    pid: int | None = None  # the server's process (a session of its own)

    def kill(self) -> None:
        """The store goes away at once (SIGKILL to its session): a store out of reach."""
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)

    @property
    def env(self) -> dict[str, str]:
        """What a process needs to reach it: the endpoint and credentials."""
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint}

    def filesystem(self):
        from pyarrow import fs

        return fs.S3FileSystem(endpoint_override=self.endpoint,
                               access_key=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                               secret_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                               region=CREDENTIALS["AWS_REGION"], allow_bucket_creation=True)

    def objects(self, prefix: str = "") -> dict[str, int]:
        """{key below the bucket: size} of every object under `prefix`."""
        return self._call("objects", prefix)

    def copy_to(self, prefix: str, folder: Path) -> None:
        """Download every object under `prefix` into `folder` (pyarrow's copy_files)."""
        self._call("copy_to", prefix, str(folder))

    def make_bucket(self) -> None:
        self._call("make_bucket")

    def _call(self, what: str, *args: str):
        """One of this module's operations, here or (the server in a namespace) in a
        Python run there."""
        if self.namespace is None:
            return _OPERATIONS[what](self, *args)
        code = ("import json, sys\nfrom tests.s3_server import S3Server, _OPERATIONS\n"
                "server = S3Server(sys.argv[1], sys.argv[2])\n"
                "print(json.dumps(_OPERATIONS[sys.argv[3]](server, *sys.argv[4:])))")
        done = subprocess.run(["ip", "netns", "exec", self.namespace, sys.executable, "-c",
                               code, self.endpoint, self.bucket, what, *args],
                              capture_output=True, text=True, timeout=120, check=True,
                              cwd=Path(__file__).resolve().parents[1])
        return json.loads(done.stdout)


def _objects(server: S3Server, prefix: str) -> dict[str, int]:
    from pyarrow import fs

    base = f"{server.bucket}/{prefix}".rstrip("/")
    infos = server.filesystem().get_file_info(fs.FileSelector(base, recursive=True,
                                                              allow_not_found=True))
    return {i.path.removeprefix(f"{server.bucket}/"): i.size for i in infos
            if i.type == fs.FileType.File}


def _copy_to(server: S3Server, prefix: str, folder: str) -> None:
    from pyarrow import fs

    fs.copy_files(f"{server.bucket}/{prefix}", folder, source_filesystem=server.filesystem())


def _make_bucket(server: S3Server) -> None:
    server.filesystem().create_dir(server.bucket)


_OPERATIONS = {"objects": _objects, "copy_to": _copy_to, "make_bucket": _make_bucket}


def _moto_server() -> list[str]:
    """moto's server of this interpreter (a `moto_server` found on PATH may be another
    environment's, of another version)."""
    import importlib.util

    if importlib.util.find_spec("moto") is None or importlib.util.find_spec("flask") is None:
        if "CI" in os.environ:
            pytest.fail("CI is set but moto's server is not installed: `make test` installs "
                        "the dev extra (moto[server])")
        pytest.skip("moto's server is not installed (pip install -e '.[dev]'); with CI set "
                    "this is a failure")
    return [sys.executable, "-m", "moto.server"]


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host if host != "0.0.0.0" else "127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def s3_server(bucket: str = "bench", host: str = "127.0.0.1",
              namespace: str | None = None, port: int | None = None) -> Iterator[S3Server]:
    """Yields a running server with `bucket` made; it is gone afterwards."""
    port = port or _free_port("127.0.0.1" if namespace else host)
    line = [*_moto_server(), "-H", host, "-p", str(port)]
    if namespace:
        line = ["ip", "netns", "exec", namespace, *line]
    log = Path(tempfile.mkdtemp(prefix="bl-moto-")) / "moto.log"
    with log.open("w") as out:  # the server keeps its own descriptor
        proc = subprocess.Popen(line, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    server = S3Server(f"http://{host}:{port}", bucket, namespace, proc.pid)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"moto_server exited: {log.read_text()[-2000:]}")
            try:
                probe = (["ip", "netns", "exec", namespace, sys.executable, "-c",
                          f"import httpx; httpx.get('{server.endpoint}', timeout=2)"]
                         if namespace else None)
                if probe:
                    subprocess.run(probe, check=True, capture_output=True, timeout=10)
                else:
                    httpx.get(server.endpoint, timeout=2)
                break
            except (httpx.HTTPError, subprocess.SubprocessError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        server.make_bucket()
        yield server
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.unlink(missing_ok=True)
        log.parent.rmdir()
