"""Command line of the simulator: ``python -m benchledger.simulator --port N ...``.

One process is a single server, the head of a deployment of pretend nodes
(--expect-nodes N) or one of its pretend nodes (--join URL); see nodes.py."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import signal
import socket
import threading

import uvicorn

from benchledger.simulator.app import create_app
from benchledger.simulator.clocks import clock_summary
from benchledger.simulator.engine import VERSION, Engine, log_line
from benchledger.simulator.nodes import PretendNode, create_node_app
from benchledger.simulator.options import add_arguments, config_from_args


class _Server(uvicorn.Server):
    """uvicorn server that aborts in-flight requests first when shutting down, so open
    streams end at once instead of running into the graceful-shutdown timeout."""

    def __init__(self, config: uvicorn.Config, engine: Engine) -> None:
        super().__init__(config)
        self._engine = engine

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._engine.abort_all()
        await super().shutdown(sockets)


def build_parser() -> argparse.ArgumentParser:
    """--host, --port and the deployment role (instance parameters, not settings), then
    one flag per setting (declared in options.py)."""
    p = argparse.ArgumentParser(
        prog="benchledger simulator",
        description="vLLM-like OpenAI-compatible server with simulated speculative decoding "
                    "and automatic prefix caching.")
    p.add_argument("--port", type=int, required=True, help="port to listen on")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default %(default)s)")
    p.add_argument("--expect-nodes", type=int, default=0, metavar="N",
                   help="be the head of a deployment spanning N further pretend nodes: "
                        "not ready (503) until all N joined, and every step as slow as "
                        "the slowest node's GPU (default %(default)s: no nodes)")
    p.add_argument("--join", metavar="URL",
                   help="be a pretend node of the deployment whose head serves at URL "
                        "(e.g. http://127.0.0.21:8000): serve only /health, /version, "
                        "/clocks, /dcgm and /load, with GPUs that follow the head's load")
    p.add_argument("--node-name", default=socket.gethostname(), metavar="NAME",
                   help="this node's name, in its log lines and as the Hostname of its "
                        "/dcgm page (default: this machine's hostname, %(default)s)")
    add_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT; returns 0 after a clean shutdown."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.expect_nodes < 0:
        parser.error("--expect-nodes must be >= 0")
    if args.join and args.expect_nodes > 0:
        parser.error("--join (a pretend node) and --expect-nodes (a head) exclude each other")
    try:
        config = config_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    engine = Engine(config)  # a pretend node runs no requests; its engine stays empty
    own_url = f"http://{args.host}:{args.port}"
    if args.join:
        role = f"pretend node of {args.join} as {args.node_name}"
        app = create_node_app(PretendNode(config, args.node_name, args.join, own_url))
    else:
        role = (f"head of {args.expect_nodes} pretend nodes as {args.node_name}"
                if args.expect_nodes else f"single server as {args.node_name}")
        app = create_app(config, engine, args.node_name, args.expect_nodes)
    log_line("api_server.py:1", (
        f"{VERSION} starting on {own_url} ({role}) speed_factor="
        f"{engine.speed_factor:.4f} gpu clocks: {clock_summary(config)} effective config: "
        f"{json.dumps(dataclasses.asdict(config), sort_keys=True)}"))
    # uvicorn re-raises the signal it shut down on after restoring the previous handler;
    # a no-op SIGTERM handler makes that a normal return (exit code 0) instead of death
    # by signal.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda _signum, _frame: None)
    server = _Server(uvicorn.Config(
        app, host=args.host, port=args.port, log_level="info",
        access_log=False, timeout_graceful_shutdown=2), engine)
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    return 0 if server.started else 1
