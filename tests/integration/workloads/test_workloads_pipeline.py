"""Issue #26 through the real pipeline: one sweep with a workload of each kind (a built-in
prompt set, a JSONL dataset, ShareGPT multi-turn sessions, synthetic lengths with shared
prefixes, a Mooncake trace) on two simulator arms, one of them a reasoning model, run
through its Airflow DAG. The dataset, the conversations and the trace are written here with
realistic shapes (a few hundred rows each)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import random

import pytest

from tests.conftest import run_sweep_text
from tests.sweeps import defaults, simulator_arm, sweep

pytestmark = pytest.mark.integration

REQUESTS = 15
TURNS = 3
REASONING_TOKENS = 12
SIM = {"step_ms": 1.0}
WORDS = ("the", "model", "serves", "tokens", "to", "users", "who", "ask", "about", "rivers",
         "mountains", "code", "tests", "caches", "prefixes", "sessions", "traces", "and",
         "speed", "of", "decoding", "under", "load")


def _sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)) + "."


def write_inputs(folder):
    """A 300-line JSONL dataset, 200 ShareGPT conversations of 3-5 turns, and a 300-row
    Mooncake trace whose requests share 512-token blocks, as the public files do."""
    rng = random.Random(26)
    with (folder / "prompts.jsonl").open("w") as f:
        for i in range(300):
            if i % 7 == 3:
                row = {"id": f"row-{i}", "messages": [
                    {"role": "system", "content": "You answer briefly."},
                    {"role": "user", "content": _sentence(rng, rng.randint(8, 60))}]}
            else:
                row = {"id": f"row-{i}", "prompt": _sentence(rng, rng.randint(8, 120))}
            if i % 5 == 0:
                row["max_tokens"] = rng.randint(16, 48)
            f.write(json.dumps(row) + "\n")
    conversations = []
    for i in range(200):
        turns = []
        for _ in range(rng.randint(TURNS, 5)):
            turns.append({"from": "human", "value": _sentence(rng, rng.randint(6, 40))})
            turns.append({"from": "gpt", "value": _sentence(rng, rng.randint(10, 80))})
        conversations.append({"id": f"conv-{i}", "conversations": turns})
    (folder / "sharegpt.json").write_text(json.dumps(conversations))
    with (folder / "mooncake.jsonl").open("w") as f:
        timestamp = 0
        for i in range(300):
            timestamp += rng.randint(5, 60)  # ms
            shared = [0, 1] if i % 3 else [2]
            ids = shared + [1000 + i]
            f.write(json.dumps({"timestamp": timestamp,
                                "input_length": 512 * len(shared) + rng.randint(20, 400),
                                "output_length": rng.randint(8, 40),
                                "hash_ids": ids}) + "\n")


def workloads_sweep() -> dict:
    return sweep(
        "it-workloads",
        [simulator_arm("plain", SIM),
         simulator_arm("reasoner", {**SIM, "reasoning_tokens": REASONING_TOKENS})],
        sweep={"retries": 0},
        defaults=defaults(requests=REQUESTS, warmup=TURNS, max_tokens=32, concurrency=[4],
                          clock_interval_s=0.1, seed=7),
        workloads=[
            "prose",
            {"name": "own-prompts", "dataset": "prompts.jsonl", "sampling": "seeded"},
            {"name": "sessions", "dataset": "sharegpt.json", "turns": TURNS,
             "think_time_s": 0.01},
            {"name": "synthetic",
             "input_length": {"distribution": "lognormal", "median": 96, "sigma": 0.5,
                              "max": 512},
             "output_length": {"distribution": "uniform", "min": 8, "max": 32},
             "shared_prefix": {"groups": 3, "tokens": 256}},
            {"name": "trace", "trace": "mooncake.jsonl", "time_scale": 2.0}])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("workloads")
    write_inputs(workdir)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        run_id, state, con = run_sweep_text(workdir, workloads_sweep())
    yield workdir, run_id, state, con
    con.close()


def rows(run, sql: str) -> list[tuple]:
    _, run_id, _, con = run
    return con.execute(sql, [run_id]).fetchall()


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_every_kind_publishes_labelled_entries(run):
    assert run[2] == "success"
    published = dict(rows(run, """
        SELECT w.workload_kind, count(*) FROM entries e
        JOIN (SELECT DISTINCT run_id, workload, workload_kind FROM windows) w
          ON w.run_id = e.run_id AND w.workload = e.workload
        WHERE e.run_id = ? AND e.publishable GROUP BY ALL"""))
    assert set(published) == {"builtin", "dataset", "synthetic", "trace"}
    assert all(count >= 5 for count in published.values()), published
    workloads = {w for w, in rows(run, "SELECT DISTINCT workload FROM entries "
                                       "WHERE run_id = ? AND publishable")}
    assert workloads == {"prose", "own-prompts", "sessions", "synthetic", "trace"}


def test_provenance_is_in_sql(run):
    workdir = run[0]
    found = {r[0]: r[1:] for r in rows(run, """
        SELECT workload, kind, dataset_sha256, dataset_rows, dataset_format, trace_sha256,
               trace_rows, time_scale, seed, sampling, turns, ids_sha256, provenance
        FROM workloads WHERE run_id = ?""")}
    assert set(found) == {"own-prompts", "sessions", "synthetic", "trace"}
    kind, dataset_sha, dataset_rows, fmt, *_, ids_sha, provenance = found["own-prompts"]
    assert (kind, dataset_sha, dataset_rows, fmt) == (
        "dataset", sha256(workdir / "prompts.jsonl"), 300, "jsonl")
    assert found["own-prompts"][7:9] == (7, "seeded") and ids_sha
    assert found["sessions"][:4] == ("dataset", sha256(workdir / "sharegpt.json"), 200,
                                     "sharegpt")
    assert found["sessions"][9] == TURNS
    kind, *_, provenance = found["synthetic"]
    spec = json.loads(provenance)
    assert kind == "synthetic" and spec["seed"] == 7
    assert spec["input_length"]["distribution"] == "lognormal"
    assert spec["input_length"]["median"] == 96
    assert spec["shared_prefix"] == {"groups": 3, "tokens": 256}
    trace = found["trace"]
    assert trace[0] == "trace" and trace[4:7] == (sha256(workdir / "mooncake.jsonl"), 300, 2.0)
    # each request names the dataset row it sent
    ids = {i for i, in rows(run, """
        SELECT DISTINCT r.prompt_id FROM request_records r JOIN windows w USING (window_id)
        WHERE w.run_id = ? AND w.workload = 'own-prompts'""")}
    assert ids and all(i.startswith("row-") for i in ids)


def test_explain_shows_the_workload(run):
    from publishing.explain import explain

    _, run_id, _, con = run
    for workload, expected in (("own-prompts", "dataset_sha256"),
                               ("trace", "trace_sha256"), ("synthetic", "input_length")):
        entry_id, = con.execute(
            "SELECT entry_id FROM entries WHERE run_id = ? AND workload = ? LIMIT 1",
            [run_id, workload]).fetchone()
        text = explain(con, entry_id)
        assert "\nWorkload:" in text and expected in text, text


def test_requested_and_achieved_are_kept(run):
    # the trace: each request's due time beside its submission, per window both spans
    windows = rows(run, """
        SELECT requested_span_s, achieved_span_s, arrival_lag_p99_ms, arrival
        FROM windows WHERE run_id = ? AND workload = 'trace'""")
    assert len(windows) == 4
    for requested, achieved, lag, arrival in windows:
        assert arrival == "trace" and requested > 0.1 and achieved > 0 and lag is not None
    due = rows(run, """
        SELECT count(*), count(r.t_scheduled_ns) FROM request_records r
        JOIN windows w USING (window_id)
        WHERE w.run_id = ? AND w.workload = 'trace' AND NOT r.is_warmup""")
    assert due == [(4 * REQUESTS, 4 * REQUESTS)]
    # synthetic lengths: asked for against delivered (usage)
    lengths = rows(run, """
        SELECT r.requested_input_tokens, r.prompt_tokens, r.max_tokens, r.output_tokens
        FROM request_records r JOIN windows w USING (window_id)
        WHERE w.run_id = ? AND w.workload = 'synthetic' AND w.arm = 'plain'
          AND r.status = 'completed'""")
    assert lengths and all(asked is not None and got is not None for asked, got, *_ in lengths)
    assert len({asked for asked, *_ in lengths}) > 3  # drawn, not one value


def test_reasoning_is_kept_apart(run):
    stats = dict(rows(run, """
        SELECT metric, value FROM entries
        WHERE run_id = ? AND arm = 'reasoner' AND workload = 'prose'
          AND metric IN ('ttft', 'ttfrt') AND statistic = 'mean' AND scope = 'per_user'"""))
    assert stats["ttft"] > stats["ttfrt"] > 0
    recorded = rows(run, """
        SELECT DISTINCT r.reasoning_tokens FROM request_records r
        JOIN windows w USING (window_id)
        WHERE w.run_id = ? AND w.arm = 'reasoner' AND w.workload = 'prose'
          AND r.status = 'completed'""")
    assert recorded == [(REASONING_TOKENS,)]
    # no entry of the reasoning arm counts reasoning tokens without saying so (the server's
    # own log lines are kept apart by name, T2: what the server claims it generated)
    rates = rows(run, """
        SELECT DISTINCT numerator FROM entries
        WHERE run_id = ? AND arm = 'reasoner' AND unit = 'tok/s' AND value IS NOT NULL
          AND metric NOT LIKE 'server_log%'""")
    assert {n for n, in rates} <= {"answer_tokens", "output_tokens_with_reasoning",
                                   "prompt_tokens"}
    assert {"answer_tokens", "output_tokens_with_reasoning"} <= {n for n, in rates}


def test_sessions_carry_history_and_hit_the_prefix_cache(run):
    turns = rows(run, """
        SELECT r.turn, avg(r.cached_tokens), count(DISTINCT (r.window_id, r.session)), count(*)
        FROM request_records r JOIN windows w USING (window_id)
        WHERE w.run_id = ? AND w.workload = 'sessions' AND w.arm = 'plain'
          AND NOT r.is_warmup AND r.status = 'completed'
        GROUP BY r.turn ORDER BY r.turn""")
    assert [t[0] for t in turns] == list(range(TURNS))
    first, *later = turns
    assert all(t[1] > first[1] + 16 for t in later), turns  # the history came from the cache
    assert all(t[2] == REQUESTS // TURNS * 2 for t in turns)  # sessions per turn, 2 restarts
    concurrency = rows(run, """SELECT DISTINCT concurrency, turns FROM windows
                               WHERE run_id = ? AND workload = 'sessions'""")
    assert concurrency == [(4, TURNS)]
    metrics = {m for m, in rows(run, """
        SELECT DISTINCT metric FROM entries WHERE run_id = ? AND workload = 'sessions'
          AND value IS NOT NULL""")}
    assert {"ttft_first_turn", "ttft_later_turns", "session_latency"} <= metrics


def test_shared_prefixes_are_served_from_the_cache(run):
    cached = rows(run, """
        SELECT r.prefix_group, max(r.cached_tokens) FROM request_records r
        JOIN windows w USING (window_id)
        WHERE w.run_id = ? AND w.workload = 'synthetic' AND NOT r.is_warmup
          AND r.status = 'completed' GROUP BY ALL ORDER BY 1""")
    assert [g for g, _ in cached] == [0, 1, 2]
    assert all(most >= 200 for _, most in cached), cached  # the 256-token prefix, in blocks
    # ... and the cache's share is an entry of its own, from usage and from the counters
    shares = dict(rows(run, """
        SELECT metric, value FROM entries WHERE run_id = ? AND workload = 'synthetic'
          AND arm = 'plain' AND metric IN ('cached_token_share', 'prefix_cache_hit_rate')"""))
    assert set(shares) == {"cached_token_share", "prefix_cache_hit_rate"}
    assert all(0.2 < share < 1 for share in shares.values()), shares


def test_the_report_shows_what_each_prepared_workload_sent(run, tmp_path):
    """report.html's prompt samples of prepared workloads are rendered from the run folder's
    prepared file (the warehouse keeps no prompt text): a dataset row's prompt as the file
    had it, a synthetic request's generated text."""
    import html as html_module
    import re

    from benchledger.publishing.export import export_run

    workdir, run_id, _, con = run
    out = export_run(con, run_id, tmp_path / "published")
    page = (out / "report.html").read_text()
    section = page[page.index("<section id='workload'>"):]
    section = section[:section.index("</section>")]
    shown = {(w, i): html_module.unescape(t) for w, i, t in re.findall(
        r"<span class='prompt-id'>([^<]+) / ([^<]+)</span>.*?<pre class='prompt'>(.*?)</pre>",
        section, flags=re.S)}
    dataset = {row["id"]: row for row in map(json.loads, (workdir / "prompts.jsonl").open())}
    own = {i: t for (w, i), t in shown.items() if w == "own-prompts"}
    assert own, section[:2000]
    for item_id, text in own.items():
        row = dataset[item_id]
        sent = row.get("prompt") or "\n".join(f"{m['role']}: {m['content']}"
                                              for m in row["messages"])
        assert text == (sent if len(sent) <= 400 else sent[:400].rstrip() + " …")
    synthetic = [t for (w, _), t in shown.items() if w == "synthetic"]
    assert synthetic and all(t and not t.startswith("(text not shown") for t in synthetic)
