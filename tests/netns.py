"""Hosts on one machine: a Linux bridge and one network namespace per host, each with its
own address on the bridge's subnet and a loopback of its own (issue #25's multi-host
test). Nothing in one namespace reaches another over 127.0.0.1: each has its own lo.
Everything made is removed afterwards: the processes left in a namespace are killed,
then the namespaces and the bridge are deleted.

Needs root and iproute2's `ip`; without them the test is skipped with a message, except
under CI, where that is a failure."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

from tests.conftest import requirement_missing


@dataclass(frozen=True)
class Host:
    name: str
    namespace: str
    address: str

    def command(self, *args: str) -> list[str]:
        """A command line that runs in this host's namespace."""
        return ["ip", "netns", "exec", self.namespace, *args]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


def require_namespaces() -> None:
    if os.geteuid() == 0 and shutil.which("ip"):
        return
    requirement_missing("network namespaces need root and iproute2's `ip`")


@contextlib.contextmanager
def hosts(names: list[str]) -> Iterator[dict[str, Host]]:
    """One namespace per name on a new bridge, addresses 10.<x>.<y>.2, .3, ..."""
    require_namespaces()
    tag = secrets.token_hex(3)
    x, y = 200 + secrets.randbelow(50), secrets.randbelow(250)
    bridge = f"blbr{tag}"
    made: list[Host] = []
    try:
        _ip("link", "add", bridge, "type", "bridge")
        _ip("link", "set", bridge, "up")
        for i, name in enumerate(names, start=2):
            host = Host(name, f"bl-{tag}-{name}", f"10.{x}.{y}.{i}")
            _ip("netns", "add", host.namespace)
            made.append(host)
            outside, inside = f"bl{tag}{i}h", f"bl{tag}{i}n"
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            _ip("link", "set", outside, "master", bridge, "up")
            _ip("link", "set", inside, "netns", host.namespace)
            _ip("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", inside)
            _ip("-n", host.namespace, "link", "set", inside, "up")
            _ip("-n", host.namespace, "link", "set", "lo", "up")
        yield {host.name: host for host in made}
    finally:
        for host in made:
            pids = subprocess.run(["ip", "netns", "pids", host.namespace], text=True,
                                  capture_output=True, check=False).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True,
                           check=False)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)


def namespaces() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], text=True, capture_output=True,
                            check=False).stdout
    return {line.split()[0] for line in listed.splitlines() if line.strip()}
