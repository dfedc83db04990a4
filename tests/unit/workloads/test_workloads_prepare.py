"""benchledger.workloads: prepared tables, seeded lengths, sessions, traces, provenance and
the rendered texts."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from benchledger.prompts import FILLER_WORDS
from benchledger.sweep.workload import Empirical, Fixed, Lognormal, Normal, Uniform
from benchledger.workloads import (
    TABLE_SCHEMA,
    WorkloadError,
    WorkloadSource,
    block_text,
    group_prefix,
    prepare_workload,
    read_dataset,
    read_trace,
    render_messages,
    render_prompt,
)
from benchledger.workloads.lengths import draw, reader


def write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def prepare(tmp_path: Path, items: int, seed: int = 7, **keys):
    return prepare_workload(WorkloadSource(**keys), tmp_path, items, seed, 128)


# ---- lengths ----

DISTRIBUTIONS = [
    Fixed(distribution="fixed", value=300),
    Uniform(distribution="uniform", min=10, max=20),
    Normal(distribution="normal", mean=500, stddev=200, min=300, max=700),
    Lognormal(distribution="lognormal", median=200, sigma=0.8),
]


@pytest.mark.parametrize("dist", DISTRIBUTIONS, ids=lambda d: d.distribution)
def test_draws_are_seeded_integers_in_range(tmp_path, dist):
    read = reader(tmp_path)
    first, record = draw(dist, 20_000, 1, "input", read)
    again, _ = draw(dist, 20_000, 1, "input", read)
    other, _ = draw(dist, 20_000, 2, "input", read)
    assert first.dtype == np.int64 and len(first) == 20_000
    assert np.array_equal(first, again)
    assert record == {**dist.model_dump(exclude_none=True), "seed": 1,
                      "drawn": {"min": int(first.min()), "max": int(first.max()),
                                "mean": round(float(first.mean()), 3)}}
    if dist.distribution == "fixed":
        assert set(first.tolist()) == {300}
        return
    assert not np.array_equal(first, other)
    if dist.distribution == "uniform":
        assert set(first.tolist()) == set(range(10, 21))  # both ends, every value
    elif dist.distribution == "normal":
        assert first.min() == 300 and first.max() == 700  # clipped at the bounds
        assert abs(np.median(first) - 500) < 10
    else:
        assert first.min() >= 1 and abs(np.median(first) - 200) < 8


def test_a_lognormal_never_draws_below_one_and_input_and_output_streams_differ(tmp_path):
    dist = Lognormal(distribution="lognormal", median=1, sigma=3, max=50)
    inputs, _ = draw(dist, 5000, 3, "input", reader(tmp_path))
    outputs, _ = draw(dist, 5000, 3, "output", reader(tmp_path))
    assert inputs.min() == 1 and inputs.max() == 50
    assert not np.array_equal(inputs, outputs)


def test_empirical_lengths_come_from_the_datasets_rows(tmp_path):
    write(tmp_path / "lens.jsonl", jsonl([
        {"prompt": "one two three", "max_tokens": 40},  # input: 3 words; output: max_tokens
        {"prompt": "x", "input_tokens": 900, "output_tokens": 70},
        {"messages": [{"role": "system", "content": "a b"}, {"role": "user",
                                                             "content": "c d e"}],
         "output_tokens": 5}]))  # input: 5 words over both messages
    dist = Empirical(distribution="empirical", dataset="lens.jsonl")
    inputs, record = draw(dist, 3000, 1, "input", reader(tmp_path))
    assert set(inputs.tolist()) == {3, 900, 5}
    assert record["sources"] == {"input_tokens": 1, "words": 2}
    assert record["dataset"]["sha256"] == hashlib.sha256(
        (tmp_path / "lens.jsonl").read_bytes()).hexdigest()
    outputs, record = draw(dist, 3000, 1, "output", reader(tmp_path))
    assert set(outputs.tolist()) == {40, 70, 5}
    assert record["sources"] == {"output_tokens": 2, "max_tokens": 1}
    again, _ = draw(dist, 3000, 1, "output", reader(tmp_path))
    assert np.array_equal(outputs, again)

    write(tmp_path / "sg.json", json.dumps([{"conversations": [
        {"from": "human", "value": "a b c d"}, {"from": "gpt", "value": "one two"}]}]))
    sharegpt = Empirical(distribution="empirical", dataset="sg.json")
    assert set(draw(sharegpt, 10, 1, "input", reader(tmp_path))[0].tolist()) == {4}
    assert set(draw(sharegpt, 10, 1, "output", reader(tmp_path))[0].tolist()) == {2}

    write(tmp_path / "short.jsonl", '{"prompt": "a"}\n{"prompt": "b"}\n')
    with pytest.raises(WorkloadError, match=r"short.jsonl, line 1: no output length"):
        draw(Empirical(distribution="empirical", dataset="short.jsonl"), 5, 1, "output",
             reader(tmp_path))


# ---- synthetic, builtin, shared prefix, sessions ----

def test_synthetic_rows_and_their_provenance(tmp_path):
    keys = {"input_length": {"distribution": "uniform", "min": 100, "max": 200},
            "output_length": {"distribution": "fixed", "value": 64}}
    prepared = prepare(tmp_path, 500, **keys)
    t = prepared.table
    assert t.schema == TABLE_SCHEMA
    assert t["item_id"].to_pylist()[:3] == ["syn-0", "syn-1", "syn-2"]
    assert t["prompt"].null_count == 500 and t["hash_ids"].null_count == 500
    assert 100 <= min(t["input_tokens"].to_pylist()) <= max(t["input_tokens"].to_pylist()) <= 200
    assert set(t["max_tokens"].to_pylist()) == {64}
    p = prepared.provenance
    assert set(p) == {"kind", "input_length", "output_length", "seed", "items", "ids_sha256",
                      "max_tokens"}
    assert p["kind"] == "synthetic" and p["seed"] == 7 and p["items"] == 500
    assert p["input_length"]["min"] == 100 and p["output_length"]["value"] == 64
    assert p["max_tokens"] == {"default": 128, "rows_default": 0}
    assert p["ids_sha256"] == hashlib.sha256("\n".join(t["item_id"].to_pylist())
                                             .encode()).hexdigest()
    json.dumps(p)
    # same seed: the same table; another seed: other lengths, the same ids
    assert prepare(tmp_path, 500, **keys).table.equals(t)
    other = prepare(tmp_path, 500, seed=8, **keys)
    assert other.table["input_tokens"] != t["input_tokens"]
    assert other.provenance["ids_sha256"] == p["ids_sha256"]


def test_builtin_rows_leave_the_text_to_the_prompt_set(tmp_path):
    prepared = prepare(tmp_path, 4)
    assert prepared.table["item_id"].to_pylist() == [f"builtin-{n}" for n in range(4)]
    assert prepared.provenance["kind"] == "builtin"
    assert prepared.provenance["max_tokens"] == {"default": 128, "rows_default": 4}
    with pytest.raises(ValueError, match="built-in item"):
        prepared.render(0)


def test_shared_prefix_groups_are_seeded_and_shared_by_their_rows(tmp_path):
    keys = {"input_length": {"distribution": "fixed", "value": 50},
            "shared_prefix": {"groups": 5, "tokens": 300}}
    prepared = prepare(tmp_path, 400, **keys)
    groups = prepared.table["prefix_group"].to_pylist()
    assert set(groups) == set(range(5))  # uniform over G: every group used at this size
    assert groups == prepare(tmp_path, 400, **keys).table["prefix_group"].to_pylist()
    assert groups != prepare(tmp_path, 400, seed=8, **keys).table["prefix_group"].to_pylist()
    assert prepared.provenance["shared_prefix"] == {"groups": 5, "tokens": 300}
    texts = [prepared.render(i) for i in range(40)]
    by_group: dict[int, set[str]] = {}
    for group, text in zip(groups[:40], texts, strict=True):
        prefix, body = text.split("\n\n")
        by_group.setdefault(group, set()).add(prefix)
        assert len(prefix.split()) == 300 and prefix.startswith("[group ")
        assert len(body.split()) == 50 and body.startswith("[item ")
    assert all(len(prefixes) == 1 for prefixes in by_group.values())  # one prefix a group
    assert len({next(iter(p)) for p in by_group.values()}) == len(by_group)


def test_synthetic_sessions_have_turns_rows_each(tmp_path):
    keys = {"input_length": {"distribution": "fixed", "value": 20}, "turns": 3,
            "think_time_s": 2.5, "shared_prefix": {"groups": 4, "tokens": 10}}
    prepared = prepare(tmp_path, 12, **keys)
    t = prepared.table
    assert t["session"].to_pylist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert t["turn"].to_pylist() == [0, 1, 2] * 4 and str(t["turn"].type) == "int32"
    assert t["item_id"].to_pylist()[:4] == ["syn-0#t0", "syn-0#t1", "syn-0#t2", "syn-1#t0"]
    groups = t["prefix_group"].to_pylist()
    assert all(len(set(groups[s * 3:s * 3 + 3])) == 1 for s in range(4))  # one per session
    assert prepared.render(0).startswith("[group ")  # the first turn carries the prefix
    assert prepared.render(1).startswith("[item ")  # later turns follow the conversation
    p = prepared.provenance
    assert (p["turns"], p["think_time_s"], p["history"]) == (3, 2.5, "server")
    with pytest.raises(WorkloadError, match=r"items \(10\) is not a multiple of turns \(3\)"):
        prepare(tmp_path, 10, **keys)


CONVERSATIONS = [
    {"id": "long", "conversations": [
        {"from": "system", "value": "sys"}, {"from": "human", "value": "q1"},
        {"from": "gpt", "value": "a1"}, {"from": "human", "value": "q2"},
        {"from": "human", "value": "q3"}, {"from": "gpt", "value": "a3"}]},
    {"id": "short", "conversations": [{"from": "human", "value": "only"}]},
    {"id": "answered", "conversations": [
        {"from": "human", "value": "x1"}, {"from": "gpt", "value": "y1"},
        {"from": "human", "value": "x2"}, {"from": "gpt", "value": "y2"}]},
]


def test_dataset_sessions_are_conversations_with_their_answers(tmp_path):
    write(tmp_path / "conv.json", json.dumps(CONVERSATIONS))
    prepared = prepare(tmp_path, 6, dataset="conv.json", turns=2)
    t = prepared.table
    assert t["item_id"].to_pylist() == ["long#t0", "long#t1", "answered#t0", "answered#t1",
                                        "long#t0", "long#t1"]  # "short" has one human turn
    assert t["prompt"].to_pylist() == ["q1", "q2", "x1", "x2", "q1", "q2"]
    assert t["answer"].to_pylist() == ["a1", None, "y1", "y2", "a1", None]
    assert t["messages"].null_count == 6 and t["session"].to_pylist() == [0, 0, 1, 1, 2, 2]
    assert prepared.provenance["dataset"]["sessions_usable"] == 2
    assert prepared.provenance["dataset"]["rows_used"] == 2
    with pytest.raises(WorkloadError, match=r"no conversation has 4 user turns"):
        prepare(tmp_path, 8, dataset="conv.json", turns=4)


def test_history_dataset_needs_the_answers_of_every_turn_but_the_last(tmp_path):
    write(tmp_path / "conv.json", json.dumps(CONVERSATIONS))
    prepared = prepare(tmp_path, 4, dataset="conv.json", turns=2, history="dataset")
    assert prepared.table["item_id"].to_pylist() == ["long#t0", "long#t1", "answered#t0",
                                                     "answered#t1"]
    with pytest.raises(WorkloadError, match=r"no conversation has 3 user turns with an answer"):
        prepare(tmp_path, 3, dataset="conv.json", turns=3, history="dataset")
    # JSON Lines conversations: a row's messages
    write(tmp_path / "chat.jsonl", jsonl([
        {"id": "m", "messages": [{"role": "user", "content": "u1"},
                                 {"role": "assistant", "content": "r1"},
                                 {"role": "user", "content": "u2"}]},
        {"prompt": "a single prompt"}]))
    rows = prepare(tmp_path, 2, dataset="chat.jsonl", turns=2).table.to_pylist()
    assert [(r["item_id"], r["prompt"], r["answer"]) for r in rows] == [
        ("m#t0", "u1", "r1"), ("m#t1", "u2", None)]


# ---- datasets, prepared ----

def test_a_2000_line_dataset_prepared_ordered_and_seeded(tmp_path):
    written = [{"id": f"q{i}", "prompt": f"question number {i}", "max_tokens": 1 + i % 50}
               for i in range(2000)]
    write(tmp_path / "big.jsonl", jsonl(written))
    ordered = prepare(tmp_path, 2000, dataset="big.jsonl").table.to_pylist()
    assert [(r["item_id"], r["prompt"], r["max_tokens"]) for r in ordered] == [
        (w["id"], w["prompt"], w["max_tokens"]) for w in written]
    assert all(r["messages"] is None and r["input_tokens"] is None for r in ordered)
    cycled = prepare(tmp_path, 2500, dataset="big.jsonl")
    assert cycled.table["item_id"].to_pylist()[2000:2003] == ["q0", "q1", "q2"]
    assert cycled.provenance["dataset"]["rows_used"] == 2000
    seeded = prepare(tmp_path, 2000, dataset="big.jsonl", sampling="seeded")
    ids = seeded.table["item_id"].to_pylist()
    assert sorted(ids) == sorted(w["id"] for w in written) and ids != [w["id"] for w in written]
    assert seeded.provenance["sampling"] == "seeded"
    assert seeded.provenance["ids_sha256"] != prepare(
        tmp_path, 2000, dataset="big.jsonl").provenance["ids_sha256"]
    assert prepare(tmp_path, 2000, dataset="big.jsonl", sampling="seeded").table.equals(
        seeded.table)
    drawn = prepare(tmp_path, 3000, dataset="big.jsonl", sampling="seeded")
    assert drawn.provenance["dataset"]["rows_used"] < 2000  # with replacement
    overridden = prepare(tmp_path, 2000, dataset="big.jsonl",
                         output_length={"distribution": "fixed", "value": 9})
    assert set(overridden.table["max_tokens"].to_pylist()) == {9}
    p = overridden.provenance
    assert set(p) == {"kind", "dataset", "sampling", "seed", "output_length", "items",
                      "ids_sha256", "max_tokens"}
    assert p["dataset"] == {"path": "big.jsonl", "rows": 2000, "format": "jsonl",
                            "rows_used": 2000, "sha256": hashlib.sha256(
                                (tmp_path / "big.jsonl").read_bytes()).hexdigest()}


def test_messages_rows_send_their_list_and_sharegpt_rows_their_prompt(tmp_path):
    messages = [{"role": "system", "content": "short \"answers\"\n"},
                {"role": "user", "content": "why?"}]
    write(tmp_path / "m.jsonl", jsonl([{"messages": messages, "max_tokens": 5}]))
    prepared = prepare(tmp_path, 1, dataset="m.jsonl",
                       shared_prefix={"groups": 1, "tokens": 4})
    row = prepared.row(0)
    assert row["prompt"] is None and json.loads(row["messages"]) == messages
    sent = prepared.render(0)
    assert sent[1] == messages[1] and sent[0]["content"].endswith("\n\nshort \"answers\"\n")
    assert sent[0]["content"].startswith("[group ")
    assert render_messages(row, 7, prefix_tokens=4) == sent
    write(tmp_path / "sg.json", json.dumps(CONVERSATIONS))
    rows = prepare(tmp_path, 3, dataset="sg.json").table.to_pylist()
    assert [(r["prompt"], r["messages"], r["answer"]) for r in rows] == [
        ("q1", None, "a1"), ("only", None, None), ("x1", None, "y1")]
    assert prepare(tmp_path, 3, dataset="sg.json").render(0) == "q1"


# ---- traces ----

TRACE = [{"timestamp": 1000, "input_length": 1200, "output_length": 30, "hash_ids": [0, 1, 2]},
         {"timestamp": 1500.5, "input_length": 600, "output_length": 8, "hash_ids": [0, 3]},
         {"timestamp": 4000, "input_length": 40, "output_length": 1}]


def test_a_trace_gives_arrivals_lengths_and_hash_ids(tmp_path):
    write(tmp_path / "t.jsonl", "\n" + jsonl(TRACE))
    prepared = prepare(tmp_path, 3, trace="t.jsonl", time_scale=0.5)
    t = prepared.table
    assert t.schema == TABLE_SCHEMA
    assert t["item_id"].to_pylist() == ["trace-2", "trace-3", "trace-4"]  # by line
    assert t["arrival_s"].to_pylist() == [0.0, 0.25025, 1.5]  # (ts - first) / 1000 * scale
    assert t["input_tokens"].to_pylist() == [1200, 600, 40]
    assert t["max_tokens"].to_pylist() == [30, 8, 1]
    assert t["hash_ids"].to_pylist() == [[0, 1, 2], [0, 3], []]
    p = prepared.provenance
    assert set(p) == {"kind", "trace", "seed", "items", "ids_sha256", "max_tokens"}
    assert p["trace"] == {"path": "t.jsonl", "rows": 3, "time_scale": 0.5, "duration_s": 1.5,
                          "max_replay_s": 3600.0,
                          "sha256": hashlib.sha256((tmp_path / "t.jsonl").read_bytes())
                          .hexdigest()}
    first_two = prepare(tmp_path, 2, trace="t.jsonl")
    assert first_two.table["arrival_s"].to_pylist() == [0.0, 0.5005]
    with pytest.raises(WorkloadError, match=r"t.jsonl: the trace has 3 requests, fewer than "
                                            r"the 4 items asked for"):
        prepare(tmp_path, 4, trace="t.jsonl")


def test_a_replay_longer_than_its_bound_is_refused_when_prepared(tmp_path):
    """Timestamps that jump to 10^15 ms are valid JSON in arrival order; replayed, the
    window would wait for ever for its last request (issue #39). Refused at plan, naming
    the file, the span, the line after the jump and the key that bounds it."""
    jump = [*TRACE[:2], {"timestamp": 10**15, "input_length": 40, "output_length": 1},
            {"timestamp": 10**15 + 5, "input_length": 40, "output_length": 1}]
    write(tmp_path / "t.jsonl", jsonl(jump))
    with pytest.raises(WorkloadError) as refused:
        prepare(tmp_path, 4, trace="t.jsonl")
    message = str(refused.value)
    assert message.startswith(f"{tmp_path / 't.jsonl'}: replaying its first 4 requests takes "
                              "1e+12 s (timestamps 1000 to 1e+15 ms, time_scale 1; the "
                              "largest gap is before line 3), above max_replay_s = 3600 s")
    assert "raise max_replay_s in its [[workloads]] table" in message
    # the first two requests replay in half a second: within the bound
    assert prepare(tmp_path, 2, trace="t.jsonl").table["arrival_s"].to_pylist() == [0.0, 0.5005]
    # the bound is the sweep's: raised (or the trace slowed down less), it is accepted
    slow = [{"timestamp": 0, "input_length": 4, "output_length": 1},
            {"timestamp": 7_200_000, "input_length": 4, "output_length": 1}]  # two hours
    write(tmp_path / "slow.jsonl", jsonl(slow))
    with pytest.raises(WorkloadError, match="takes 7200 s"):
        prepare(tmp_path, 2, trace="slow.jsonl")
    assert prepare(tmp_path, 2, trace="slow.jsonl", max_replay_s=7200).table[
        "arrival_s"].to_pylist() == [0.0, 7200.0]
    assert prepare(tmp_path, 2, trace="slow.jsonl", time_scale=0.5).table[
        "arrival_s"].to_pylist() == [0.0, 3600.0]


def test_max_replay_s_is_a_traces_key_within_a_week():
    with pytest.raises(ValueError, match="`max_replay_s` applies to a `trace`"):
        WorkloadSource(max_replay_s=10)
    with pytest.raises(ValueError, match="less than or equal to 604800"):
        WorkloadSource(trace="t.jsonl", max_replay_s=10**9)


def test_trace_texts_share_the_blocks_of_shared_hash_ids(tmp_path):
    write(tmp_path / "t.jsonl", jsonl(TRACE))
    prepared = prepare(tmp_path, 3, trace="t.jsonl")
    a, b, c = (prepared.render(i) for i in range(3))
    assert [len(x.split()) for x in (a, b, c)] == [1200, 600, 40]
    block0 = block_text(7, 0)
    assert len(block0.split()) == 512 and block0.startswith("[block 0] ")
    assert a.startswith(block0 + " [block 1] ") and b.startswith(block0 + " [block 3] ")
    assert " [block 2] " in a and not a[len(block0):].startswith(b[len(block0):][:30])
    # the second request's last block is cut at its input length: 600 - 512 = 88 words
    assert b == block0 + " " + block_text(7, 3, 88)
    assert c.startswith("[item ")  # no hash ids: a text of its own
    assert prepare(tmp_path, 3, trace="t.jsonl", seed=8).render(0) != a


@pytest.mark.parametrize(("lines", "line", "what"), [
    ([TRACE[0], {**TRACE[1], "timestamp": 999}], 2, "`timestamp` 999 is before the previous "
                                                    "line's 1000.0"),
    ([TRACE[0], {"input_length": 5, "output_length": 5}], 2, "no `timestamp`"),
    ([{**TRACE[0], "timestamp": "soon"}], 1, "`timestamp` is not a number of milliseconds"),
    ([{"timestamp": 1, "output_length": 5}], 1, "no `input_length`"),
    ([{"timestamp": 1, "input_length": 5}], 1, "no `output_length`"),
    ([TRACE[0], {**TRACE[1], "input_length": 5.5}], 2, "`input_length` must be a positive "
                                                       "integer up to 1000000, not the number"),
    ([{**TRACE[0], "output_length": 0}], 1, "`output_length` must be a positive integer"),
    ([{**TRACE[0], "hash_ids": [1, -2]}], 1, "`hash_ids[1]` is not a non-negative integer"),
    ([{**TRACE[0], "hash_ids": [1, "2"]}], 1, "`hash_ids[1]` is not a non-negative integer"),
    ([{**TRACE[0], "hash_ids": 3}], 1, "`hash_ids` is not a list"),
])
def test_every_trace_error_names_the_file_the_line_and_what(tmp_path, lines, line, what):
    path = write(tmp_path / "t.jsonl", jsonl(lines))
    with pytest.raises(WorkloadError) as caught:
        read_trace(path)
    message = str(caught.value)
    assert message.startswith(f"{path}, line {line}: ") and what in message, message


@pytest.mark.parametrize(("data", "what"), [
    (b'{"timestamp": 1, "input_length": 2, "output_length": 3}\n{"timestamp": "\xff"}\n',
     "line 2: not UTF-8: byte 0xff at offset 71"),
    (b'{"timestamp": 1, "input_length": 2\n', "line 1: bad JSON: Expecting ',' delimiter"),
    (b'[1]\n', "line 1: not a JSON object but a list"),
    (b'', "empty trace: no requests"),
])
def test_a_trace_that_is_not_json_lines_is_named(tmp_path, data, what):
    path = write(tmp_path / "t.jsonl", data)
    with pytest.raises(WorkloadError, match="^" + str(path) + r"(, |: )" + what[:20]):
        read_trace(path)
    with pytest.raises(WorkloadError, match=r"trace not found: .*nope.jsonl"):
        read_trace(tmp_path / "nope.jsonl")


def test_a_big_valid_trace_is_read_in_columns(tmp_path, monkeypatch):
    rows = [{"timestamp": i * 10, "input_length": 100 + i, "output_length": 5,
             "hash_ids": [i % 7, i]} for i in range(2000)]
    path = write(tmp_path / "t.jsonl", jsonl(rows))

    def refuse(*args):
        raise AssertionError("the line scan ran on a valid trace")

    monkeypatch.setattr("benchledger.workloads.traces.scan", refuse)
    trace = read_trace(path)
    assert trace.rows == 2000 and trace.table["hash_ids"][1999].as_py() == [1999 % 7, 1999]
    monkeypatch.undo()
    rows[1234]["timestamp"] = 0
    with pytest.raises(WorkloadError, match=r"line 1235: `timestamp` 0 is before"):
        read_trace(write(path, jsonl(rows)))


# ---- rendering ----

def test_rendered_prompts_are_deterministic_distinct_and_of_their_length():
    rows = [{"item_id": f"syn-{n}", "prompt": None, "input_tokens": 8192} for n in range(50)]
    texts = [render_prompt(r, 11) for r in rows]
    assert texts == [render_prompt(r, 11) for r in rows]
    assert all(len(t.split()) == 8192 for t in texts)
    assert len({t.split()[1] for t in texts}) == 50  # the tags differ
    assert len({t[:200] for t in texts}) == 50 and len({t[30:200] for t in texts}) > 40
    assert render_prompt(rows[0], 12) != texts[0]
    assert set(texts[0].split()[2:]) <= set(FILLER_WORDS)
    # a text longer than the word pool wraps around and keeps its length
    assert len(render_prompt({"item_id": "x", "input_tokens": 200_000}, 1).split()) == 200_000
    assert render_prompt({"item_id": "y", "input_tokens": 1}, 1).startswith("[item ")


def test_rendering_a_group_prefix_needs_its_length():
    row = {"item_id": "syn-0", "input_tokens": 5, "prefix_group": 2}
    with pytest.raises(ValueError, match="shared_prefix group"):
        render_prompt(row, 1)
    text = render_prompt(row, 1, prefix_tokens=3)
    assert text.startswith(group_prefix(1, 2, 3) + "\n\n[item ")
    dataset_row = {"item_id": "q", "prompt": "What is 2+2?", "prefix_group": 0}
    assert render_prompt(dataset_row, 1, prefix_tokens=3).endswith("\n\nWhat is 2+2?")
    assert render_prompt({"item_id": "q", "prompt": "plain"}, 1) == "plain"


def test_read_dataset_and_prepare_agree_on_the_rows(tmp_path):
    write(tmp_path / "d.jsonl", jsonl([{"prompt": "a"}, {"prompt": "b", "max_tokens": 3}]))
    ds = read_dataset(tmp_path / "d.jsonl")
    prepared = prepare(tmp_path, 2, dataset="d.jsonl")
    assert prepared.table["item_id"].to_pylist() == ds.table["id"].to_pylist()
    assert prepared.table["max_tokens"].to_pylist() == [None, 3]
    assert prepared.provenance["max_tokens"] == {"default": 128, "rows_default": 1}


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(WorkloadError, match="items must be at least 1"):
        prepare(tmp_path, 0)
    with pytest.raises(WorkloadError, match="seed -1 is not an integer from 0"):
        prepare(tmp_path, 1, seed=-1)
    with pytest.raises(WorkloadError, match="dataset not found"):
        prepare(tmp_path, 1, dataset="missing.jsonl")
