"""An OpenAI-compatible streaming server that misbehaves on purpose, for the fault tests.

    python -m tests.faults.fault_server --port N --mode MODE [--every K | --nth 1,4]
        [--metrics] [--metrics-delay-s S] [--health-status CODE] [--models-status CODE]
        [--require-key-env NAME] [--argv-file PATH] [--tag T]
    python tests/faults/fault_server.py ...            (the same; it needs only the stdlib)

    server, base_url = serve_in_thread("--mode", "clean", ...)   (in a test's own process)

Serves GET /health and GET /v1/models, and streams POST /v1/chat/completions and
/v1/completions as server-sent events (with a `usage` event when the request asks for
`stream_options.include_usage`). Without --metrics it has no /metrics: like a server
without counters, so nothing but the rules can catch a lie in its usage.

Every POST to a completions endpoint is numbered from 1 in arrival order (warm-up
included; GETs, POSTs refused for their API key or a body that is not JSON, and the
preflight probe `benchledger run` sends an external server, answered clean, are not
counted). The mode's fault hits the requests picked by `--nth` (a list of those numbers)
or else every `--every`-th one; the other requests are served cleanly. Modes that are
about the server as a whole (health-*) hit everything, `clean` nothing. A clean stream is
OUTPUT_WORDS content events of one word each (fewer when max_tokens is smaller), the last
carrying finish_reason, then usage, then [DONE]; its usage says prompt_tokens = the
prompt's words and completion_tokens = the words sent.

Modes (MODES below; `--help` lists them too):

- clean: no fault;
- exit-mid-stream: the whole process exits (status EXIT_STATUS, 3) in the middle of an
  affected stream, with the connection open (what a crashing engine looks like);
- sicken-mid-stream: the process stays up, but the affected stream stops in the middle
  and from then on every request (GET or POST) answers 503 (an API server whose engine
  died under it);
- hang: 200 and SSE headers, then no byte at all until the client goes away;
- garbage-line, truncated-json, non-utf8-byte, data-42, choices-str: one malformed event
  in the middle of the stream; no-done: the stream ends without finish_reason, usage or
  [DONE]; reset: a TCP RST in the middle of the stream;
- http-429, http-500, http-503: that status instead of a stream;
- usage-negative, usage-absurd, usage-non-integer, usage-over-max, usage-no-prompt,
  usage-below-events: a usage event that cannot be true;
- health-404: every GET answers 404; health-401: every request answers 401;
- stall-burst: nothing for STALL_S, then the first content event and, right after it,
  every other event, the usage and [DONE] in one write (an API server that stalled while
  its engine ran on: a slow first token, then the whole answer at once, over which a
  per-request decode rate means nothing);
- buffered: the whole answer (every event, the usage and [DONE]) in one write after the
  headers, as a proxy that buffers whole responses delivers it: the client reads it in
  one read;
- bom: the stream opens with a UTF-8 byte order mark (EF BB BF), alone in its first write
  (the SSE format says one leading BOM is ignored);
- long-line: after EVENTS_BEFORE_FAULT content events, one comment line of LONG_LINE_BYTES
  (15 MB; below the client's 16 MiB bound), then the rest of a clean stream.
- interrupt (the whole server): llama-cpp-python's default behaviour (its
  `interrupt_requests`): when a request arrives, every stream in progress ends with
  `data: [DONE]` and nothing else (no finish_reason, no usage). At concurrency > 1 nearly
  every stream is cut by the next one's arrival.

Options that hold whatever the mode:

- --metrics: GET /metrics answers a small Prometheus page (fault_requests_total, the POSTs
  numbered so far); --metrics-delay-s S: it waits S seconds before answering (a /metrics
  slower than the scrape's bound: the counters exist but cannot be read);
- --health-status CODE / --models-status CODE: what GET /health and GET /v1/models answer
  (default 200) when the mode does not decide it (health-*, a sickened server);
- --require-key-env NAME: /v1/* and /metrics need `Authorization: Bearer $NAME` (401
  otherwise; NAME must be set where the server starts). The server is careless with the
  key: it logs the Authorization header it got and echoes the key in /v1/models
  (owned_by "key ...") and /metrics (what redaction must survive);
- --argv-file PATH: writes the process's sys.argv there (JSON) before serving: what the
  process really received;
- --first-event-ms MS: each stream waits this long before its first content event (a
  prefill; default 0);
- --tag T: any text, so a test can find its servers in the process table.

serve_in_thread() runs the same server in a daemon thread of the calling process (for unit
tests; exit-mid-stream would end that process and is refused there).

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
# Content events sent before a mid-stream fault (exit, sickness, reset, odd event) strikes.
EVENTS_BEFORE_FAULT = 2
STALL_S = 0.3  # stall-burst: how long the affected stream says nothing before its first event
EXIT_STATUS = 3  # exit-mid-stream's exit status
ABSURD_TOKENS = 10**9
LONG_LINE_BYTES = 15_000_000  # long-line: the comment line's length, its ": " included
BOM = b"\xef\xbb\xbf"
# usage-non-integer: the values it cycles through, one per affected request.
NON_INTEGER_COUNTS = (True, 1.5, "7")

MODES = {
    "clean": "no fault: every request streams cleanly",
    "exit-mid-stream": f"the process exits (status {EXIT_STATUS}) in the middle of an "
                       "affected stream",
    "sicken-mid-stream": "the process stays up, but the affected stream stops in the middle "
                         "and from then on every request answers 503",
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
    "usage-below-events": "usage.completion_tokens is 1, whatever the text events sent",
    "data-42": "an event `data: 42` (valid JSON, not an object)",
    "choices-str": "an event whose choices is [\"x\"] (a string, not an object)",
    "health-404": "every GET (/health, /v1/models, ...) answers 404",
    "health-401": "every request answers 401 (an API key is missing or wrong)",
    "stall-burst": f"{STALL_S} s of silence, then the first content event and the rest of "
                   "the answer in one write",
    "buffered": "the whole answer in one write (a proxy that buffers whole responses)",
    "bom": "the stream opens with a UTF-8 byte order mark",
    "long-line": f"a comment line of {LONG_LINE_BYTES} bytes in the middle of the stream",
    "interrupt": "llama-cpp-python's default (interrupt_requests): a request that arrives "
                 "ends the stream in progress with `data: [DONE]`, no finish_reason, no "
                 "usage",
}
WHOLE_SERVER_MODES = {"clean", "health-404", "health-401", "interrupt"}
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

    @property
    def requests(self) -> int:
        """How many requests were numbered so far."""
        with self._lock:
            return self._count

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
            "usage-below-events": 1,
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

    def _authorized(self) -> bool:
        """Whether the request may go on: True unless the server wants a key on this path
        and did not get it (then it has answered 401). It logs the Authorization header it
        got, key and all: a careless server, whose log benchledger must redact."""
        key = self.server.api_key
        if key is None or not self.path.startswith(("/v1/", "/metrics")):
            return True
        sent = self.headers.get("Authorization")
        log(f"{self.command} {self.path} with Authorization: {sent}")
        if sent == f"Bearer {key}":
            return True
        self._error(401, "invalid or missing API key")
        return False

    def _status_answer(self, status: int, payload: dict, option: str) -> None:
        """`payload` for a 2xx status, else an error naming the option that chose it."""
        if 200 <= status < 300:
            return self._json(status, payload)
        return self._error(status, f"{self.path} answers {status} ({option})")

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
        if not self._authorized():
            return None
        if self.server.sick.is_set():
            return self._error(503, "engine dead (the server stays up, serving nothing)")
        options = self.server.options
        if self.path == "/health":
            return self._status_answer(options.health_status, {"status": "ok"},
                                       "--health-status")
        if self.path == "/v1/models":
            key = self.server.api_key
            owner = f"key {key}" if key is not None else "fault-server"
            return self._status_answer(options.models_status, {"object": "list", "data": [
                {"id": options.model, "object": "model", "owned_by": owner}]},
                "--models-status")
        if self.path == "/metrics" and options.metrics:
            return self._metrics()
        return self._error(404, f"no route {self.path}")

    def _metrics(self) -> None:
        if self.server.options.metrics_delay_s:
            time.sleep(self.server.options.metrics_delay_s)
        key = self.server.api_key
        about = "completion requests numbered" + (f" (key {key})" if key is not None else "")
        body = (f"# HELP fault_requests_total {about}\n"
                "# TYPE fault_requests_total counter\n"
                f"fault_requests_total {self.server.plan.requests}\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    # -- POST -------------------------------------------------------------------------
    def do_POST(self):  # noqa: N802 (http.server's naming)
        if self.path not in ("/v1/chat/completions", "/v1/completions"):
            return self._error(404, f"no route {self.path}")
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        except (ValueError, json.JSONDecodeError) as exc:
            return self._error(400, f"request body is not JSON: {exc}")
        if not self._authorized():
            return None
        if self.headers.get("X-Request-Id", "").startswith("preflight/"):
            # `benchledger run`'s probe of an external server (benchledger.client.probe):
            # answered clean and not numbered, so --nth numbers the run's own requests
            self._stream(body, self.path.endswith("/chat/completions"), "clean", None)
            log("preflight probe: answered clean, not numbered")
            return None
        number, ordinal = self.server.plan.next_request()
        mode = self.server.plan.mode
        hit = ordinal is not None
        if self.server.sick.is_set():
            log(f"request {number}: 503, the server is sick")
            return self._error(503, "engine dead (the server stays up, serving nothing)")
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
        if mode == "bom":
            self._write(BOM)
        buffered = mode == "buffered"
        ordinal_arrivals = self.server.plan.requests  # interrupt: arrivals so far
        # stall-burst and buffered: what waits for the one write at the end
        held: list[bytes] = []
        if chat:
            role = sse({"object": "chat.completion.chunk", "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ""},
                 "finish_reason": None}]})
            if buffered:
                held.append(role)
            else:
                self._write(role)
        time.sleep(self.server.options.first_event_ms / 1000
                   + (STALL_S if mode == "stall-burst" else 0.0))
        for i in range(words):
            if i == EVENTS_BEFORE_FAULT and self._strike_mid_stream(mode):
                return None
            if mode == "interrupt" and self.server.plan.requests != ordinal_arrivals:
                # a later request arrived: this stream ends as llama-cpp-python ends it
                log(f"interrupt: a newer request arrived; [DONE] after {i} event(s)")
                self._write(sse("[DONE]"))
                return None
            last = i == words - 1 and mode != "no-done"
            finish = ("length" if words == max_tokens else "stop") if last else None
            event = sse(content_event(chat, f" w{i}", finish))
            if buffered or (mode == "stall-burst" and i > 0):
                held.append(event)
                continue
            self._write(event)
            if mode != "stall-burst":
                time.sleep(EVENT_GAP_S)
        if mode == "no-done":
            return None  # the connection closes: no finish_reason, usage or [DONE]
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = usage_for(mode, ordinal, max(1, len(prompt.split())), words, max_tokens)
            held.append(sse({"object": "chat.completion.chunk" if chat else "text_completion",
                             "choices": [], "usage": usage}))
        self._write(b"".join([*held, sse("[DONE]")]))
        return None

    def _strike_mid_stream(self, mode: str) -> bool:
        """Inject the mode's mid-stream fault; True when the stream must end here."""
        if mode == "exit-mid-stream":
            log("exit-mid-stream: exiting now, in the middle of a stream")
            os._exit(EXIT_STATUS)
        if mode == "sicken-mid-stream":
            log("sicken-mid-stream: the engine is dead from now on; the server stays up")
            self.server.sick.set()
            return True  # the connection closes: no finish_reason, usage or [DONE]
        if mode == "reset":
            self._reset_connection()
            return True
        if mode in MID_STREAM_EVENTS:
            self._write(MID_STREAM_EVENTS[mode])
        if mode == "long-line":  # a comment: the format allows it, the reader must bound it
            self._write(b": " + b"x" * (LONG_LINE_BYTES - 3) + b"\n")
        return False


class FaultServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, options: argparse.Namespace):
        super().__init__((options.host, options.port), FaultHandler)
        self.options = options
        self.plan = FaultPlan(options.mode, options.every, options.nth)
        self.sick = threading.Event()  # set by sicken-mid-stream: 503 from then on
        # --require-key-env: the key every /v1/* and /metrics request must bear, or None.
        self.api_key = (os.environ[options.require_key_env] if options.require_key_env
                        else None)


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
    parser.add_argument("--metrics", action="store_true",
                        help="serve GET /metrics (a Prometheus page; none without it)")
    parser.add_argument("--metrics-delay-s", type=float, default=0.0, metavar="S",
                        help="GET /metrics waits this long before it answers (default 0)")
    parser.add_argument("--health-status", type=int, default=200, metavar="CODE",
                        help="what GET /health answers (default 200)")
    parser.add_argument("--models-status", type=int, default=200, metavar="CODE",
                        help="what GET /v1/models answers (default 200)")
    parser.add_argument("--require-key-env", metavar="NAME",
                        help="/v1/* and /metrics need `Authorization: Bearer $NAME` (401 "
                             "otherwise); the key is logged and echoed in /v1/models and "
                             "/metrics")
    parser.add_argument("--argv-file", metavar="PATH",
                        help="write the process's sys.argv there (JSON) before serving")
    parser.add_argument("--first-event-ms", type=float, default=0.0, metavar="MS",
                        help="how long a stream waits before its first content event "
                             "(a prefill; default 0)")
    parser.add_argument("--tag", default="",
                        help="any text; lets a test find its servers in the process table")
    args = parser.parse_args(argv)
    if args.every < 1:
        parser.error(f"--every must be >= 1 (got {args.every})")
    for option in ("health_status", "models_status"):
        if not 100 <= getattr(args, option) <= 599:
            parser.error(f"--{option.replace('_', '-')} must be an HTTP status (100-599)")
    if args.require_key_env and not os.environ.get(args.require_key_env):
        parser.error(f"--require-key-env {args.require_key_env}: that variable is not set")
    try:
        args.nth = {int(n) for n in args.nth.split(",")} if args.nth else None
    except ValueError:
        parser.error(f"--nth must be comma-separated integers (got {args.nth!r})")
    return args


def serve_in_thread(*flags: str) -> tuple[FaultServer, str]:
    """The server in a daemon thread of this process: (server, base_url). `flags` are the
    command line's; here --port defaults to 0 (a free port) and --mode to clean. The caller
    ends it: server.shutdown(); server.server_close(). Refused: exit-mid-stream (it would
    end this process) and --argv-file (this process's argv is not the server's)."""
    args = parse_args(["--port", "0", "--mode", "clean", *flags])
    if args.mode == "exit-mid-stream" or args.argv_file:
        raise ValueError("exit-mid-stream and --argv-file need a server process of its own")
    server = FaultServer(args)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                     daemon=True).start()
    return server, f"http://{args.host}:{server.server_address[1]}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.argv_file:
        with open(args.argv_file, "w") as out:
            json.dump(sys.argv, out)
    server = FaultServer(args)
    log(f"serving on {args.host}:{server.server_address[1]}, mode {args.mode} "
        f"({'requests ' + str(sorted(args.nth)) if args.nth else f'every {args.every}'})")
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
