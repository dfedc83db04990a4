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
from benchledger.simulator.engine import VERSION, Engine, SimConfig, log_line


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
    d = SimConfig()
    p = argparse.ArgumentParser(
        prog="benchledger simulator",
        description="vLLM-like OpenAI-compatible server with simulated speculative decoding "
                    "and automatic prefix caching.")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--model", default=d.model)
    p.add_argument("--seed", type=int, default=d.seed,
                   help="draws the per-process speed factor (one seed = one 'instance')")
    p.add_argument("--speculative", action=argparse.BooleanOptionalAction,
                   default=d.speculative)
    p.add_argument("--num-speculative-tokens", type=int, default=d.num_speculative_tokens)
    p.add_argument("--step-ms", type=float, default=d.step_ms)
    p.add_argument("--spec-step-overhead", type=float, default=d.spec_step_overhead)
    p.add_argument("--prefill-tok-s", type=float, default=d.prefill_tok_s)
    p.add_argument("--batch-penalty", type=float, default=d.batch_penalty)
    p.add_argument("--max-num-seqs", type=int, default=d.max_num_seqs)
    p.add_argument("--speed-spread", type=float, default=d.speed_spread)
    p.add_argument("--no-usage", dest="usage", action="store_false",
                   help="never report usage (models a server without usage reporting)")
    p.add_argument("--acceptance-code", type=float, default=d.acceptance_code)
    p.add_argument("--acceptance-prose", type=float, default=d.acceptance_prose)
    p.add_argument("--log-interval-s", type=float, default=d.log_interval_s,
                   help="seconds between throughput log lines; fractions work (e.g. 0.25)")
    p.add_argument("--startup-delay-s", type=float, default=d.startup_delay_s)
    p.add_argument("--max-model-len", type=int, default=d.max_model_len)
    p.add_argument("--eos-rate", type=float, default=d.eos_rate,
                   help="fraction of prompts whose answer ends early (finish_reason 'stop')")
    p.add_argument("--prefix-cache", action=argparse.BooleanOptionalAction,
                   default=d.prefix_cache,
                   help="automatic prefix caching, on by default like vLLM v1: cached full "
                        "prompt blocks are not prefilled again (--no-prefix-cache: off)")
    p.add_argument("--prefix-block-tokens", type=int, default=d.prefix_block_tokens,
                   help="tokens per prefix-cache block (vLLM's --block-size)")
    p.add_argument("--prefix-cache-max-blocks", type=int, default=d.prefix_cache_max_blocks,
                   help="LRU cap on cached blocks")
    p.add_argument("--stall-every", type=int, default=d.stall_every, metavar="N",
                   help="models a hung request (for drain tests): every Nth request admitted "
                        "since start (N, 2N, ...) stops after its first chunk and emits "
                        "nothing for --stall-s seconds while staying running, then goes on; "
                        "a client disconnect aborts it. 0 (default): off")
    p.add_argument("--stall-s", type=float, default=d.stall_s,
                   help="how long a stalled request hangs (default %(default)s)")
    clocks = p.add_argument_group(
        "pretend GPU clocks", "GET /clocks answers like nvidia-smi --query-gpu=index,"
        "clocks.sm,clocks.max.sm,pstate,clocks_throttle_reasons.active,utilization.gpu: "
        "load clocks (P0, 100% utilization) while any request is in the engine, idle clocks "
        "(P8, 0%) otherwise; throttle reasons are always none")
    clocks.add_argument("--num-gpus", type=int, default=d.num_gpus, metavar="N",
                        help="GPUs listed by /clocks (default %(default)s)")
    clocks.add_argument("--sm-clock-mhz", type=int, default=d.sm_clock_mhz,
                        help="SM clock under load (default %(default)s)")
    clocks.add_argument("--max-sm-clock-mhz", type=int, default=d.max_sm_clock_mhz,
                        help="max SM clock (default %(default)s)")
    clocks.add_argument("--idle-sm-clock-mhz", type=int, default=d.idle_sm_clock_mhz,
                        help="SM clock when idle (default %(default)s)")
    clocks.add_argument("--low-clock", action="store_true", default=d.low_clock,
                        help="models a node stuck at a low clock with no throttle reason "
                             "reported: under load GPU 0 stays at --low-clock-mhz and every "
                             "step (decode and prefill) takes sm-clock / low-clock times "
                             "longer (about 4.9x with the defaults)")
    clocks.add_argument("--low-clock-mhz", type=int, default=d.low_clock_mhz,
                        help="GPU 0's clock under load with --low-clock (default %(default)s)")
    p.add_argument("--metrics-generation-scale", type=float,
                   default=d.metrics_generation_scale, metavar="F",
                   help="models a server whose counters disagree with what it delivered: "
                        "/metrics reports vllm:generation_tokens_total as the true count "
                        "times F, rounded (1.10 over-counts by 10%%, 0.9 under-counts); "
                        "usage and log lines stay true (default %(default)s)")
    return p


def config_from_args(args: argparse.Namespace) -> SimConfig:
    names = {f.name for f in dataclasses.fields(SimConfig)}
    return SimConfig(**{k: v for k, v in vars(args).items() if k in names})


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
