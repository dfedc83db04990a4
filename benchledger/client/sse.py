"""Reading a stream of server-sent events, with our own small reader.

The stream is split into events by `SSEReader` rather than httpx-sse, which would decode
bytes with replacement characters and skip lines that are not SSE fields (where llama.cpp's
server puts its errors) without a word, has no bound on an event's size, and stamps an event
when the parser gets to it rather than when the network read delivered it.
"""

from __future__ import annotations

from benchledger.client.text import show

# An event (or an unterminated line) larger than this fails its request: a server that never
# ends a line must not grow the measuring process without bound.
MAX_EVENT_BYTES = 16 * 1024 * 1024


# The UTF-8 byte order mark: one at the very start of a stream is ignored (WHATWG HTML,
# server-sent events: "a single leading U+FEFF BYTE ORDER MARK character must be ignored").
BOM = b"\xef\xbb\xbf"


class SSEReader:
    """Splits a byte stream into the data of its server-sent events (the WHATWG format:
    one leading byte order mark is ignored; lines end in LF, CRLF or CR; `data:` lines
    accumulate until a blank line; `event`, `id`, `retry` and `:` comment lines are
    allowed). What fails the request sets `fault` and stops the reading: an `event: error`
    event, a line that is not an SSE field (plain text, llama.cpp's `error: {...}`), or an
    event or unfinished line larger than MAX_EVENT_BYTES.

    Linear in what it is fed: only a new read is searched for line ends, and an unfinished
    line is kept as the reads it came in (references, not copies), joined once when it
    ends. (Joining it with every read, as this reader once did, cost a 15 MB line 4.3 s
    of the event loop's CPU: quadratic in the line's length.)"""

    __slots__ = ("_tail", "_tail_bytes", "_head", "_after_cr", "_data", "_pending",
                 "_event_type", "events", "fault")

    def __init__(self) -> None:
        self._tail: list[bytes] = []  # the pieces of an unfinished line, in order
        self._tail_bytes = 0
        # The stream's first bytes while they may still be a BOM; None once decided.
        self._head: bytes | None = b""
        self._after_cr = False  # the last chunk ended in CR: an LF opening the next is its pair
        self._data: list[bytes] = []
        self._pending = 0  # bytes in _data
        self._event_type = b""
        self.events = 0  # events dispatched so far
        self.fault: str | None = None

    def feed(self, chunk: bytes) -> list[bytes]:
        """The data of every event that `chunk` completes, in order (up to a fault)."""
        if self._head is not None:
            head = self._head + chunk
            if len(head) < len(BOM) and BOM.startswith(head):
                self._head = head  # too few bytes yet to tell
                return []
            self._head = None
            chunk = head[len(BOM):] if head.startswith(BOM) else head
        if self._after_cr:
            self._after_cr = False
            if chunk.startswith(b"\n"):
                chunk = chunk[1:]
        if b"\r" in chunk:
            self._after_cr = chunk.endswith(b"\r")
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if b"\n" not in chunk:  # the line goes on: keep the read as it came
            if chunk:
                self._tail.append(chunk)
                self._tail_bytes += len(chunk)
                self._check_tail()
            return []
        lines = chunk.split(b"\n")
        if self._tail:  # the unfinished line ends in this read: joined once
            lines[0] = b"".join([*self._tail, lines[0]])
            self._tail.clear()
        last = lines.pop()
        self._tail_bytes = len(last)
        if last:
            self._tail.append(last)
        out: list[bytes] = []
        for line in lines:
            if line.startswith(b"data:"):
                value = line[6:] if line[5:6] == b" " else line[5:]
                self._data.append(value)
                self._pending += len(value)
                if self._pending > MAX_EVENT_BYTES:
                    self.fault = f"an event longer than {MAX_EVENT_BYTES} bytes"
                    return out
            elif not line:
                if self._data:
                    if self._event_type == b"error":
                        self.fault = f"error event: {self._show_data()}"
                        return out
                    out.append(self._dispatch())
            elif not self._field(line):
                return out
        self._check_tail()
        return out

    def _check_tail(self) -> None:
        if self._tail_bytes > MAX_EVENT_BYTES:
            self.fault = f"a line longer than {MAX_EVENT_BYTES} bytes"

    def _dispatch(self) -> bytes:
        data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
        self._data, self._pending, self._event_type = [], 0, b""
        self.events += 1
        return data

    def _show_data(self) -> str:
        return show(b"\n".join(self._data)[:500].decode("utf-8", "backslashreplace"), 500)

    def _field(self, line: bytes) -> bool:
        """A line other than data or blank: True if the format allows it."""
        if line.startswith(b":"):
            return True  # a comment (keep-alive)
        name, _, value = line.partition(b":")
        if name == b"event":
            self._event_type = value.strip()
            return True
        if name in (b"id", b"retry"):
            return True
        if name == b"data":  # "data" without a colon: an empty data line
            self._data.append(b"")
            return True
        shown = show(line[:200].decode("utf-8", "backslashreplace"))
        self.fault = f"a line that is not an SSE field after event {self.events}: {shown}"
        return False

    def leftover(self) -> str | None:
        """What the stream left unfinished when it ended (for the error row)."""
        tail = self._head or b"".join(self._tail)[:120]
        if not self._data and not tail:
            return None
        head = b"\n".join([*self._data, tail])[:120]
        return f"an unfinished event at the end: {show(head.decode('utf-8', 'backslashreplace'))}"

