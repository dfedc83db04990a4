"""benchledger.workloads: the sweep keys, the dataset readers and every error they name.

Preparing, lengths, sessions, traces and rendering: test_workloads_prepare.py.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pytest
from pydantic import ValidationError

from benchledger.workloads import WorkloadError, WorkloadSource, jsonio, read_dataset
from benchledger.workloads.jsonio import json_strings, messages_json


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def error_of(path: Path, fmt: str = "auto") -> str:
    with pytest.raises(WorkloadError) as caught:
        read_dataset(path, fmt)  # type: ignore[arg-type]
    return str(caught.value)


# ---- the sweep keys ----

def test_kind_and_multi_turn_follow_the_keys():
    assert WorkloadSource().kind == "builtin"
    assert WorkloadSource(dataset="d.jsonl").kind == "dataset"
    assert WorkloadSource(trace="t.jsonl").kind == "trace"
    synthetic = WorkloadSource(input_length={"distribution": "fixed", "value": 8})
    assert synthetic.kind == "synthetic" and not synthetic.multi_turn
    assert WorkloadSource(turns=3).multi_turn
    # output_length alone keeps the built-in prompts (only their targets change)
    assert WorkloadSource(output_length={"distribution": "fixed", "value": 8}).kind == "builtin"


@pytest.mark.parametrize(("keys", "message"), [
    ({"dataset": "d.jsonl", "trace": "t.jsonl"}, "`dataset` and `trace` are two sources"),
    ({"dataset": "d.jsonl", "input_length": {"distribution": "fixed", "value": 5}},
     "`input_length` cannot go with `dataset`"),
    ({"trace": "t.jsonl", "output_length": {"distribution": "fixed", "value": 5}, "turns": 2},
     "it cannot go with `output_length`, `turns`"),
    ({"trace": "t.jsonl", "shared_prefix": {"groups": 2, "tokens": 10}}, "`shared_prefix`"),
    ({"history": "dataset", "turns": 2}, '`history = "dataset"` replays a dataset'),
    ({"dataset": "d.jsonl", "think_time_s": 1.0}, "apply to multi-turn workloads: set `turns`"),
    ({"time_scale": 2.0}, "`time_scale` applies to a `trace`"),
    ({"sampling": "seeded"}, "`sampling` applies to a `dataset`"),
    ({"dataset_format": "jsonl"}, "`dataset_format` applies to a `dataset`"),
    ({"turns": 1}, "greater than or equal to 2"),
    ({"turns": 2, "think_time_s": 4000}, "less than or equal to 3600"),
    ({"trace": "t.jsonl", "time_scale": 0}, "greater than 0"),
    ({"shared_prefix": {"groups": 0, "tokens": 5}}, "greater than or equal to 1"),
    ({"shared_prefix": {"groups": 100_001, "tokens": 5}}, "less than or equal to 100000"),
    ({"input_length": {"distribution": "uniform", "min": 9, "max": 3}}, "min (9) is above max"),
    ({"input_length": {"distribution": "normal", "mean": 9, "stddev": 1, "min": 9, "max": 3}},
     "min (9) is above max"),
    ({"input_length": {"distribution": "fixed", "value": 0}}, "greater than or equal to 1"),
    ({"input_length": {"distribution": "fixed", "value": 1_000_001}}, "less than or equal"),
    ({"input_length": {"distribution": "poisson", "mean": 3}}, "does not match any of the"),
    ({"input_length": {"distribution": "fixed", "value": 3, "mean": 2}}, "Extra inputs"),
    ({"dataset": "d.jsonl", "prompts": "x"}, "Extra inputs"),
])
def test_keys_that_do_not_go_together_are_refused_by_name(keys, message):
    with pytest.raises(ValidationError) as caught:
        WorkloadSource(**keys)
    assert message in str(caught.value)


def test_output_length_with_a_dataset_and_a_dump_round_trip_are_accepted():
    source = WorkloadSource(dataset="d", output_length={"distribution": "lognormal",
                                                        "median": 200, "sigma": 0.5},
                            turns=2, history="dataset", think_time_s=1.5)
    again = WorkloadSource(**source.model_dump())  # defaults given back are no error
    assert again == source and again.output_length.median == 200
    with pytest.raises(ValidationError):
        source.turns = 3  # frozen


# ---- JSON Lines ----

def test_jsonl_rows_ids_lines_and_provenance(tmp_path):
    data = ('{"prompt": "one", "max_tokens": 7, "input_tokens": 3}\n\n  \n'
            '{"messages": [{"role": "system", "content": "be brief"}, '
            '{"role": "user", "content": "two"}], "id": 12}\n'
            '{"prompt": "three", "id": "q3", "extra": {"ignored": [1, 2]}}')
    path = write(tmp_path / "chat.jsonl", data)
    ds = read_dataset(path)
    rows = ds.table.to_pylist()
    assert [r["id"] for r in rows] == ["chat:1", "12", "q3"]  # default: <stem>:<line>
    assert [r["line"] for r in rows] == [1, 4, 5]  # blank lines skipped, counted
    assert rows[0]["prompt"] == "one" and rows[0]["max_tokens"] == 7
    assert rows[0]["input_tokens"] == 3 and rows[2]["max_tokens"] is None
    assert rows[1]["prompt"] is None
    assert rows[1]["messages"] == [{"role": "system", "content": "be brief"},
                                   {"role": "user", "content": "two"}]
    assert ds.provenance("chat.jsonl") == {
        "path": "chat.jsonl", "sha256": hashlib.sha256(data.encode()).hexdigest(),
        "rows": 3, "format": "jsonl"}


@pytest.mark.parametrize(("data", "line", "what"), [
    (b'{"prompt": "ok"}\n{"prompt": "a\xffb"}\n', 2, "not UTF-8: byte 0xff at offset 30"),
    (b'{"prompt": "ok"}\n\n{"prompt": "x"\n', 3, "bad JSON: Expecting ',' delimiter (column"),
    (b'{"prompt": "ok"}\n[1, 2]\n', 2, "not a JSON object but a list"),
    (b'"just text"\n', 1, "not a JSON object but a string"),
    (b'{"max_tokens": 3}\n', 1, "no `prompt` or `messages`"),
    (b'{"prompt": null, "messages": null}\n', 1, "no `prompt` or `messages`"),
    (b'{"prompt": "a", "messages": [{"role": "user", "content": "b"}]}\n', 1,
     "both `prompt` and `messages`: give one"),
    (b'{"prompt": "ok"}\n{"prompt": " \\n\\t "}\n', 2, "empty prompt"),
    (b'{"prompt": ""}\n', 1, "empty prompt"),
    (b'{"prompt": 5}\n', 1, "`prompt` is not a string but the number 5"),
    (b'{"prompt": "a\\ud800"}\n', 1, "`prompt` is not valid Unicode"),
    (b'{"messages": []}\n', 1, "`messages` is empty"),
    (b'{"messages": "hi"}\n', 1, "`messages` is not a list but a string"),
    (b'{"messages": [null]}\n', 1, "`messages[0]` is not an object but null"),
    (b'{"messages": [{"role": "usr", "content": "x"}]}\n', 1,
     "`messages[0].role` is a string 'usr': expected one of system, developer, user"),
    (b'{"messages": [{"content": "x"}]}\n', 1, "`messages[0].role` is null"),
    (b'{"messages": [{"role": "user", "content": ["x"]}]}\n', 1,
     "`messages[0].content` is not a string but a list"),
    (b'{"messages": [{"role": "user"}]}\n', 1, "`messages[0].content` is not a string but null"),
    (b'{"messages": [{"role": "system", "content": ""}, {"role": "user", "content": " "}]}\n',
     1, "empty prompt: every message's content is empty"),
    (b'{"prompt": "a", "max_tokens": 0}\n', 1, "`max_tokens` must be a positive integer up to "
                                               "1000000, not the number 0"),
    (b'{"prompt": "a", "max_tokens": -3}\n', 1, "`max_tokens` must be a positive integer"),
    (b'{"prompt": "a", "max_tokens": 5.0}\n', 1, "not the number 5.0"),
    (b'{"prompt": "a", "max_tokens": "5"}\n', 1, "`max_tokens` must be a positive integer up "
                                                 "to 1000000, not a string"),
    (b'{"prompt": "a", "max_tokens": true}\n', 1, "not true/false"),
    (b'{"prompt": "a", "max_tokens": 1000001}\n', 1, "not the number 1000001"),
    (b'{"prompt": "a", "output_tokens": 0}\n', 1, "`output_tokens` must be a positive integer"),
    (b'{"prompt": "a", "id": ""}\n', 1, "`id` is empty"),
    (b'{"prompt": "a", "id": 1.5}\n', 1, "`id` must be a string or an integer, not the number"),
    (b'{"prompt": "a", "id": [1]}\n', 1, "`id` must be a string or an integer, not a list"),
    (b'{"prompt": "a", "prompt": "b"}\n', 1, "bad JSON: key 'prompt' appears twice"),
    (b'{"prompt": "a", "max_tokens": NaN}\n', 1, "bad JSON: NaN is not a JSON value"),
    (b'{"prompt": "a", "id": "x"}\n{"prompt": "b"}\n{"prompt": "c", "id": "x"}\n', 3,
     "duplicate id 'x' (first on line 1)"),
    # ids of both types: pyarrow refuses the column, the line scan reads the file
    (b'{"prompt": "a", "id": 1}\n{"prompt": "b", "id": "z"}\n{"prompt": "c", "id": 1}\n', 3,
     "duplicate id '1' (first on line 1)"),
    # a default id taken by an explicit one
    (b'{"prompt": "a"}\n{"prompt": "b", "id": "d:1"}\n', 2, "duplicate id 'd:1' (first on "
                                                            "line 1)"),
])
def test_every_jsonl_error_names_the_file_the_line_and_what(tmp_path, data, line, what):
    path = write(tmp_path / "d.jsonl", data)
    message = error_of(path)
    assert message.startswith(f"{path}, line {line}: ") and what in message, message


@pytest.mark.parametrize("data", [b"", b"\n \n\t\n"])
def test_an_empty_dataset_is_an_error(tmp_path, data):
    path = write(tmp_path / "d.jsonl", data)
    assert error_of(path) == f"{path}: empty dataset: no requests"


def test_a_missing_dataset_or_an_unknown_suffix_is_an_error(tmp_path):
    assert error_of(tmp_path / "nope.jsonl") == f"dataset not found: {tmp_path / 'nope.jsonl'}"
    text = write(tmp_path / "d.txt", '{"prompt": "a"}\n')
    assert "cannot tell the format of" in error_of(text) and "dataset_format" in error_of(text)
    assert read_dataset(text, "jsonl").rows == 1  # named explicitly, any suffix
    empty = tmp_path / "empty"
    empty.mkdir()
    write(empty / "notes.txt", "x")
    assert error_of(empty) == f"dataset folder {empty} has no .jsonl or .json file"


def test_a_bad_row_deep_in_a_big_file_is_named_by_its_line(tmp_path):
    rows = [{"prompt": f"question {i}", "max_tokens": 10} for i in range(2000)]
    rows[1499]["max_tokens"] = 0
    path = write(tmp_path / "big.jsonl", "\n" + jsonl(rows))  # a blank first line
    assert error_of(path).startswith(f"{path}, line 1501: `max_tokens` must be a positive")


def test_lines_longer_than_a_read_block_and_crlf_endings(tmp_path):
    long = "word " * 400_000  # 2 MB: longer than pyarrow's 1 MiB block
    path = write(tmp_path / "d.jsonl", '{"prompt": "short"}\r\n\r\n'
                 + json.dumps({"prompt": long, "id": "long"}) + '\r\n{"prompt": "end"}')
    ds = read_dataset(path)
    assert ds.table["prompt"].to_pylist() == ["short", long, "end"]
    assert ds.table["line"].to_pylist() == [1, 3, 4]
    assert ds.table["id"].to_pylist() == ["d:1", "long", "d:4"]


def test_a_valid_file_is_read_without_the_line_scan(tmp_path, monkeypatch):
    """The success path is columnar: the per-line Python scan runs only for errors."""
    rows = [{"prompt": f"question {i}", "id": i} for i in range(2000)]
    path = write(tmp_path / "big.jsonl", jsonl(rows))

    def refuse(*args):
        raise AssertionError("the line scan ran on a valid file")

    monkeypatch.setattr("benchledger.workloads.datasets.scan", refuse)
    ds = read_dataset(path)
    assert ds.rows == 2000 and ds.table["id"][1999].as_py() == "1999"


def test_the_slow_path_gives_the_same_rows(tmp_path):
    """A file pyarrow cannot read in columns (ids of two types) gives what the fast path
    gives for the same requests."""
    fast = write(tmp_path / "fast.jsonl", '{"prompt": "a", "id": "1", "max_tokens": 3}\n'
                                          '{"messages": [{"role": "user", "content": "b"}], '
                                          '"id": "z"}\n')
    slow = write(tmp_path / "slow.jsonl", '{"prompt": "a", "id": 1, "max_tokens": 3}\n'
                                          '{"messages": [{"role": "user", "content": "b"}], '
                                          '"id": "z"}\n')
    assert read_dataset(fast).table.equals(read_dataset(slow).table)


# ---- ShareGPT ----

SHAREGPT = [
    {"id": "c1", "conversations": [
        {"from": "system", "value": "be kind"}, {"from": "human", "value": "hello"},
        {"from": "gpt", "value": "hi there friend"}, {"from": "human", "value": "more"},
        {"from": "gpt", "value": "sure"}]},
    {"conversations": [{"role": "user", "content": "alone"}]},
]


def test_sharegpt_rows_prompt_answer_and_conversation(tmp_path):
    path = write(tmp_path / "sg.json", json.dumps(SHAREGPT, indent=1))
    ds = read_dataset(path)
    assert ds.format == "sharegpt" and ds.rows == 2
    rows = ds.table.to_pylist()
    assert rows[0]["id"] == "c1" and rows[0]["prompt"] == "hello"
    assert rows[0]["answer"] == "hi there friend"
    assert [m["role"] for m in rows[0]["messages"]] == ["system", "user", "assistant", "user",
                                                       "assistant"]
    line = json.dumps(SHAREGPT, indent=1).splitlines().index(" {", 2) + 1  # second object
    assert rows[1]["id"] == f"sg:{line}" and rows[1]["line"] == line
    assert rows[1]["answer"] is None
    # dataset_format = "sharegpt" reads any suffix; "jsonl" reads a .json file as lines
    other = write(tmp_path / "sg.txt", json.dumps(SHAREGPT))
    assert read_dataset(other, "sharegpt").rows == 2
    assert "not a JSON object but a list" in error_of(other, "jsonl")


def sharegpt_text(objects: list[str]) -> str:
    return "[\n" + ",\n".join(objects) + "\n]\n"


GOOD = '{"conversations": [{"from": "human", "value": "q"}]}'


@pytest.mark.parametrize(("text", "line", "what"), [
    (b'[\n' + GOOD.encode() + b',\n{"conversations": [{"from": "human", "value": "\xfe"}]}]',
     3, "not UTF-8: byte 0xfe at offset"),
    (sharegpt_text([GOOD, '{"conversations": [{"from": "human" "value": "q"}]}']), 3,
     "bad JSON: Expecting ',' delimiter (column 37)"),
    ('{"conversations": []}', 1, "not a ShareGPT file: the top level is not a JSON array"),
    (sharegpt_text([GOOD, '[1, 2]']), 3, "not a JSON object but a list"),
    (sharegpt_text([GOOD, '{"id": "x"}']), 3, "no `conversations`"),
    (sharegpt_text([GOOD, '{"conversations": "q"}']), 3, "`conversations` is not a list"),
    (sharegpt_text(['{"conversations": [5]}']), 2, "`conversations[0]` is not an object"),
    (sharegpt_text(['{"conversations": [{"from": "bing", "value": "q"}]}']), 2,
     "`conversations[0].from` is a string 'bing': expected human, gpt or system"),
    (sharegpt_text(['{"conversations": [{"from": "human", "value": 3}]}']), 2,
     "`conversations[0].value` is not a string but the number 3"),
    (sharegpt_text([GOOD, '{"conversations": [{"from": "gpt", "value": "a"}]}']), 3,
     "no human turn"),
    (sharegpt_text(['{"conversations": [{"from": "human", "value": "  "}]}']), 2,
     "empty prompt (the first human turn)"),
    (sharegpt_text(['{"id": 4, ' + GOOD[1:], GOOD, '{"id": "4", ' + GOOD[1:]]), 4,
     "duplicate id '4' (first on line 2)"),
    (sharegpt_text([GOOD]) + "[]", 4, "bad JSON: extra data after the array"),
    (sharegpt_text([GOOD]).replace("\n]", "\n}"), 3, "bad JSON: expected ',' or ']'"),
])
def test_every_sharegpt_error_names_the_file_the_line_and_what(tmp_path, text, line, what):
    path = write(tmp_path / "sg.json", text)
    message = error_of(path)
    assert message.startswith(f"{path}, line {line}: ") and what in message, message


@pytest.mark.parametrize("text", ["", "[]", "  [ \n ]  "])
def test_an_empty_sharegpt_file_is_an_error(tmp_path, text):
    assert "empty dataset" in error_of(write(tmp_path / "sg.json", text))


# ---- folders and sha256 ----

def test_a_folder_is_its_files_in_order_with_a_sha256_of_their_listing(tmp_path):
    root = tmp_path / "data"
    b = write(root / "b.jsonl", '{"prompt": "from b"}\n')
    a = write(root / "sub" / "a.json", json.dumps(SHAREGPT))
    c = write(root / "a.jsonl", '{"prompt": "from a"}\n{"prompt": "again a"}\n')
    write(root / "readme.txt", "not a dataset")
    write(root / ".hidden" / "x.jsonl", '{"prompt": "hidden"}\n')
    ds = read_dataset(root)
    files = [(f.path, f.format, f.rows) for f in ds.files]
    assert files == [("a.jsonl", "jsonl", 2), ("b.jsonl", "jsonl", 1),
                     ("sub/a.json", "sharegpt", 2)]
    assert ds.format == "mixed" and ds.rows == 5
    assert ds.table["id"].to_pylist()[:3] == ["a:1", "a:2", "b:1"]  # relative path, no suffix
    assert ds.table["id"].to_pylist()[3] == "c1"
    listing = "".join(f"{name}\t{hashlib.sha256(p.read_bytes()).hexdigest()}\n"
                      for name, p in [("a.jsonl", c), ("b.jsonl", b), ("sub/a.json", a)])
    assert ds.sha256 == hashlib.sha256(listing.encode()).hexdigest()
    record = ds.provenance("data")
    assert record["files"][2] == {"path": "sub/a.json", "format": "sharegpt",
                                  "sha256": hashlib.sha256(a.read_bytes()).hexdigest(),
                                  "rows": 2}
    before = ds.sha256
    write(b, '{"prompt": "from B"}\n')  # one byte
    assert read_dataset(root).sha256 != before


def test_one_changed_byte_changes_a_files_sha256(tmp_path):
    path = write(tmp_path / "d.jsonl", '{"prompt": "abc"}\n')
    first = read_dataset(path).sha256
    write(path, '{"prompt": "abd"}\n')
    assert read_dataset(path).sha256 != first
    assert read_dataset(path).sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_duplicate_id_across_files_names_both(tmp_path):
    write(tmp_path / "a.jsonl", '{"prompt": "x", "id": "same"}\n')
    second = write(tmp_path / "b.jsonl", '{"prompt": "y"}\n{"prompt": "y", "id": "same"}\n')
    assert error_of(tmp_path) == (f"{second}, line 2: duplicate id 'same' (first on line 1 of "
                                  f"{tmp_path / 'a.jsonl'})")


# ---- the columnar JSON encoding ----

def test_json_strings_and_messages_are_what_json_dumps_writes():
    texts = ['plain', 'quote " and \\ backslash', "tab\tnew\nline\r\x00\x01\x1f\x7f",
             "unicode é ✓ 😀 \u2028", "", "\b\f"]
    assert json_strings(pa.array(texts)).to_pylist() == [
        json.dumps(t, ensure_ascii=False) for t in texts]
    lists = [[{"role": "user", "content": t} for t in texts[:3]], None,
             [{"role": "system", "content": texts[3]}]]
    encoded = messages_json(pa.array(lists, jsonio.MESSAGES_TYPE)).to_pylist()
    assert encoded[1] is None
    assert encoded[0] == json.dumps(lists[0], ensure_ascii=False)
    assert json.loads(encoded[2]) == lists[2]
