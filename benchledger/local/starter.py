"""`benchledger init URL`: a sweep file for a server that is already running, written from
what the server says about itself, that `benchledger run` can publish from on this machine.

A new user's first sweep failed in ways each a line of the protocol explains, none of them
said before the run: no GPU clock readable here (every entry blocked), a server that streams
no usage (every entry blocked), a base_url ending in /v1, a model name the server does not
serve. Here each is asked of the server first, with the same code a run uses (the
preflight's reachability check, one probe request read by the client and judged by the
warm-up's rule, the readiness and /metrics probes of the server package), and the file
says what was found and what to change, in its comments.

The file is a Jinja2 template (templates/starter.toml.j2): comments belong beside the keys
they explain, which a TOML writer cannot place; every value goes through the `toml` filter
(a TOML basic string, escaped as JSON escapes it), and the result is read back with the
sweep's own parser before it is written, so what `init` writes is a sweep `run` accepts.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import jinja2
from pydantic import TypeAdapter, ValidationError

from benchledger.client.endpoint import EndpointName
from benchledger.client.probe import HEADER_REFUSED, count_problem, overlap_problem
from benchledger.client.target import Target, TokenCountName
from benchledger.server.lifecycle import probe_readiness
from benchledger.server.observe import bounded_get, detect_family, error_text
from benchledger.server.preflight import why_not_answering
from benchledger.sweep.spec import SweepError, parse_sweep
from benchledger.sweep.values import Name

TEMPLATE = "starter.toml.j2"
# What each token count is, in the file's comment beside it.
_COUNT_WHY = {
    "usage": "the server reports each streamed answer's usage",
    "logprobs": "the server streams no usage; its streamed logprobs list every token",
}
# Small enough for a CPU server to answer within a couple of minutes, large enough for the
# protocol's floors (15 requests per window and load point for a speculative arm).
STARTER_REQUESTS = 20
STARTER_MAX_TOKENS = 64


class StarterError(Exception):
    """The server cannot be measured as it is: why, and what to change."""


@dataclass
class Findings:
    """What the server said, each finding one line of the file's header."""

    base_url: str
    model: str = ""
    endpoint: EndpointName = "chat"
    token_count: TokenCountName = "usage"
    health_path: str | None = None  # None: /health answers (the default)
    request_id_header: bool = True  # False: the server refuses X-Request-Id (llama-cpp-python)
    concurrency: list[int] = field(default_factory=lambda: [1, 4])
    concurrency_why: str = ""  # why the load points are not the default's, when they are not
    clock_source: str = "none"
    clock_why: str = ""
    lines: list[str] = field(default_factory=list)


def server_root(url: str) -> tuple[str, str | None]:
    """The server's root from what a user may paste (`.../v1`, a trailing slash), and what
    was dropped, if anything."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise StarterError(f"{url!r} is not an http(s) URL of a server (e.g. "
                           "http://127.0.0.1:8000)")
    path = parts.path.rstrip("/")
    dropped = None
    if path.endswith("/v1"):
        path, dropped = path.removesuffix("/v1"), "/v1, which benchledger adds itself"
    return f"{parts.scheme}://{parts.netloc}{path}", dropped


def examine(url: str, model: str | None = None, api_key: str | None = None) -> Findings:
    """Ask the server at `url` what a sweep of it needs; StarterError when it cannot be
    measured as it is (unreachable, no model, no token count that works)."""
    base, dropped = server_root(url)
    found = Findings(base_url=base)
    if dropped:
        found.lines.append(f"base_url: {base} (dropped {dropped})")
    if (why := why_not_answering(base, "/health")) is not None:
        raise StarterError(why)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    found.model = _model(base, model, headers, found.lines)
    found.health_path = _health_path(base, api_key, found.lines)
    family, how = detect_family(base + "/metrics", headers)
    found.lines.append(f"/metrics: {family} counters ({how})" if family else
                       f"/metrics: no counters to reconcile with ({how}): entries say so")
    _token_count(found, api_key)
    _overlap(found, api_key)
    found.clock_source, found.clock_why = _clock()
    found.lines.append(f"GPU clock: {found.clock_why}")
    return found


def _model(base: str, asked: str | None, headers: dict[str, str] | None,
           lines: list[str]) -> str:
    """The model to ask for: `asked`, or the one /v1/models lists (the first of several)."""
    try:
        answer = bounded_get(base + "/v1/models", 10.0, headers, max_bytes=1_000_000)
        served = [str(m["id"]) for m in json.loads(answer.text).get("data", [])
                  if isinstance(m, dict) and "id" in m] if answer.status_code == 200 else []
    except Exception as exc:  # noqa: BLE001 (any failure: say it, let --model decide)
        served, answer_text = [], error_text(exc)
    else:
        answer_text = f"HTTP {answer.status_code}"
    if asked:
        lines.append(f"model: {asked} (--model; /v1/models lists "
                     f"{', '.join(served) or 'none: ' + answer_text})")
        return asked
    if not served:
        raise StarterError(f"{base}/v1/models lists no model ({answer_text}): name the model "
                           "to ask for with --model NAME")
    more = f"; it also lists {', '.join(served[1:])} (--model chooses)" if served[1:] else ""
    lines.append(f"model: {served[0]} (from /v1/models{more})")
    return served[0]


def _health_path(base: str, api_key: str | None, lines: list[str]) -> str | None:
    """None where /health answers 200 (the default health_path), else /v1/models: the
    readiness wait's own probe (lifecycle.probe_readiness) says which path answered."""
    probe = probe_readiness(base, "/health", time.monotonic() + 10.0, api_key)
    if probe.state == "ready" and probe.path == "/health":
        lines.append("readiness: /health answers 200")
        return None
    lines.append(f"readiness: {probe.detail}; /v1/models is asked instead")
    return "/v1/models"


