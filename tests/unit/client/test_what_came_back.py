"""Issue #42, part 1: what came back, recorded. Every row carries the sha256 and length of
its answer's text as streamed, and of its reasoning apart; the texts themselves only where
the sweep asks (keep_output_text). Measured through the real client against a scripted
server, in one loop and across worker processes (whose records come back pickled)."""

from __future__ import annotations

import hashlib
import json
import pickle

import pytest

from benchledger.client import Target, WindowSpec, measure_window
from benchledger.prompts import load_prompt_set
from benchledger.raw.records import REQUEST_SCHEMA, requests_table
from benchledger.sweep.spec import parse_sweep
from tests.conftest import Script, chat_chunk, sse_event, usage_event

ANSWER_PIECES = [" Voilà", ", 漢字", " \U0001F600 done"]
REASONING_PIECES = [" think", " more"]
ANSWER = "".join(ANSWER_PIECES)
REASONING = "".join(REASONING_PIECES)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _reasoning(text: str) -> bytes:
    return sse_event({"choices": [{"index": 0, "delta": {"reasoning_content": text}}]})


def answer_script(n: int, body: dict) -> Script:
    role = sse_event({"choices": [{"delta": {"role": "assistant", "content": ""}}]})
    return Script([role, *(_reasoning(t) for t in REASONING_PIECES),
                   *(chat_chunk(t) for t in ANSWER_PIECES[:-1]),
                   chat_chunk(ANSWER_PIECES[-1], "stop"),
                   usage_event(prompt_tokens=4, completion_tokens=9, total_tokens=13),
                   sse_event(b"[DONE]")])


def _spec(**overrides) -> WindowSpec:
    values = dict(window_id="run/arm/r0/code-c1", prompts=load_prompt_set("code"),
                  requests=3, warmup=1, concurrency=1, max_tokens=16, temperature=0.0,
                  drain_timeout_s=10.0, request_timeout_s=10.0)
    values.update(overrides)
    return WindowSpec(**values)


@pytest.mark.parametrize("workers", [None, 2])
def test_every_row_digests_its_answer_and_reasoning_apart(scripted_server, workers):
    server, base = scripted_server
    server.scripts["answers"] = answer_script
    rows = measure_window(Target(base, "answers"), _spec(workers=workers,
                                                         concurrency=2)).rows
    assert len(rows) == 4 and {r["status"] for r in rows} == {"completed"}
    for row in rows:  # warm-up included: what came back is kept whatever the row is
        assert row["answer_sha256"] == sha(ANSWER)
        assert row["answer_chars"] == len(ANSWER) == 17 < len(ANSWER.encode())  # characters
        assert row["reasoning_sha256"] == sha(REASONING)
        assert row["reasoning_chars"] == len(REASONING)
        # the texts stay out unless the sweep asks: a user's answers may be private
        assert row["answer_text"] is None and row["reasoning_text"] is None


def test_the_texts_are_kept_where_the_sweep_asks(scripted_server):
    server, base = scripted_server
    server.scripts["answers"] = answer_script
    rows = measure_window(Target(base, "answers"), _spec(keep_output_text=True)).rows
    assert {(r["answer_text"], r["reasoning_text"]) for r in rows} == {(ANSWER, REASONING)}
    table = requests_table(rows)  # the raw file's schema takes them
    assert table.column("answer_text").to_pylist() == [ANSWER] * 4
    assert set(rows[0]) == set(REQUEST_SCHEMA.names)


def test_nothing_came_back_is_null_and_an_empty_answer_is_not(scripted_server):
    """An error page is not an answer (NULL digest); a completed answer with no text is
    the empty answer (its digest is the empty string's), and a model without reasoning
    has NULL reasoning columns."""
    server, base = scripted_server
    server.scripts["empty"] = lambda n, body: Script([
        chat_chunk("", "stop"), usage_event(prompt_tokens=4, completion_tokens=0,
                                            total_tokens=4), sse_event(b"[DONE]")])
    failed = measure_window(Target(base, "http-500"), _spec(warmup=0, requests=1)).rows[0]
    assert failed["status"] == "failed" and failed["http_status"] == 500
    assert (failed["answer_sha256"], failed["answer_chars"]) == (None, None)
    empty = measure_window(Target(base, "empty"), _spec(warmup=0, requests=1)).rows[0]
    assert empty["status"] == "completed"
    assert (empty["answer_sha256"], empty["answer_chars"]) == (sha(""), 0)
    assert (empty["reasoning_sha256"], empty["reasoning_chars"]) == (None, None)


def test_a_lone_surrogate_is_digested_as_sent_and_kept_writable(scripted_server):
    """JSON may carry "\\ud800": the digest is of what was sent, the kept text escapes it
    (Parquet takes only valid UTF-8)."""
    server, base = scripted_server
    raw = json.dumps({"choices": [{"index": 0, "delta": {"content": "a\ud800b"},
                                   "finish_reason": "stop"}]})
    server.scripts["odd"] = lambda n, body: Script([
        sse_event(raw.encode()), usage_event(prompt_tokens=1, completion_tokens=3,
                                             total_tokens=4), sse_event(b"[DONE]")])
    row = measure_window(Target(base, "odd"),
                         _spec(warmup=0, requests=1, keep_output_text=True)).rows[0]
    assert row["answer_sha256"] == sha("a\ud800b") and row["answer_chars"] == 3
    assert row["answer_text"] == "a\\ud800b"
    requests_table([row])  # writable


def test_a_record_sent_from_a_worker_keeps_its_digest(scripted_server):
    server, base = scripted_server
    server.scripts["answers"] = answer_script
    from benchledger.client.record import RequestRecord, new_record
    from benchledger.client.tally import UsageTally

    record = new_record(_spec(keep_output_text=True), False, 0, UsageTally())
    record.http_status = 200
    for piece in ANSWER_PIECES:
        record.received.add(piece)
    back = pickle.loads(pickle.dumps(record))
    assert isinstance(back, RequestRecord)
    assert back.answered() == record.answered()
    assert back.answered()["answer_sha256"] == sha(ANSWER)


def test_keep_output_text_is_a_sweep_wide_default_off():
    text = ('[sweep]\nname = "t"\n[[arms]]\nname = "a"\nserver = "simulator"\n'
            'model = "m"\n[[workloads]]\nname = "code"\n')
    sweep = parse_sweep(text)
    assert sweep.plan(sweep.arms[0]).keep_output_text is False
    kept = parse_sweep(text.replace('[[arms]]', '[defaults]\nkeep_output_text = true\n[[arms]]'))
    assert kept.plan(kept.arms[0]).keep_output_text is True
    per_arm = text.replace('model = "m"', 'model = "m"\nkeep_output_text = true')
    with pytest.raises(ValueError, match="keep_output_text"):
        parse_sweep(per_arm)
