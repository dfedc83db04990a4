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

from benchmarks.sse_stub import Connection, Stream, StubServer


class TimedStream(Stream):
    """A stub stream that also remembers when its request arrived."""

    __slots__ = ("arrival_ns",)

    def __init__(self, conn: Connection, key: str, tokens: int, prompt_tokens: int) -> None:
        super().__init__(conn, key, tokens, prompt_tokens)
        self.arrival_ns = time.perf_counter_ns()


class SteppedServer(StubServer):
    def __init__(self, model: str, step_s: float) -> None:
        super().__init__(model, step_s)
        self.finished: list[dict[str, Any]] = []
        self.steps: list[tuple[int, int]] = []

    def handle(self, conn: Connection, method: str, path: str, body: bytes) -> None:
        if method == "GET" and path == "/stamps":
            report = {"requests": self.finished, "steps": self.steps}
            self.finished, self.steps = [], []
            conn.respond("200 OK", json.dumps(report).encode())
        elif method == "POST" and path == "/v1/chat/completions":
            request = json.loads(body)
            text = request["messages"][-1]["content"]
            assert conn.transport is not None  # set when the connection was made
            conn.transport.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                                 b"transfer-encoding: chunked\r\n\r\n")
            self.streams.append(TimedStream(conn, text.split()[0], int(request["max_tokens"]),
                                            len(text.split())))
            self.wake.set()
        else:  # /health and 404
            super().handle(conn, method, path, body)

    def _done(self, stream: Stream, complete: bool) -> None:
        assert isinstance(stream, TimedStream)
        self.finished.append({"key": stream.key, "arrival_ns": stream.arrival_ns,
                              "complete": complete, "stamps": stream.stamps})

    async def step_loop(self) -> None:
        """The stub's loop, counting the open streams at each step's start."""
        loop = asyncio.get_running_loop()
        deadline = loop.time()
        while True:
            if not self.streams:
                self.wake.clear()
                await self.wake.wait()
                deadline = loop.time()
            self.steps.append((time.perf_counter_ns(), len(self.streams)))
            wrote = False
            for stream in list(self.streams):
                assert stream.conn.transport is not None
                if stream.conn.transport.is_closing():  # the client went away mid-stream
                    self.streams.remove(stream)
                    self._done(stream, complete=False)
                elif not stream.conn.paused:  # a full socket buffer skips this step
                    wrote = True
                    if stream.step():
                        self.streams.remove(stream)
                        self._done(stream, complete=True)
            deadline = max(deadline + self.step_s, loop.time())
            # nothing writable: every client is behind, give them a moment
            await asyncio.sleep(deadline - loop.time() if wrote else max(self.step_s, 0.0002))


async def serve(host: str, port: int, model: str, step_s: float) -> None:
    server = SteppedServer(model, step_s)
    loop = asyncio.get_running_loop()
    listener = await loop.create_server(lambda: Connection(server), host, port, backlog=2048)
    async with listener:
        await server.step_loop()


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
    asyncio.run(serve(args.host, args.port, args.model, args.step_ms / 1000))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
