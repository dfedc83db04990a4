"""`benchledger`: demo, init, run, publish, sql, explain, compare, history, plan, import,
cluster, simulator (docs/protocol.md, command line).

argparse and one thin function per command; what a command does lives below it:
benchledger/local/run.py (run, demo), benchledger/local/starter.py (init), publishing/ (publish,
sql, explain), warehouse/ (compare, import), benchledger/cluster/commands.py (cluster). This
process never imports Airflow.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from benchledger.local.run import CliError, execute_on_cluster, execute_sweep, finish_run
from benchledger.sweep.spec import SweepError

REPO_ROOT = Path(__file__).resolve().parents[1]
BUNDLED_SWEEPS = REPO_ROOT / "dags" / "sweeps"
# The exit status of a command whose reader closed stdout: what a shell reports for a
# writer ended by SIGPIPE (`yes | head` under pipefail).
CLOSED_PIPE = 128 + signal.SIGPIPE


def cmd_run(args: argparse.Namespace) -> int:
    from benchledger.cluster.config import local_raw_base
    from benchledger.raw.records import storage_path
    from benchledger.raw.store import resolve

    cluster = Path(args.cluster).resolve() if args.cluster else None
    try:
        warehouse = storage_path(args.warehouse).resolve()
        # an object store's local copy: the deployment's on the head, else this user's
        storage = resolve(args.data_dir, local_base=local_raw_base(cluster) if cluster
                          else None) if args.data_dir else None
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    data_dir = storage.local if storage else None
    store_url = storage.store.url if storage and storage.store else None
    if cluster:
        outcome = execute_on_cluster(Path(args.sweep), warehouse, data_dir, cluster,
                                     store_url)
    else:
        outcome = execute_sweep(Path(args.sweep), warehouse, data_dir, publish=True,
                                store_url=store_url)
    return finish_run(outcome, warehouse, verbose=args.verbose)


def cmd_init(args: argparse.Namespace) -> int:
    """A sweep file for the server at URL, from what it says about itself."""
    from benchledger.local.starter import StarterError, examine, sweep_text
    from benchledger.server.lifecycle import ApiKeyMissing, api_key_from

    out = Path(args.out)
    if out.exists() and not args.force:
        raise CliError(f"{out} exists: choose another --out, or --force to replace it")
    try:
        api_key = api_key_from(args.api_key_env, "--api-key-env", "this shell")
        found = examine(args.url, args.model, api_key)
        text = sweep_text(found, out.name, args.name, args.api_key_env)
    except (StarterError, ApiKeyMissing) as exc:
        raise CliError(f"{args.url}: {exc}") from exc
    for line in found.lines:
        print(f"  {line}")
    out.write_text(text)
    print(f"wrote {out}; run it with:\n  benchledger run {out} --warehouse bench.duckdb")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    sweep = BUNDLED_SWEEPS / f"{args.sweep}.toml"
    if not sweep.exists():
        known = sorted(p.stem for p in BUNDLED_SWEEPS.glob("*.toml"))
        raise CliError(f"bundled sweep not found at {sweep} (run from a source checkout; "
                       f"bundled: {', '.join(known) or 'none'})")
    home = Path(args.dir).resolve()
    warehouse = home / "warehouse.duckdb"
    outcome = execute_sweep(sweep, warehouse, home, publish=True)
    return finish_run(outcome, warehouse, verbose=args.verbose)


def cmd_publish(args: argparse.Namespace) -> int:
    from benchledger.publishing.export import publish_run
    from benchledger.publishing.read import run_to_publish
    from benchledger.warehouse.db import connect

    with connect(Path(args.warehouse), read_only=True) as con:
        # refuses unknown or empty runs, and a choice among sweeps nobody made
        done = publish_run(con, run_to_publish(con, args.run, args.sweep), Path(args.out))
    counts = done.counts
    print(f"written to {done.out}: " + ", ".join(sorted(p.name for p in done.out.iterdir())))
    if counts["published"] == 0:
        print(f"nothing published: all {counts['entries']} entries of run {done.run_id} "
              "are blocked (report.html says why)")
        return 1
    print(f"published {counts['published']} validated entries of run {done.run_id} "
          f"({counts['blocked']} blocked)")
    return 0


def cmd_sql(args: argparse.Namespace) -> int:
    from benchledger.publishing.sql_door import QueryRefused, door_limits, read_query

    try:
        limits = door_limits(args.timeout_s, args.memory_limit, args.max_rows)
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    try:
        rows = read_query(Path(args.warehouse), args.query, limits)
    except QueryRefused as exc:
        raise CliError(str(exc)) from exc
    print(rows.text(args.max_width))
    if rows.cut:  # never a silent cut; on stderr, so the table on stdout stays a table
        print(f"benchledger sql: showed {rows.cut}", file=sys.stderr)
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from benchledger.publishing.explain import explain
    from benchledger.warehouse.db import connect

    with connect(Path(args.warehouse), read_only=True) as con:
        print(explain(con, args.entry_id, args.limit))
    return 0


def _request_count(text: str) -> int:
    """explain's --limit: how many requests to list, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value}: the requests listed are 0 or more")
    return value


