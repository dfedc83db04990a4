"""A tiny OpenAI-compatible streaming server with faults, run as its own process.

Used where the behaviour under test is about a server *process* (a command arm that dies
mid-window, readiness of a real listening socket):

    python tests/fault_server.py --port PORT [--die-in-stream N] [--sicken-in-stream N]
                                 [--health-status CODE] [--models-status CODE]
                                 [--require-key-env NAME] [--argv-file PATH]

- every streamed request answers 6 content events and usage (completion_tokens 6);
  GET /metrics answers a small Prometheus page;
- --die-in-stream N: the whole process exits (os._exit(17)) after the 3rd event of the
  N-th streamed request, with the connection open (what a crashing engine looks like);
- --sicken-in-stream N: the process stays, but from the middle of the N-th stream on
  every answer is 503 (an API server whose engine died under it);
- --health-status / --models-status: what GET /health and GET /v1/models answer;
- --require-key-env NAME: /v1/* and /metrics need `Authorization: Bearer $NAME` (401
  otherwise), and the server is careless with the key: it logs it and echoes it in
  /v1/models and /metrics (what redaction must survive);
- --argv-file: writes sys.argv (JSON) there first (what the process really received).

serve_in_thread() runs the same server in a thread of the test process. It shares no code
with benchledger's client or simulator: only the standard library.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

EVENTS = 6


def _sse(payload) -> bytes:
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n".encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *args):
        pass

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _key(self) -> str | None:
        name = self.server.options.require_key_env
        return os.environ.get(name) if name else None

    def _authorized(self) -> bool:
        """Checks the key where the server wants one; answers 401 when it is wrong."""
        key = self._key()
        if key is None or not self.path.startswith(("/v1/", "/metrics")):
            return True
        sent = self.headers.get("Authorization")
        print(f"fault_server: {self.command} {self.path} with Authorization: {sent}", flush=True)
        if sent == f"Bearer {key}":
            return True
        self._answer(401, {"error": "invalid api key"})
        return False

    def do_GET(self):  # noqa: N802 (http.server's naming)
        options = self.server.options
        if not self._authorized():
            return
        if self.server.sick:
            self._answer(503, {"error": "engine dead"})
        elif self.path == "/health":
            self._answer(options.health_status, {"path": self.path})
        elif self.path == "/v1/models":
            self._answer(options.models_status, {"data": [{
                "id": "fault-model", "owned_by": f"key {self._key()}"}]})
        elif self.path == "/metrics":
            text = (f"# HELP fault_requests_total requests (key {self._key()})\n"
                    "# TYPE fault_requests_total counter\n"
                    f"fault_requests_total {self.server.streams}\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)
        else:
            self._answer(404, {"error": "not found"})

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not self._authorized():
            return
        if self.server.sick:
            self._answer(503, {"error": "engine dead"})
            return
        with self.server.lock:
            self.server.streams += 1
            number = self.server.streams
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i in range(EVENTS):
            last = i == EVENTS - 1
            self.wfile.write(_sse({"choices": [{"index": 0, "delta": {"content": f" t{i}"},
                                                "finish_reason": "length" if last else None}]}))
            self.wfile.flush()
            time.sleep(0.005)
            if i == 2 and number == self.server.options.die_in_stream:
                print(f"fault_server: dying in the middle of stream {number}", flush=True)
                os._exit(17)
            if i == 2 and number == self.server.options.sicken_in_stream:
                print(f"fault_server: engine dead in the middle of stream {number}",
                      flush=True)
                self.server.sick = True
                return
        self.wfile.write(_sse({"choices": [], "usage": {
            "prompt_tokens": 9, "completion_tokens": EVENTS, "total_tokens": 9 + EVENTS}}))
        self.wfile.write(_sse("[DONE]"))


def parse_options(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--die-in-stream", type=int, default=0)
    parser.add_argument("--sicken-in-stream", type=int, default=0)
    parser.add_argument("--health-status", type=int, default=200)
    parser.add_argument("--models-status", type=int, default=200)
    parser.add_argument("--require-key-env")
    parser.add_argument("--argv-file")
    options, _ = parser.parse_known_args(argv)
    return options


def make_server(options: argparse.Namespace) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", options.port), Handler)
    server.daemon_threads = True
    server.options = options
    server.streams = 0
    server.sick = False
    server.lock = threading.Lock()
    return server


def serve_in_thread(*flags: str) -> tuple[ThreadingHTTPServer, str]:
    """The server in a daemon thread of this process (the caller shuts it down); a
    --die-in-stream here would end the test process, so it is refused."""
    options = parse_options(list(flags))
    if options.die_in_stream:
        raise ValueError("--die-in-stream needs a server process of its own")
    server = make_server(options)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def main(argv: list[str] | None = None) -> None:
    options = parse_options(sys.argv[1:] if argv is None else argv)
    if options.argv_file:
        with open(options.argv_file, "w") as out:
            json.dump(sys.argv, out)
    server = make_server(options)
    print(f"fault_server: listening on {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
