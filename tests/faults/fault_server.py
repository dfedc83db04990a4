"""An OpenAI-compatible streaming server that misbehaves on purpose, for the fault suite.

    python -m tests.faults.fault_server --port N --mode MODE [--every K | --nth 1,4]
    python tests/faults/fault_server.py ...            (the same; it needs only the stdlib)

Serves GET /health and GET /v1/models, and streams POST /v1/chat/completions and
/v1/completions as server-sent events (with a `usage` event when the request asks for
`stream_options.include_usage`). It has no /metrics: like a server without counters, so
nothing but the rules can catch a lie in its usage.

Every POST to a completions endpoint is numbered from 1 in arrival order (warm-up
included; GETs are not counted). The mode's fault hits the requests picked by `--nth`
(a list of those numbers) or else every `--every`-th one; the other requests are served
cleanly. Modes that are about the server as a whole (health-*) hit everything, `clean`
nothing. A clean stream is OUTPUT_WORDS content events of one word each (fewer when
max_tokens is smaller), the last carrying finish_reason, then usage, then [DONE]; its
usage says prompt_tokens = the prompt's words and completion_tokens = the words sent.

It deliberately shares no code with benchledger (client or simulator): a parsing bug in
benchledger cannot then hide in the server that tests it.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

OUTPUT_WORDS = 8
EVENT_GAP_S = 0.005  # between content events, so timings are positive and ordered
# A hung stream still ends some day: no wait in the test machinery is unbounded.
HANG_BOUND_S = 600.0
# Content events sent before a mid-stream fault (exit, reset, odd event) strikes.
EVENTS_BEFORE_FAULT = 2
ABSURD_TOKENS = 10**9
# usage-non-integer: the values it cycles through, one per affected request.
NON_INTEGER_COUNTS = (True, 1.5, "7")

MODES = {
    "clean": "no fault: every request streams cleanly",
    "exit-mid-stream": "the process exits (status 3) in the middle of an affected stream",
    "hang": "200 and SSE headers, then no byte at all until the client goes away",
    "garbage-line": "a line that is no SSE field, then `data:` with text that is not JSON",
    "truncated-json": "an event whose JSON object is cut off in the middle",
    "non-utf8-byte": "an event whose content holds the bytes 0xff 0xfe (not UTF-8)",
    "no-done": "content events, then the connection closes: no finish_reason, usage or "
               "[DONE]",
    "http-429": "answers 429 Too Many Requests (Retry-After: 1)",
    "http-500": "answers 500 Internal Server Error",
    "http-503": "answers 503 Service Unavailable",
    "reset": "the connection is reset (TCP RST) in the middle of the stream",
    "usage-negative": "usage.completion_tokens is minus the tokens sent",
    "usage-absurd": f"usage.completion_tokens is {ABSURD_TOKENS} (10**9)",
    "usage-non-integer": "usage.completion_tokens is true, 1.5 and \"7\" in turn",
    "usage-over-max": "usage.completion_tokens is max_tokens + 5",
    "usage-no-prompt": "usage has no prompt_tokens",
    "data-42": "an event `data: 42` (valid JSON, not an object)",
    "choices-str": "an event whose choices is [\"x\"] (a string, not an object)",
    "health-404": "every GET (/health, /v1/models, ...) answers 404",
    "health-401": "every request answers 401 (an API key is missing or wrong)",
}
WHOLE_SERVER_MODES = {"clean", "health-404", "health-401"}
HTTP_ERRORS = {"http-429": (429, "rate limited"), "http-500": (500, "engine exploded"),
               "http-503": (503, "overloaded, try later")}
MID_STREAM_EVENTS = {
    "garbage-line": b"GARBAGE \x01 not an sse field\n"
                    b"data: <html><body>502 Bad Gateway</body></html>\n\n",
    "truncated-json": b'data: {"choices": [{"index": 0, "delta": {"cont\n\n',
    "non-utf8-byte": b'data: {"choices": [{"index": 0, "delta": {"content": " \xff\xfe"}, '
                     b'"finish_reason": null}]}\n\n',
    "data-42": b"data: 42\n\n",
    "choices-str": b'data: {"choices": ["x"]}\n\n',
}


def log(message: str) -> None:
    """One line to stdout: the server's log (benchledger keeps it as server.log)."""
    print(f"[fault-server {os.getpid()}] {message}", flush=True)