def cmd_compare(args: argparse.Namespace) -> int:
    """Two entries side by side: a difference, never a finding; refused (exit 2, saying
    why) across evidence kinds or profiles, which were never a controlled experiment."""
    from benchledger.publishing.report import format_compared
    from benchledger.warehouse.compare_by_hand import ComparisonRefused, compare_entries
    from benchledger.warehouse.db import connect

    with connect(Path(args.warehouse), read_only=True) as con:
        try:
            result = compare_entries(con, args.a, args.b)
        except ComparisonRefused as exc:
            raise CliError(str(exc)) from exc
    print(format_compared(result))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    """The restarts per arm each A/B of a sweep needs, from an earlier run's spread."""
    from benchledger.publishing.plan import format_plan, plan
    from benchledger.warehouse.db import connect

    if args.effect is not None and not 0 < args.effect < 10:
        raise CliError(f"--effect must be a fraction above 0 (0.05 is 5%), got {args.effect}")
    with connect(Path(args.warehouse), read_only=True) as con:
        try:
            run, frame = plan(con, args.sweep, args.effect, args.run)
        except (ValueError, LookupError) as exc:
            raise CliError(str(exc)) from exc
    print(format_plan(run, frame))
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    """A recurring sweep's headline entries across its runs; exit 1 when the newest run
    regressed beyond the A/A control (as the regression gate would fail)."""
    from benchledger.publishing.history import format_history, history
    from benchledger.warehouse.db import connect
    from benchledger.warehouse.history import REGRESSION

    with connect(Path(args.warehouse), read_only=True) as con:
        try:
            frame = history(con, args.sweep, args.metric, args.min_change)
        except ValueError as exc:
            raise CliError(str(exc)) from exc
    print(format_history(frame))
    if frame.empty:
        return 0
    newest = frame[frame["run_id"] == frame["run_id"].iloc[-1]]
    return 1 if (newest["change"] == REGRESSION).any() else 0


def _settings(pairs: list[str]) -> dict[str, dict[str, str]]:
    """`--config section.key=value` (repeatable) -> {section: {key: value}}."""
    settings: dict[str, dict[str, str]] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        section, dot, option = key.partition(".")
        if not (sep and dot and section and option):
            raise CliError(f"--config {pair!r}: expected SECTION.KEY=VALUE, e.g. "
                           "--config openlineage.transport='{\"type\": \"console\"}'")
        settings.setdefault(section, {})[option] = value
    return settings