def _token_count(found: Findings, api_key: str | None) -> None:
    """The first token count one probe request confirms, on the chat endpoint or else
    on completions; StarterError naming what each said when none does."""
    said = []
    endpoints: tuple[EndpointName, ...] = ("chat", "completions")
    counts: tuple[TokenCountName, ...] = ("usage", "logprobs")
    for endpoint in endpoints:
        for count in counts:
            target = _target(found, api_key, endpoint, count)
            problem = count_problem(target)
            if problem is not None and problem.startswith(HEADER_REFUSED):
                found.request_id_header = False
                found.lines.append(f"request ids: {problem.split(' (', 1)[0]}; requests "
                                   "are sent without it (request_id_header = false)")
                target = target.without_request_id_header()
                problem = count_problem(target)
            if problem is None:
                found.endpoint, found.token_count = endpoint, count
                found.lines.append(f"token count: {count} ({_COUNT_WHY[count]}; one probe "
                                   f"request to {target.endpoint.path})")
                return
            said.append(f"{endpoint}/{count}: {problem}")
            if "HTTP 404" in problem and "model" not in problem.lower():
                break  # no such endpoint: the other count will not find one either
    raise StarterError("no token count works on this server: " + "; ".join(said))


def _target(found: Findings, api_key: str | None, endpoint: EndpointName,
            count: TokenCountName) -> Target:
    return Target(base_url=found.base_url, model=found.model, endpoint=endpoint,
                  api_key=api_key, token_count=count, request_id_header=found.request_id_header)


def _overlap(found: Findings, api_key: str | None) -> None:
    """Load points of one request at a time where two requests sent together do not both
    complete (a server that cuts the stream in progress for the next), said why."""
    problem = overlap_problem(_target(found, api_key, found.endpoint, found.token_count))
    if problem is None:
        found.lines.append("two requests sent together both complete: concurrency [1, 4]")
        return
    found.concurrency = [1]
    found.concurrency_why = (f"{problem}. A server that cuts the stream in progress when "
                             "the next request arrives (llama-cpp-python's default) is "
                             "measured one request at a time; started with "
                             "--interrupt_requests False it can be measured at [1, 4]")
    found.lines.append(f"concurrency: [1] only ({problem})")


def _clock() -> tuple[str, str]:
    """nvidia-smi where it answers on this machine, else none (said why)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "none", "no nvidia-smi on this machine, no telemetry URL given"
    try:
        done = subprocess.run([smi, "--query-gpu=clocks.sm", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "none", f"nvidia-smi did not answer ({error_text(exc)})"
    if done.returncode != 0:
        return "none", f"nvidia-smi exited {done.returncode}"
    return "nvidia-smi", "nvidia-smi answers on this machine"


def sweep_text(found: Findings, file_name: str, name: str | None = None,
               api_key_env: str | None = None) -> str:
    """The sweep file for `found` (named `name`, else after its model), checked by the
    sweep's own parser."""
    if name is not None:
        try:
            TypeAdapter(Name).validate_python(name)
        except ValidationError:
            raise StarterError(f"--name {name!r}: a sweep's name is lowercase letters, digits, "
                               "'-' and '_', starting with a letter or digit, at most 63 "
                               "characters") from None
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("benchledger.local", "templates"),
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    # A TOML basic string: JSON's escaping is valid TOML (\" \\ \n \uXXXX)
    environment.filters["toml"] = lambda value: json.dumps(str(value), ensure_ascii=False)
    values: dict[str, Any] = {
        "written_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "base_url": found.base_url, "findings": [_comment(line) for line in found.lines],
        "file_name": file_name, "name": name or name_from(found.model),
        "description": f"{found.model} at {found.base_url}, as it runs (benchledger init)",
        "requests": STARTER_REQUESTS, "max_tokens": STARTER_MAX_TOKENS,
        "clock_source": found.clock_source, "clock_why": _comment(found.clock_why),
        "arm": name_from(found.model), "model": found.model, "endpoint": found.endpoint,
        "token_count": found.token_count, "token_count_why": _COUNT_WHY[found.token_count],
        "health_path": found.health_path, "api_key_env": api_key_env,
        "request_id_header": found.request_id_header, "concurrency": found.concurrency,
        "concurrency_why": _comment(found.concurrency_why)}
    text = environment.get_template(TEMPLATE).render(values)
    try:
        parse_sweep(text, file_name)
    except SweepError as exc:  # a bug here, not the user's: say so plainly
        raise StarterError(f"the sweep written for this server does not parse ({exc}); "
                           "please report it") from exc
    return text


def _comment(text: str) -> str:
    """One line of a TOML comment: no line breaks or control characters from a server."""
    return re.sub(r"[\x00-\x1f\x7f]", " ", text)


def name_from(model: str) -> str:
    """An arm or sweep name from a model id (`Qwen/Qwen3-8B` -> `qwen3-8b`)."""
    tail = model.rsplit("/", 1)[-1].lower()
    name = re.sub(r"[^a-z0-9_-]+", "-", tail).strip("-_")[:62]
    return name if name and name[0].isalnum() else f"server-{name}".strip("-")[:62] or "server"
