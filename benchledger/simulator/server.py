"""Command line of the simulator: ``python -m benchledger.simulator --port N ...``."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import signal
import threading

import uvicorn

from benchledger.simulator.app import create_app
from benchledger.simulator.clocks import clock_summary
from benchledger.simulator.engine import VERSION, Engine, log_line
from benchledger.simulator.options import add_arguments, config_from_args


class _Server(uvicorn.Server):
    """uvicorn server that aborts in-flight requests first when shutting down, so open
    streams end at once instead of running into the graceful-shutdown timeout."""

    def __init__(self, config: uvicorn.Config, engine: Engine) -> None:
        super().__init__(config)
        self._engine = engine

    async def shutdown(self, sockets=None) -> None:
        self._engine.abort_all()
        await super().shutdown(sockets)


def build_parser() -> argparse.ArgumentParser:
    """--host and --port, then one flag per setting (declared in options.py)."""
    p = argparse.ArgumentParser(
        prog="benchledger simulator",
        description="vLLM-like OpenAI-compatible server with simulated speculative decoding "
                    "and automatic prefix caching.")
    p.add_argument("--port", type=int, required=True, help="port to listen on")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default %(default)s)")
    add_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT; returns 0 after a clean shutdown."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    engine = Engine(config)
    log_line("api_server.py:1", (
        f"{VERSION} starting on http://{args.host}:{args.port} speed_factor="
        f"{engine.speed_factor:.4f} gpu clocks: {clock_summary(config)} effective config: "
        f"{json.dumps(dataclasses.asdict(config), sort_keys=True)}"))
    # uvicorn re-raises the signal it shut down on after restoring the previous handler;
    # a no-op SIGTERM handler makes that a normal return (exit code 0) instead of death
    # by signal.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda _signum, _frame: None)
    server = _Server(uvicorn.Config(
        create_app(config, engine), host=args.host, port=args.port, log_level="info",
        access_log=False, timeout_graceful_shutdown=2), engine)
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    return 0 if server.started else 1