def cmd_cluster(args: argparse.Namespace) -> int:
    from benchledger.cluster import commands as cluster
    from benchledger.cluster import config as cluster_config

    home = Path(args.home).resolve()
    try:
        if args.action == "up":
            cluster.up(home, cluster_config.parse_nodes(args.nodes), port=args.port,
                       settings=_settings(args.config), db=args.db,
                       workers_per_node=args.workers_per_node, host=args.host)
            return 0
        if args.action == "join":
            from benchledger.cluster.join import join

            if not args.join_file or not args.node:
                raise CliError("cluster join needs --join-file (the join.json `cluster up` "
                               "wrote on the head) and --node (this host's node name)")
            join(home, Path(args.join_file), args.node, address=args.address,
                 dags_folder=args.dags_folder)
            return 0
        if args.action == "status":
            rows = cluster.status(home)
            if not any("pid" in row for row in rows):
                print(f"nothing of the deployment in {home} is running (start it with: "
                      f"benchledger cluster up --home {home})")
                return 1
            for row in rows:
                extra = "  ".join(f"{k}={row[k]}" for k in ("health", "queues", "starts")
                                  if row.get(k))
                print(f"{row['name']:<24} pid {row.get('pid', '-'):<8} {row['state']:<12} "
                      f"{extra}")
                if "pid" not in row:  # down: how it ended and what it said last
                    print(f"    last exit: {row.get('last_exit') or 'unknown'}")
                    print(f"    last error: {row.get('last_error') or '(its log is empty)'}"
                          f"  [{row['log']}]")
            return 0 if all("pid" in r for r in rows if r["name"] != "edge workers") else 1
        for line in cluster.down(home):
            print(line)
        return 0
    except cluster.ClusterError as exc:
        raise CliError(str(exc)) from exc


def _byte_size(text: str) -> int:
    from benchledger.imports import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_import(args: argparse.Namespace) -> int:
    """Load one file of another tool, or a historical report, as labelled evidence."""
    from benchledger.imports import EvidenceFileError, import_limit, parse_evidence
    from benchledger.warehouse.db import connect
    from benchledger.warehouse.imports import import_evidence

    try:
        limit = import_limit(args.max_bytes)  # BENCHLEDGER_IMPORT_MAX_BYTES may be no size
    except ValueError as exc:
        raise CliError(f"{exc}; nothing was loaded") from exc
    try:
        evidence = parse_evidence(args.tool, Path(args.file), args.name, limit)
    except EvidenceFileError as exc:
        raise CliError(f"{exc}; nothing was loaded") from exc
    with connect(Path(args.warehouse)) as con:
        result = import_evidence(con, evidence)
    source = evidence.files[0]
    if result.already_loaded:
        print(f"{source.path} (sha256 {source.sha256[:12]}) is already loaded as run "
              f"{result.run_id}; nothing was added")
        return 0
    loaded = (f"{result.windows} windows, {result.requests} request records"
              if evidence.requests is not None else f"{result.report_rows} report rows")
    print(f"loaded {source.path} as run {result.run_id} (evidence {evidence.evidence}, "
          f"{evidence.tool} {evidence.tool_version or 'version not recorded'}): {loaded}")
    for flag in result.flags:
        print(f"flagged: {flag}")
    print(f"{result.entries} entries, {result.published} publishable under evidence "
          f"{evidence.evidence}; why the others are blocked: benchledger sql --warehouse "
          f"{args.warehouse} \"SELECT * FROM entry_blocks JOIN entries USING (entry_id) "
          f"WHERE run_id = '{result.run_id}'\"")
    return 0


