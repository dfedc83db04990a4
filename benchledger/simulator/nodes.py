"""A deployment of pretend nodes (issue #24): one head process serves the model, N pretend
node processes serve only their pretend GPUs' telemetry.

It models a distributed engine (vLLM on Ray): the head answers 503 until every worker node
has joined, and the whole deployment steps at the pace of its slowest GPU, so one node
started with --low-clock slows every request the head serves, as in the field notes, while
only that node's telemetry shows why. A pretend node runs no requests: it registers with
the head (POST /nodes, then again as a heartbeat), and its /clocks and /dcgm follow the
head's load (GET /load), so a harness that scrapes every node finds the stuck GPU where it
is.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from benchledger.simulator.clocks import gpu_clocks
from benchledger.simulator.dcgm_page import render_dcgm
from benchledger.simulator.engine import VERSION, Engine, Log, log_line
from benchledger.simulator.metrics import CONTENT_TYPE
from benchledger.simulator.options import SimConfig
from benchledger.simulator.protocol import ApiError

REGISTER_RETRY_S = 0.2  # until the head first answers: it may start later, or be loading
HEARTBEAT_S = 2.0  # then: a head that restarted learns of its nodes again
HTTP_TIMEOUT_S = 1.0  # a stuck head must not hang a node's /dcgm scrape

# POST /nodes: key -> the JSON types it may have (bool is excluded separately: it is an int)
NODE_FIELDS: dict[str, tuple[type, ...]] = {
    "node": (str,), "url": (str,), "load_clock_mhz": (int, float),
    "sm_clock_mhz": (int, float), "num_gpus": (int,)}


def load_body(under_load: bool, busy_s: float, slowdown: float) -> dict[str, Any]:
    """The GET /load body, of a head (its engine) or of a pretend node (its view of it)."""
    return {"under_load": under_load, "busy_s": busy_s, "slowdown": slowdown}


def check_node_body(body: Any) -> dict[str, Any]:
    """A POST /nodes body reduced to its keys, or ApiError 400 naming what is wrong."""
    if not isinstance(body, dict):
        raise ApiError(400, "a node registration must be a JSON object")
    bad = [key for key, types in NODE_FIELDS.items()
           if isinstance(body.get(key), bool) or not isinstance(body.get(key), types)]
    if not bad:
        bad = [key for key, ok in (("node", body["node"] != ""), ("url", body["url"] != ""),
                                   ("load_clock_mhz", body["load_clock_mhz"] > 0),
                                   ("sm_clock_mhz", body["sm_clock_mhz"] > 0),
                                   ("num_gpus", body["num_gpus"] >= 1)) if not ok]
    if bad:
        raise ApiError(400, f"invalid node registration: {', '.join(bad)} (expected "
                            "node and url non-empty strings, load_clock_mhz and "
                            "sm_clock_mhz positive numbers, num_gpus an integer >= 1)")
    return {key: body[key] for key in NODE_FIELDS}


class Head:
    """The head's registry of pretend nodes; it sets its engine's node_slowdown."""

    def __init__(self, engine: Engine, expected: int, log: Log = log_line) -> None:
        self.engine = engine
        self.expected = expected
        self.nodes: dict[str, dict[str, Any]] = {}  # by node name; dicts keep join order
        self._log = log

    @property
    def missing(self) -> int:
        return max(0, self.expected - len(self.nodes))

    def waiting_message(self) -> str | None:
        """Why requests are refused while nodes are missing (None once all joined)."""
        if not self.missing:
            return None
        return (f"the distributed engine is waiting for {self.missing} more pretend "
                f"node(s) to join ({len(self.nodes)} of {self.expected} joined)")

    def register(self, body: Any) -> dict[str, int]:
        """Register or refresh one node (a heartbeat repeats its registration)."""
        node = check_node_body(body)
        first = node["node"] not in self.nodes
        self.nodes[node["node"]] = node
        self.engine.node_slowdown = max(n["sm_clock_mhz"] / n["load_clock_mhz"]
                                        for n in self.nodes.values())
        if first:
            self._log("ray_utils.py:1", (
                f"pretend node {node['node']} joined from {node['url']}: "
                f"{node['num_gpus']} GPU(s), load clock {node['load_clock_mhz']} MHz "
                f"({len(self.nodes)} of {self.expected} joined; steps "
                f"{self.engine.slowdown:.3f}x slower)"))
        return {"joined": len(self.nodes), "expected": self.expected}

    def routes(self) -> list[Route]:
        async def nodes(request: Request) -> Response:
            if request.method == "GET":
                return JSONResponse({"expected": self.expected,
                                     "nodes": list(self.nodes.values())})
            try:
                body = await request.json()
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise ApiError(400, f"invalid JSON body: {exc}") from exc
            return JSONResponse(self.register(body))

        return [Route("/nodes", nodes, methods=["GET", "POST"])]


class PretendNode:
    """One pretend node: joins its head and shows the head's load on its own GPUs."""

    def __init__(self, config: SimConfig, name: str, head_url: str, own_url: str,
                 log: Log = log_line, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.name = name
        self.head_url = head_url.rstrip("/")
        self.own_url = own_url
        self.registered = False  # once true, stays: /health answers 200
        self.under_load = False
        # The head's busy seconds since this node started (its GPUs' load): only grows,
        # so the energy counter only grows, whatever the head answers or fails to.
        self.busy_s = 0.0
        self._head_busy: float | None = None  # the head's busy_s at the last read
        self._log = log
        self._clock = clock
        self._started = clock()

    def start(self) -> None:
        """Count alive seconds (the idle energy) from now: the node starts serving."""
        self._started = self._clock()

    @property
    def alive_s(self) -> float:
        return self._clock() - self._started

    def registration(self) -> dict[str, Any]:
        """The POST /nodes body: what the head needs to pace itself by this node."""
        return {"node": self.name, "url": self.own_url,
                "load_clock_mhz": self.config.load_clock_mhz,
                "sm_clock_mhz": self.config.sm_clock_mhz, "num_gpus": self.config.num_gpus}

    def count_head_busy(self, head_busy_s: float) -> None:
        """Add what the head stepped since the last read (the first read is the zero
        point). A head that went back (it restarted) counts from 0 again."""
        if self._head_busy is not None:
            grown = head_busy_s - self._head_busy
            self.busy_s += grown if grown >= 0 else head_busy_s
        self._head_busy = head_busy_s

    async def read_load(self, client: httpx.AsyncClient) -> None:
        """Follow the head's load; a head that does not answer leaves the GPUs idle."""
        try:
            answer = await client.get(self.head_url + "/load")
            answer.raise_for_status()
            load = answer.json()
            under_load, head_busy_s = bool(load["under_load"]), float(load["busy_s"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            self.under_load = False
            return
        self.under_load = under_load
        self.count_head_busy(head_busy_s)

    async def register_once(self, client: httpx.AsyncClient) -> str | None:
        """POST the registration; None when the head took it, else what went wrong."""
        try:
            answer = await client.post(self.head_url + "/nodes", json=self.registration())
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"
        return None if answer.status_code == 200 else f"HTTP {answer.status_code}"

    async def join_loop(self, client: httpx.AsyncClient) -> None:
        """Register until the head takes it, then heartbeat forever. A failure is logged
        once per outage: a head that starts later must not flood the node's log."""
        reachable = True
        while True:
            error = await self.register_once(client)
            if error is None:
                if not self.registered:
                    self._log("nodes.py:1", f"pretend node {self.name} joined the head at "
                                            f"{self.head_url}")
                elif not reachable:
                    self._log("nodes.py:1", f"pretend node {self.name} reached the head at "
                                            f"{self.head_url} again")
                self.registered = True
                await self.read_load(client)  # the zero point of the head's busy seconds
            elif reachable:
                self._log("nodes.py:1", f"pretend node {self.name} cannot register with "
                                        f"the head at {self.head_url} ({error}); retrying")
            reachable = error is None
            await asyncio.sleep(HEARTBEAT_S if self.registered else REGISTER_RETRY_S)

    def dcgm_page(self) -> str:
        return render_dcgm(self.config, self.under_load, self.alive_s, self.busy_s,
                           hostname=self.name)


def create_node_app(node: PretendNode) -> Starlette:
    """A pretend node's ASGI app: telemetry only, no model (so the vLLM endpoints 404)."""
    config = node.config
    clients: list[httpx.AsyncClient] = []

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        # trust_env=False: a proxy from the environment must not carry loopback traffic
        async with httpx.AsyncClient(timeout=HTTP_TIMEOUT_S, trust_env=False) as client:
            clients.append(client)
            node.start()
            task = asyncio.create_task(node.join_loop(client))
            try:
                yield
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    async def health(_request: Request) -> Response:
        if not config.health:
            return Response(status_code=404)
        return Response(status_code=200 if node.registered else 503)

    async def version(_request: Request) -> Response:
        return JSONResponse({"version": VERSION})

    async def clocks(_request: Request) -> Response:
        await node.read_load(clients[0])
        return JSONResponse(gpu_clocks(config, node.under_load))

    async def dcgm(_request: Request) -> Response:
        await node.read_load(clients[0])
        return Response(node.dcgm_page(), media_type=CONTENT_TYPE)

    async def load(_request: Request) -> Response:
        await node.read_load(clients[0])
        return JSONResponse(load_body(node.under_load, node.busy_s, config.clock_slowdown))

    routes = [Route("/health", health), Route("/version", version), Route("/clocks", clocks),
              Route("/dcgm", dcgm), Route("/load", load)]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.node = node
    return app