class FaultPlan:
    """Which numbered requests the mode hits; thread-safe numbering of requests."""

    def __init__(self, mode: str, every: int, nth: set[int] | None):
        self.mode, self.every, self.nth = mode, every, nth
        self._lock = threading.Lock()
        self._count = 0
        self._hits = 0

    def next_request(self) -> tuple[int, int | None]:
        """(this request's number, its ordinal among affected requests or None)."""
        with self._lock:
            self._count += 1
            number = self._count
            if self.mode == "clean" or not self._affects(number):
                return number, None
            self._hits += 1
            return number, self._hits - 1

    def _affects(self, number: int) -> bool:
        if self.mode in WHOLE_SERVER_MODES:
            return True
        return number in self.nth if self.nth else number % self.every == 0


def sse(payload) -> bytes:
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n".encode()


def content_event(chat: bool, text: str, finish: str | None) -> dict:
    if chat:
        return {"object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
    return {"object": "text_completion",
            "choices": [{"index": 0, "text": text, "finish_reason": finish}]}


def usage_for(mode: str, ordinal: int | None, prompt_tokens: int, sent: int,
              max_tokens: int) -> dict:
    """The usage event's numbers: honest, unless this request is hit by a usage mode."""
    completion = sent
    if ordinal is not None:
        completion = {
            "usage-negative": -sent,
            "usage-absurd": ABSURD_TOKENS,
            "usage-non-integer": NON_INTEGER_COUNTS[ordinal % len(NON_INTEGER_COUNTS)],
            "usage-over-max": max_tokens + 5,
        }.get(mode, sent)
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion}
    if isinstance(completion, int) and not isinstance(completion, bool):
        usage["total_tokens"] = prompt_tokens + completion
    if ordinal is not None and mode == "usage-no-prompt":
        del usage["prompt_tokens"]
    return usage