def cmd_simulator(args: argparse.Namespace) -> int:
    from benchledger.simulator.server import main as simulator_main

    return simulator_main(args.simulator_args) or 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="benchledger", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="run the bundled demo sweep on the built-in simulator")
    demo.add_argument("--dir", default="benchledger-demo",
                      help="folder for the warehouse, raw files and Airflow state")
    demo.add_argument("--sweep", default="demo", metavar="NAME",
                      help="which bundled sweep of dags/sweeps/ (default: %(default)s; "
                           "four_nodes: one model across four pretend nodes)")
    demo.add_argument("--verbose", action="store_true",
                      help="print every table of the run, not the summary")
    demo.set_defaults(func=cmd_demo)

    init = sub.add_parser("init", help="write a sweep file for a server that is already "
                                       "running, from what it says about itself")
    init.add_argument("url", help="the server's address, e.g. http://127.0.0.1:8000")
    init.add_argument("--out", default="sweep.toml", help="the file to write (sweep.toml)")
    init.add_argument("--name", help="the sweep's name (default: from the model's)")
    init.add_argument("--model", help="the model to ask for (default: /v1/models' first)")
    init.add_argument("--api-key-env", metavar="VAR",
                      help="the environment variable holding the server's API key")
    init.add_argument("--force", action="store_true", help="replace --out if it exists")
    init.set_defaults(func=cmd_init)

    run = sub.add_parser("run", help="run one sweep through its Airflow DAG on this machine")
    run.add_argument("sweep", help="sweep file (TOML)")
    run.add_argument("--warehouse", required=True, help="DuckDB warehouse file")
    run.add_argument("--data-dir", help="raw files, exports, Airflow state "
                                        "(default: <warehouse stem>-data beside it)")
    run.add_argument("--cluster", metavar="DIR",
                     help="run on the Airflow deployment of this folder (benchledger "
                          "cluster up) instead of embedded on this machine")
    run.add_argument("--verbose", action="store_true",
                     help="print every table of the run (delivered beside the server, the "
                          "ruler, the frontier, variance), not the summary")
    run.set_defaults(func=cmd_run)

    cluster = sub.add_parser("cluster", help="a local Airflow deployment: API server, "
                                             "scheduler, DAG processor, edge workers")
    cluster.add_argument("action", choices=["up", "join", "status", "down"])
    cluster.add_argument("--home", required=True, help="the deployment's folder")
    cluster.add_argument("--nodes", default="node-a",
                         help="up: edge workers, one per node, comma-separated; each "
                              "serves the queue of its name and the default queue")
    cluster.add_argument("--port", type=int, help="up: API server port (default: a free "
                                                  "one, kept across restarts)")
    cluster.add_argument("--config", action="append", default=[], metavar="SECTION.KEY=VALUE",
                         help="up: an Airflow setting written into the folder's airflow.cfg "
                              "(repeatable)")
    cluster.add_argument("--host", default="127.0.0.1", metavar="ADDRESS",
                         help="up: the address the API server listens on (one that workers "
                              "on other hosts reach; default: loopback)")
    cluster.add_argument("--join-file", metavar="FILE",
                         help="join: the join.json `cluster up` wrote in its folder")
    cluster.add_argument("--node", help="join: this host's node name (its worker's name "
                                        "and queue)")
    cluster.add_argument("--address", metavar="ADDRESS",
                         help="join: this node's address, where the servers its tasks "
                              "launch listen and are measured")
    cluster.add_argument("--dags-folder", metavar="DIR",
                         help="join: where this host reads the DAG bundle (default: the "
                              "head's path, on a shared filesystem)")
    cluster.add_argument("--db", metavar="URL",
                         help="up: the metadata database, postgresql://USER:PASSWORD@HOST:PORT"
                              "/DB (needs benchledger[postgres]); default: SQLite in the folder")
    cluster.add_argument("--workers-per-node", type=int, default=1, metavar="N",
                         help="up: Edge workers serving each node's queue (more than one "
                              "needs --db postgresql://...; a restart stays on one of them)")
    cluster.set_defaults(func=cmd_cluster)

    publish = sub.add_parser("publish", help="export validated entries only")
    publish.add_argument("--warehouse", required=True)
    publish.add_argument("--out", required=True, help="output folder")
    publish.add_argument("--run", help="run id, or its folder name (default: the newest "
                         "run of --sweep, or of the warehouse's one sweep)")
    publish.add_argument("--sweep", help="publish this sweep's newest run")
    publish.set_defaults(func=cmd_publish)

    sql = sub.add_parser("sql", help="read-only SQL over the warehouse")
    sql.add_argument("--warehouse", required=True)
    sql.add_argument("--max-width", type=int, default=None,
                     help="cut columns wider than this (default: every value whole)")
    sql.add_argument("--timeout-s", type=float, help="stop the query after this many "
                                                     "seconds (default 30, or "
                                                     "BENCHLEDGER_SQL_TIMEOUT_S)")
    sql.add_argument("--memory-limit", help="DuckDB's memory for the query, and the most "
                                            "its fetched rows may take (default 1GB, or "
                                            "BENCHLEDGER_SQL_MEMORY_LIMIT)")
    sql.add_argument("--max-rows", type=int, help="rows fetched and shown at most (default "
                                                  "10000, or BENCHLEDGER_SQL_MAX_ROWS)")
    sql.add_argument("query")
    sql.set_defaults(func=cmd_sql)

    explain = sub.add_parser("explain", help="an entry's requests, raw files and "
                                             "expectation results")
    explain.add_argument("entry_id")
    explain.add_argument("--warehouse", required=True)
    explain.add_argument("--limit", type=_request_count, default=20, help="requests listed")
    explain.set_defaults(func=cmd_explain)

    compare = sub.add_parser("compare", help="two entries side by side (refused across "
                                             "evidence kinds or profiles)")
    compare.add_argument("a", help="entry id")
    compare.add_argument("b", help="entry id")
    compare.add_argument("--warehouse", required=True)
    compare.set_defaults(func=cmd_compare)

    history = sub.add_parser("history", help="a recurring sweep's headline entries across "
                                             "its runs, changes held to its A/A control")
    history.add_argument("sweep", help="the sweep's name ([sweep] name)")
    history.add_argument("--warehouse", required=True)
    history.add_argument("--metric", action="append", default=[],
                         help="only this headline metric (repeatable): decode_rate, "
                              "throughput, ttft, goodput, energy_per_token")
    history.add_argument("--min-change", type=float, default=None, metavar="FRACTION",
                         help="the smallest relative change to flag (0.03 is 3%%); "
                              "default: the sweep's [sweep] regression_min_change")
    history.set_defaults(func=cmd_history)

    planning = sub.add_parser("plan", help="restarts per arm that the sweep's comparisons "
                                           "need, from an earlier (or pilot) run's spread")
    planning.add_argument("sweep", help="the sweep's name ([sweep] name)")
    planning.add_argument("--warehouse", required=True)
    planning.add_argument("--effect", type=float, default=None, metavar="FRACTION",
                          help="the relative difference to detect (0.05 is 5%%); default: "
                               "each comparison's smallest_effect")
    planning.add_argument("--run", default=None, metavar="RUN_ID",
                          help="the run to plan from (default: the sweep's newest)")
    planning.set_defaults(func=cmd_plan)

    imports = sub.add_parser("import", help="load another tool's results, or a historical "
                                            "report's rows, as labelled evidence")
    imports.add_argument("tool", choices=["guidellm", "aiperf", "vllm-bench", "report"])
    imports.add_argument("file", help="guidellm: its JSON report; aiperf: profile_export.jsonl, "
                                      "its _aiperf.json summary or their folder; vllm-bench: "
                                      "the --save-detailed result JSON; report: a CSV")
    imports.add_argument("--warehouse", required=True, help="DuckDB warehouse file")
    imports.add_argument("--name", help="what the import is called (the run's sweep_name "
                                        "and its entries' arm; default: the file's name)")
    imports.add_argument("--max-bytes", type=_byte_size, metavar="N",
                         help="refuse a file larger than N bytes (512M, 2G also work) before "
                              "reading it; default BENCHLEDGER_IMPORT_MAX_BYTES, else 512M")
    imports.set_defaults(func=cmd_import)

    simulator = sub.add_parser("simulator", add_help=False,
                               help="the built-in vLLM-like server (see --help)")
    simulator.add_argument("simulator_args", nargs=argparse.REMAINDER)
    simulator.set_defaults(func=cmd_simulator)
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line; everything after `simulator` is the simulator's own (its --help
    and flags such as --port). argparse's REMAINDER refuses an option right after a
    sub-command ("unrecognized arguments: --port"), so those arguments are split off
    before argparse sees them."""
    parser = build_parser()
    command = next((i for i, arg in enumerate(argv) if not arg.startswith("-")), None)
    if command is None or argv[command] != "simulator":
        return parser.parse_args(argv)
    args = parser.parse_args(argv[:command + 1])
    args.simulator_args = argv[command + 1:]
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    try:
        return args.func(args)
    except CliError as exc:
        print(f"benchledger {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except SweepError as exc:
        print(f"benchledger {args.command}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # Whoever read stdout stopped (`benchledger sql ... | head`): nothing to say, and
        # the exit status a shell gives a writer SIGPIPE ended. stdout goes to /dev/null
        # so the interpreter's last flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return CLOSED_PIPE
    except (LookupError, OSError, RuntimeError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"benchledger {args.command}: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"benchledger {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
