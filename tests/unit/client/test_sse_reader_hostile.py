"""The SSE reader against what a hostile probe sent (issue #22, items 13 and 14).

- A long line costs work in proportion to its length, not to its length times the number
  of reads it came in (item 13: the reader re-joined and re-split the unfinished line on
  every read, and a 15 MB line cost 4.3 s of event-loop CPU). No timing: what a read that
  does not end a line may cost is measured as the memory the reader allocates while it
  handles that read (tracemalloc's peak), which is where a copy of the unfinished line
  shows; the old reader copied the whole unfinished line on each read.
- One leading U+FEFF (the UTF-8 byte order mark) is ignored, as the WHATWG specification
  says (item 14: it failed the request, "a line that is not an SSE field"); a second one,
  or one later in the stream, is not a BOM the format allows.

Both with CR, LF and CRLF line ends cut across reads anywhere.
"""

from __future__ import annotations

import itertools
import json
import tracemalloc

import pytest

from benchledger.client import SSEReader, Target, WindowSpec, measure_window, parse_event
from benchledger.prompts import load_prompt_set
from tests.conftest import Script, good_stream

BOM = b"\xef\xbb\xbf"
LINE_BYTES = 15 * 1000 * 1000  # the probe's 15 MB line
READ_SIZES = (1024, 4096, 1500, 3000, 2048)  # the reads it arrives in, in turn (1-4 KB)
# What handling one read that ends no line may allocate: the read itself is kept as it
# came (a reference, not a copy), plus the list that holds the pieces growing now and then.
PER_READ_BOUND = 256 * 1024
# What the read that ends the line may allocate: the line joined once, its value, the
# event's data (a few copies of the line; never one per read).
LINE_END_FACTOR = 4


def event(text: str, finish: str | None = None) -> bytes:
    payload = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def stream_of(texts: list[str], newline: bytes) -> bytes:
    body = b"".join(event(t, "stop" if i == len(texts) - 1 else None)
                    for i, t in enumerate(texts)) + b"data: [DONE]\n\n"
    return body.replace(b"\n", newline)


def read_in(stream: bytes, sizes) -> tuple[list[bytes], SSEReader]:
    reader = SSEReader()
    out: list[bytes] = []
    position = 0
    for size in itertools.cycle(sizes):
        if position >= len(stream) or reader.fault:
            break  # as the client does: a fault ends the reading
        out += reader.feed(stream[position:position + size])
        position += size
    return out, reader


def contents(events: list[bytes]) -> list[object]:
    return [parse_event(data).content if data != b"[DONE]" else "done" for data in events]


# --- item 13: linear in the line's length ------------------------------------------------


def reads_of(payload: bytes, sizes=READ_SIZES) -> list[bytes]:
    chunks, position = [], 0
    for size in itertools.cycle(sizes):
        if position >= len(payload):
            return chunks
        chunks.append(payload[position:position + size])
        position += size
    return chunks


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
def test_a_15_mb_line_in_small_reads_costs_each_read_only_its_own_bytes(newline,
                                                                         monkeypatch):
    """A 15 MB data line (one JSON event whose text is 15 MB), then an ordinary event,
    in reads of 1-4 KB: no read that ends no line allocates more than a small bound (the
    old reader allocated the whole unfinished line, twice, on every read), the read that
    ends it a few times the line, and the events come out whole. The line end may be
    split across two reads (CR in one, LF in the next). The bound on an unfinished line
    still holds with the line kept in pieces: one byte over it fails, at it does not."""
    text = "x" * (LINE_BYTES - 60)
    stream = (event(text) + event(" after", "stop") + b"data: [DONE]\n\n").replace(
        b"\n", newline)
    chunks = reads_of(stream)
    if newline == b"\r\n":  # the long line's CR and LF in two reads
        end = stream.index(b"\r\n")
        chunks = reads_of(stream[:end + 1]) + reads_of(stream[end + 1:])
    reader = SSEReader()
    out: list[bytes] = []
    tracemalloc.start()
    try:
        for number, chunk in enumerate(chunks):
            tracemalloc.reset_peak()
            base, _ = tracemalloc.get_traced_memory()
            got = reader.feed(chunk)
            _, peak = tracemalloc.get_traced_memory()
            spent = peak - base
            if got or b"\n" in chunk or b"\r" in chunk:
                assert spent <= LINE_END_FACTOR * LINE_BYTES, (number, spent)
            else:
                assert spent <= PER_READ_BOUND, (
                    f"read {number} of {len(chunks)} ({len(chunk)} bytes, ending no line) "
                    f"allocated {spent} bytes: the unfinished line was copied")
            out += got
            assert reader.fault is None, reader.fault
    finally:
        tracemalloc.stop()
    assert len(out) == 3 and out[-1] == b"[DONE]"
    first = json.loads(out[0])
    assert first["choices"][0]["delta"]["content"] == text
    assert contents(out) == [1, 1, "done"]

    from benchledger.client import sse

    monkeypatch.setattr(sse, "MAX_EVENT_BYTES", 100_000)
    at_bound = b": " + b"y" * (100_000 - 2)
    bounded = SSEReader()
    for chunk in reads_of(at_bound):
        assert bounded.feed(chunk) == [] and bounded.fault is None
    assert bounded.feed(b"y") == []
    assert bounded.fault == "a line longer than 100000 bytes"


