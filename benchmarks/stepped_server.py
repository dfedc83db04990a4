"""A stepped SSE server that knows the truth: when it sent each event, and how many requests
it was serving at once. benchmarks/client_fidelity.py holds a client's timestamps to it.

    .venv/bin/python -m benchmarks.stepped_server --port 8123 --step-ms 10 --core 1

The wire format is sse_stub.py's (its `Stream` and `Connection`: vLLM-shaped chat events,
one write per event, HTTP/1.1 chunked), so what a client reads is exactly what the capacity
benchmark's stub sends. What this server adds is its own bookkeeping:

- per request: the key (first word of the last message), when the request arrived and,
  for each content event, time.perf_counter_ns() just before its write (CLOCK_MONOTONIC on
  Linux: the clock every client here stamps with, so the two are directly comparable);
- per step: when it began and how many streams were open then (a stream is open from its
  request's arrival to its last write): the requests the client actually had in flight.

GET /stamps returns both and forgets them (`{"requests": [...], "steps": [[t_ns, open],
...]}`); GET /health answers 200. Like the stub, and unlike the benchledger client, it
shares no code with benchledger.client: a bug in one cannot hide in both.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

from benchmarks.sse_stub import Connection, Stream, StubServer, serve


class TimedStream(Stream):
    """A stub stream that also remembers when its request arrived."""

    __slots__ = ("arrival_ns",)

    def __init__(self, conn: Connection, key: str, tokens: int, prompt_tokens: int) -> None:
        super().__init__(conn, key, tokens, prompt_tokens)
        self.arrival_ns = time.perf_counter_ns()


class SteppedServer(StubServer):
    """The stub's step loop and wire format, with this server's bookkeeping."""

    stream_class = TimedStream

    def __init__(self, model: str, step_s: float) -> None:
        super().__init__(model, step_s)
        self.finished: list[dict[str, Any]] = []
        self.steps: list[tuple[int, int]] = []

    def handle(self, conn: Connection, method: str, path: str, body: bytes) -> None:
        if method == "GET" and path == "/stamps":
            report = {"requests": self.finished, "steps": self.steps}
            self.finished, self.steps = [], []
            conn.respond("200 OK", json.dumps(report).encode())
        else:  # the stub's streams, /health and 404
            super().handle(conn, method, path, body)

    def stepping(self) -> None:
        """The open streams at each step's start: the requests really in flight."""
        self.steps.append((time.perf_counter_ns(), len(self.streams)))

    def ended(self, stream: Stream, complete: bool) -> None:
        assert isinstance(stream, TimedStream)
        self.finished.append({"key": stream.key, "arrival_ns": stream.arrival_ns,
                              "complete": complete, "stamps": stream.stamps})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--model", default="sim-model")
    parser.add_argument("--step-ms", type=float, default=10.0)
    parser.add_argument("--core", type=int, default=None, help="pin the server to this core")
    args = parser.parse_args(argv)
    if args.core is not None:
        os.sched_setaffinity(0, {args.core})
    asyncio.run(serve(args.host, args.port, args.model, args.step_ms / 1000, SteppedServer,
                      backlog=2048))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
