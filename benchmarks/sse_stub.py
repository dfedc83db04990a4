"""A minimal, fast OpenAI-style streaming server for measuring clients (not the simulator).

    .venv/bin/python benchmarks/sse_stub.py --port 8123 [--step-ms 0]

Shaped like vLLM's chat stream (and the simulator's): per request, the role event with
the first token, one `chat.completion.chunk` event per token, the usage event, `[DONE]`,
over HTTP/1.1 keep-alive with chunked transfer encoding. Like an engine, one step loop
serves every open stream: each step writes one event to each stream (one write per event,
so a client that keeps up receives events one by one), then waits `--step-ms` (0: just
yields to the event loop). Streams whose socket buffer is full are skipped in that step
(flow control), so a slower client is never flooded in memory.

It records when it wrote every content event (time.perf_counter_ns(), which on Linux is
CLOCK_MONOTONIC, the same clock the clients stamp with), by the request's key (the first
word of its last message). GET /stamps returns those and forgets them, so a benchmark can
tell how late a client's recorded timestamps are. GET /health answers 200.

Raw asyncio, pre-encoded bytes: a few microseconds per event, so on its own core it
outruns any Python client on another.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid

CREATED = 1_796_000_000


class Stream:
    __slots__ = ("conn", "key", "left", "sent", "prefix", "stamps", "prompt_tokens", "tokens")

    def __init__(self, conn: Connection, key: str, tokens: int, prompt_tokens: int) -> None:
        self.conn = conn
        self.key = key
        self.tokens = tokens
        self.left = tokens
        self.sent = 0
        self.prompt_tokens = prompt_tokens
        self.prefix = (b'{"id":"chatcmpl-' + uuid.uuid4().hex.encode()
                       + b'","object":"chat.completion.chunk","created":%d,"model":"%s",'
                       % (CREATED, conn.server.model.encode()))
        self.stamps: list[int] = []

    def event(self, payload: bytes) -> bytes:
        data = b"data: " + payload + b"\n\n"
        return b"%x\r\n%s\r\n" % (len(data), data)

    def content(self, text: bytes, finish: bytes) -> bytes:
        return self.event(self.prefix + b'"choices":[{"index":0,"delta":{"content":"' + text
                          + b'"},"logprobs":null,"finish_reason":' + finish + b"}]}")

    def step(self) -> bool:
        """Write this stream's next event(s); True when the stream has ended."""
        out = []
        if self.sent == 0:
            out.append(self.event(self.prefix + b'"choices":[{"index":0,"delta":{"role":'
                                  b'"assistant","content":""},"logprobs":null,'
                                  b'"finish_reason":null}]}'))
        self.left -= 1
        self.sent += 1
        finish = b'"length","stop_reason":null' if self.left == 0 else b"null"
        out.append(self.content(b" the" if self.sent % 2 else b" river", finish))
        if self.left == 0:
            usage = {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.tokens,
                     "total_tokens": self.prompt_tokens + self.tokens,
                     "prompt_tokens_details": {"cached_tokens": 0}}
            out.append(self.event(self.prefix + b'"choices":[],"usage":'
                                  + json.dumps(usage, separators=(",", ":")).encode() + b"}"))
            out.append(self.event(b"[DONE]"))
            out.append(b"0\r\n\r\n")
        self.stamps.append(time.perf_counter_ns())
        self.conn.transport.write(b"".join(out))
        return self.left == 0


class Connection(asyncio.Protocol):
    def __init__(self, server: StubServer) -> None:
        self.server = server
        self.buffer = b""
        self.paused = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end].decode("latin-1").split("\r\n")
            headers = dict(line.lower().split(":", 1) for line in head[1:] if ":" in line)
            length = int(headers.get("content-length", "0"))
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4:end + 4 + length]
            self.buffer = self.buffer[end + 4 + length:]
            method, path = head[0].split(" ")[:2]
            self.server.handle(self, method, path, body)

    def respond(self, status: str, body: bytes, content_type: str = "application/json") -> None:
        self.transport.write(b"HTTP/1.1 %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s"
                             % (status.encode(), content_type.encode(), len(body), body))


class StubServer:
    # What a POST streams; a subclass may keep more per request (stepped_server.py).
    stream_class = Stream

    def __init__(self, model: str, step_s: float) -> None:
        self.model = model
        self.step_s = step_s
        self.streams: list[Stream] = []
        self.stamps: dict[str, list[int]] = {}
        self.wake = asyncio.Event()

    def handle(self, conn: Connection, method: str, path: str, body: bytes) -> None:
        if method == "GET" and path == "/health":
            conn.respond("200 OK", b"{}")
        elif method == "GET" and path == "/stamps":
            stamps, self.stamps = self.stamps, {}
            conn.respond("200 OK", json.dumps(stamps).encode())
        elif method == "POST" and path == "/v1/chat/completions":
            request = json.loads(body)
            text = request["messages"][-1]["content"]
            conn.transport.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                                 b"transfer-encoding: chunked\r\n\r\n")
            self.streams.append(self.stream_class(conn, text.split()[0],
                                                  int(request["max_tokens"]),
                                                  len(text.split())))
            self.wake.set()
        else:
            conn.respond("404 Not Found", b'{"error": "not found"}')

    async def step_loop(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time()
        while True:
            if not self.streams:
                self.wake.clear()
                await self.wake.wait()
                deadline = loop.time()
            self.stepping()
            wrote = False
            for stream in list(self.streams):
                if stream.conn.transport.is_closing():  # the client went away mid-stream
                    self.streams.remove(stream)
                    self.ended(stream, complete=False)
                elif not stream.conn.paused:  # a full socket buffer skips this step
                    wrote = True
                    if stream.step():
                        self.streams.remove(stream)
                        self.ended(stream, complete=True)
            deadline = max(deadline + self.step_s, loop.time())
            # nothing writable: every client is behind, give them a moment
            await asyncio.sleep(deadline - loop.time() if wrote else max(self.step_s, 0.0002))

    def stepping(self) -> None:
        """A step begins (a subclass's bookkeeping)."""

    def ended(self, stream: Stream, complete: bool) -> None:
        """A stream has left the step loop: written to its end, or its client went away."""
        if complete:
            self.stamps[stream.key] = stream.stamps


async def serve(host: str, port: int, model: str, step_s: float,
                server_class: type[StubServer] = StubServer, backlog: int = 1024) -> None:
    server = server_class(model, step_s)
    loop = asyncio.get_running_loop()
    listener = await loop.create_server(lambda: Connection(server), host, port,
                                        backlog=backlog)
    async with listener:
        await server.step_loop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--model", default="sim-model")
    parser.add_argument("--step-ms", type=float, default=0.0,
                        help="time between steps (0: as fast as it can)")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.host, args.port, args.model, args.step_ms / 1000))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