# --- item 14: one leading byte order mark ------------------------------------------------


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
def test_a_leading_bom_is_ignored_wherever_the_reads_cut_it(newline):
    """The stream's first three bytes EF BB BF are dropped, however the reads cut them.
    Only one, and only there: a second BOM, or one that does not open the stream, is the
    start of a line that is no SSE field (the request fails, naming it). Bytes held back
    to see whether they are a BOM are not lost: a stream that ends there is an unfinished
    event, and a stream that turns out not to start with one is read from its first
    byte."""
    plain = stream_of([" a", " b", " c"], newline)
    expected, _ = read_in(plain, [len(plain)])
    assert contents(expected) == [1, 1, 1, "done"]
    with_bom = BOM + plain
    for cut in range(1, 12):  # the BOM itself split across reads, and everything after
        got, reader = read_in(with_bom, [cut])
        assert reader.fault is None, (cut, reader.fault)
        assert got == expected, cut
        assert reader.leftover() is None
    for first in range(1, len(with_bom)):  # two reads, cut at every byte
        reader = SSEReader()
        got = reader.feed(with_bom[:first]) + reader.feed(with_bom[first:])
        assert (got, reader.fault) == (expected, None), first

    plain = stream_of([" a"], newline)
    twice, _ = read_in(BOM + BOM + plain, [5])
    reader = SSEReader()
    assert reader.feed(BOM + BOM + plain) == []
    assert reader.fault and "not an SSE field" in reader.fault and twice == []
    later = SSEReader()
    first_event = event(" a")
    assert later.feed(first_event + BOM + first_event) == [first_event[6:-2]]
    assert later.fault and "not an SSE field after event 1" in later.fault

    reader = SSEReader()
    assert reader.feed(BOM[:2]) == []
    assert reader.leftover() and "unfinished" in reader.leftover()
    not_bom = SSEReader()
    assert not_bom.feed(b"\xef") == []
    assert not_bom.feed(b"\xbbX\n") == []
    assert not_bom.fault and "not an SSE field" in not_bom.fault




def test_a_request_whose_stream_opens_with_a_bom_completes(scripted_server):
    """Over real HTTP: the BOM alone in the first write, then a good answer."""
    server, base = scripted_server
    server.scripts["bom"] = lambda n, body: Script([BOM, 0.01, *good_stream(5)])
    spec = WindowSpec(window_id="run/arm/r0/code-c1", prompts=load_prompt_set("code"),
                      requests=2, warmup=0, concurrency=1, max_tokens=16, temperature=0.0,
                      drain_timeout_s=5.0, request_timeout_s=10.0)
    result = measure_window(Target(base, "bom"), spec)
    rows = [r for r in result.rows if not r["is_warmup"]]
    assert [(r["status"], r["error"], r["output_tokens"], r["chunks"]) for r in rows] == [
        ("completed", None, 5, 5)] * 2
