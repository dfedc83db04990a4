"""Raw record schemas: what the measurement writes and the warehouse loads.

Only raw facts live here (monotonic timestamps, usage counts, chunk counts, HTTP status).
Every metric (TTFT, decode rate, ...) is derived in one place: the warehouse's `requests`
view (warehouse/migrations). A metric computed in two places will disagree one day.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa

from benchledger.redaction import shown_location

# One row per HTTP request, warm-up included. Timestamps are time.perf_counter_ns() values
# of the measuring process; the window manifest holds the wall-clock anchor for them.
REQUEST_SCHEMA = pa.schema(
    [
        pa.field("request_id", pa.string(), nullable=False),
        pa.field("window_id", pa.string(), nullable=False),
        pa.field("seq", pa.int32(), nullable=False),
        pa.field("is_warmup", pa.bool_(), nullable=False),
        # completed | failed | unresolved (never dropped: docs/protocol.md, trap T14)
        pa.field("status", pa.string(), nullable=False),
        pa.field("http_status", pa.int32()),
        # Why the request did not complete (failed, unresolved), and on any row what in its
        # usage could not be used ("usage.completion_tokens is not an integer: true").
        pa.field("error", pa.string()),
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("prompt_sha256", pa.string(), nullable=False),  # of the text actually sent
        pa.field("prompt_prefix", pa.string()),  # the unique cold-prompt prefix, if any
        pa.field("max_tokens", pa.int32(), nullable=False),  # the target, never a numerator
        pa.field("temperature", pa.float64(), nullable=False),
        # Token counts exactly as the server reported them (even negative or absurd: a gate
        # rule blocks those); NULL when not reported or not an integer in int64 range.
        pa.field("prompt_tokens", pa.int64()),  # usage.prompt_tokens
        # From where token_source says: usage.completion_tokens, the entries of the streamed
        # logprobs, or the server tokenizer's count of the received text.
        pa.field("output_tokens", pa.int64()),
        pa.field("cached_tokens", pa.int64()),  # usage.prompt_tokens_details.cached_tokens
        # usage | logprobs | server_tokenizer | missing (the arm's token_count gave no count)
        pa.field("token_source", pa.string(), nullable=False),
        # usage.completion_tokens as reported, whatever token_source is: where the count
        # comes from elsewhere, a gate rule holds the two together.
        pa.field("usage_output_tokens", pa.int64()),
        pa.field("chunks", pa.int32(), nullable=False),  # content-bearing stream events
        pa.field("finish_reason", pa.string()),
        pa.field("t_submit_ns", pa.int64(), nullable=False),
        pa.field("t_first_ns", pa.int64()),
        pa.field("t_last_ns", pa.int64()),
        pa.field("t_done_ns", pa.int64()),
        # perf_counter_ns of every content-bearing event: per-event gaps derive from it.
        pa.field("content_event_ns", pa.list_(pa.int64())),
        # How late the client's event loop was, at most, while the decode span ran (T17:
        # a span shorter than it is a burst); NULL: not measured (warm-up, fewer than 2
        # content events, no probe then, imports: the window's client_lag_p99_ms stands in).
        pa.field("client_lag_ms", pa.float64()),
        # The tokens each of those events carried (token_source 'logprobs': the entries of
        # its logprobs), parallel to content_event_ns; NULL where unknown. Per-token gaps
        # derive from both.
        pa.field("content_event_tokens", pa.list_(pa.int32())),
        # A reasoning model's thinking (chat delta.reasoning_content or delta.reasoning),
        # kept apart from the output content: never in chunks, content_event_ns, t_first_ns
        # or t_last_ns. usage.completion_tokens_details.reasoning_tokens as reported (NULL:
        # not reported or not an int64 integer); output_tokens from usage include them.
        pa.field("reasoning_tokens", pa.int64()),
        pa.field("reasoning_chunks", pa.int64()),  # reasoning-bearing stream events
        # perf_counter_ns of the first and last reasoning-bearing event (NULL: none)
        pa.field("t_first_reasoning_ns", pa.int64()),
        pa.field("t_last_reasoning_ns", pa.int64()),
        # A prepared workload's request (issue #26; NULL for the built-in prompt sets): its
        # multi-turn session and 0-based turn, its shared-prefix group, the input length
        # asked for (synthetic, trace: usage's prompt_tokens says what it was), and when an
        # open-loop schedule (Poisson, a trace) had it due, perf_counter_ns like t_submit_ns.
        pa.field("session", pa.int64()),
        pa.field("turn", pa.int32()),
        pa.field("prefix_group", pa.int64()),
        pa.field("requested_input_tokens", pa.int64()),
        pa.field("t_scheduled_ns", pa.int64()),
        # What came back (issue #42): the sha256 of the answer's text as streamed (UTF-8),
        # and its length in characters; NULL where no 200 answer came (an error page is not
        # an answer). Failed and cut requests keep what they got: the equivalence of two
        # arms compares completed answers only. The reasoning text apart (NULL: none came).
        pa.field("answer_sha256", pa.string()),
        pa.field("answer_chars", pa.int64()),
        pa.field("reasoning_sha256", pa.string()),
        pa.field("reasoning_chars", pa.int64()),
        # The texts themselves, only where the sweep asks ([defaults] keep_output_text; off
        # by default: a user's prompts and answers may be private).
        pa.field("answer_text", pa.string()),
        pa.field("reasoning_text", pa.string()),
    ]
)


def requests_table(rows: list[dict]) -> pa.Table:
    """Build the Arrow table for one window's request rows, checking the schema."""
    return pa.Table.from_pylist(rows, schema=REQUEST_SCHEMA)


def file_sha256(path: str | Path) -> str:
    """The sha256 a raw file is known by (manifests name their files by it; the warehouse
    loads each once by it), read in blocks: a window's Parquet file can be hundreds of MB."""
    with Path(path).open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


# Raw files are written by the measuring node and read by the loader with DuckDB, both
# through the file system: a local path, or a shared one (NFS, a mounted bucket). An
# object store (s3://) is benchledger.raw.store's: it keeps a local copy on each node.
LOCAL_SCHEMES = ("", "file")


def storage_path(location: str | Path) -> Path:
    """A raw-storage location as a path: a plain path or a file:// URL. Any other URL
    (s3://, gs://, ...) is refused with the reason, rather than written to a folder named
    after it."""
    text = str(location)
    scheme, sep, rest = text.partition("://")
    if not sep:
        return Path(text)
    shown = shown_location(text)  # a URL may carry a credential: never echoed
    if scheme.lower() not in LOCAL_SCHEMES:
        raise ValueError(f"{shown}: {scheme}:// is not supported here; use a path (or "
                         "file://): raw files may also live in an S3-compatible object "
                         "store (--data-dir s3://bucket/prefix), the warehouse is a local "
                         "DuckDB file")
    if rest and not rest.startswith("/"):
        raise ValueError(f"raw storage {shown}: a file:// URL needs an absolute path "
                         "(file:///data/bench)")
    return Path(rest)