class FaultHandler(BaseHTTPRequestHandler):
    # HTTP/1.0: a stream ends when the connection closes, as in many small servers.
    protocol_version = "HTTP/1.0"
    server: FaultServer

    def log_message(self, format, *args):  # noqa: A002 (http.server's signature)
        log(f"{self.command} {self.path} -> " + (format % args))

    # -- helpers ----------------------------------------------------------------------
    def _json(self, status: int, payload: dict, headers: dict | None = None) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str, headers: dict | None = None) -> None:
        self._json(status, {"error": {"message": message, "code": status}}, headers)

    def _write(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()

    def _reset_connection(self) -> None:
        """Close with SO_LINGER 0: the kernel answers with a TCP RST, not a FIN."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True

    def _hang(self) -> None:
        """Say nothing until the client closes the connection (or HANG_BOUND_S)."""
        deadline = time.monotonic() + HANG_BOUND_S
        while time.monotonic() < deadline:
            readable, _, _ = select.select([self.connection], [], [], 0.5)
            if readable and not self.connection.recv(1, socket.MSG_PEEK):
                return  # the client went away
        log(f"hang: gave up after {HANG_BOUND_S:g} s")

    # -- GET --------------------------------------------------------------------------
    def do_GET(self):  # noqa: N802 (http.server's naming)
        mode = self.server.plan.mode
        if mode == "health-401":
            return self._error(401, "invalid or missing API key")
        if mode == "health-404":
            return self._error(404, f"no route {self.path}")
        if self.path == "/health":
            return self._json(200, {"status": "ok"})
        if self.path == "/v1/models":
            return self._json(200, {"object": "list", "data": [
                {"id": self.server.model, "object": "model", "owned_by": "fault-server"}]})
        return self._error(404, f"no route {self.path}")

    # -- POST -------------------------------------------------------------------------
    def do_POST(self):  # noqa: N802 (http.server's naming)
        if self.path not in ("/v1/chat/completions", "/v1/completions"):
            return self._error(404, f"no route {self.path}")
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        except (ValueError, json.JSONDecodeError) as exc:
            return self._error(400, f"request body is not JSON: {exc}")
        number, ordinal = self.server.plan.next_request()
        mode = self.server.plan.mode
        hit = ordinal is not None
        log(f"request {number}: {'fault ' + mode if hit else 'clean'}")
        if hit and mode == "health-401":
            return self._error(401, "invalid or missing API key")
        if hit and mode in HTTP_ERRORS:
            status, message = HTTP_ERRORS[mode]
            return self._error(status, message, {"Retry-After": "1"} if status == 429 else None)
        self._stream(body, self.path.endswith("/chat/completions"), mode if hit else "clean",
                     ordinal)
        return None

    def _stream(self, body: dict, chat: bool, mode: str, ordinal: int | None) -> None:
        prompt = (" ".join(str(m.get("content", "")) for m in body.get("messages") or [])
                  if chat else str(body.get("prompt", "")))
        max_tokens = int(body.get("max_tokens") or OUTPUT_WORDS)
        words = min(OUTPUT_WORDS, max_tokens)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self.wfile.flush()
        if mode == "hang":
            return self._hang()
        if chat:
            self._write(sse({"object": "chat.completion.chunk", "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ""},
                 "finish_reason": None}]}))
        for i in range(words):
            if i == EVENTS_BEFORE_FAULT and self._strike_mid_stream(mode):
                return None
            last = i == words - 1 and mode != "no-done"
            finish = ("length" if words == max_tokens else "stop") if last else None
            self._write(sse(content_event(chat, f" w{i}", finish)))
            time.sleep(EVENT_GAP_S)
        if mode == "no-done":
            return None  # the connection closes: no finish_reason, usage or [DONE]
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = usage_for(mode, ordinal, max(1, len(prompt.split())), words, max_tokens)
            self._write(sse({"object": "chat.completion.chunk" if chat else "text_completion",
                             "choices": [], "usage": usage}))
        self._write(sse("[DONE]"))
        return None

    def _strike_mid_stream(self, mode: str) -> bool:
        """Inject the mode's mid-stream fault; True when the stream must end here."""
        if mode == "exit-mid-stream":
            log("exit-mid-stream: exiting now, in the middle of a stream")
            os._exit(3)
        if mode == "reset":
            self._reset_connection()
            return True
        if mode in MID_STREAM_EVENTS:
            self._write(MID_STREAM_EVENTS[mode])
        return False


class FaultServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, plan: FaultPlan, model: str):
        super().__init__(address, FaultHandler)
        self.plan, self.model = plan, model


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.fault_server",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", required=True, choices=sorted(MODES),
                        help="; ".join(f"{name}: {what}" for name, what in MODES.items()))
    parser.add_argument("--every", type=int, default=3,
                        help="the fault hits every K-th request (1-based; default 3)")
    parser.add_argument("--nth", default=None,
                        help="comma-separated request numbers the fault hits (overrides "
                             "--every), e.g. 1,6")
    parser.add_argument("--model", default="fault-model")
    parser.add_argument("--tag", default="",
                        help="any text; lets a test find its servers in the process table")
    args = parser.parse_args(argv)
    if args.every < 1:
        parser.error(f"--every must be >= 1 (got {args.every})")
    try:
        args.nth = {int(n) for n in args.nth.split(",")} if args.nth else None
    except ValueError:
        parser.error(f"--nth must be comma-separated integers (got {args.nth!r})")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    server = FaultServer((args.host, args.port), FaultPlan(args.mode, args.every, args.nth),
                         args.model)
    log(f"serving on {args.host}:{args.port}, mode {args.mode} "
        f"({'requests ' + str(sorted(args.nth)) if args.nth else f'every {args.every}'})")
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
