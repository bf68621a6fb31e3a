"""HTTP/1.1 as the proxy's engine leg reads it: an answer's head, and where a chunked body
ends in the blocks that pass through (``agents.relay`` hands the bytes on unchanged)."""

from __future__ import annotations

from dataclasses import dataclass

MAX_HEAD_BYTES = 64 * 1024
"""An engine's answer head (status line and headers) larger than this is refused."""

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "expect",  # the agent's server answered the client's 100-continue itself
    }
)
"""Headers that belong to one connection, not to the message (RFC 9110, 7.6.1); each side
frames its own body."""


class RelayError(Exception):
    """The engine refused the connection, closed it before a whole head, sent a head that
    is not HTTP, or stopped mid-answer."""


_HEX = b"0123456789abcdefABCDEF"


class BodyEnd:
    """Finds where a chunked body ends in the blocks that pass through, without keeping
    them: the state between two blocks is a partial size line, the bytes of the current
    chunk still to come, or the trailer's partial line."""

    __slots__ = ("_line", "_skip", "_trailer", "done")

    def __init__(self) -> None:
        self._line = b""
        self._skip = 0  # data bytes of the current chunk (and its CRLF) still to come
        self._trailer = False
        self.done = False

    def feed(self, data: bytes) -> int | None:
        """How many bytes of ``data`` belong to the body if it ends in them, else None."""
        pos, size = 0, len(data)
        while pos < size:
            if self._skip:
                step = min(self._skip, size - pos)
                self._skip -= step
                pos += step
                continue
            eol = data.find(b"\n", pos)
            if eol < 0:
                self._line += data[pos:]
                if len(self._line) > 4096:
                    raise RelayError("the engine's chunked body has a line over 4 KiB")
                return None
            line = (self._line + data[pos:eol]).rstrip(b"\r")
            self._line = b""
            pos = eol + 1
            if self._trailer:
                if not line:  # the empty line after the trailer fields: the end
                    self.done = True
                    return pos
                continue
            digits = line.split(b";", 1)[0].strip()
            if not digits or digits.strip(_HEX) or len(digits) > 15:
                raise RelayError(f"the engine's chunked body is malformed: {line[:40]!r}")
            length = int(digits, 16)
            if length == 0:
                self._trailer = True
            else:
                self._skip = length + 2  # the chunk's data and its CRLF
        return None


@dataclass(frozen=True)
class Head:
    """An engine's answer head, as the client will get it."""

    status: int
    reason: str
    headers: list[tuple[str, str]]
    """Its end-to-end headers, hop-by-hop ones left out."""
    framing: str
    """``chunked``, ``length``, ``close`` (ends when the engine closes) or ``none``."""
    length: int | None
    reuse: bool
    """Whether the engine keeps the connection after this answer."""


def parse_head(raw: bytes, method: str) -> Head:
    """The head of an HTTP/1.x answer (without its blank line)."""
    try:
        text = raw.decode("latin-1")
        status_line, *lines = text.split("\r\n")
        version, code, *reason = status_line.split(" ", 2)
        if not version.startswith("HTTP/1."):
            raise ValueError(status_line)
        status = int(code)
    except ValueError:
        raise RelayError(f"the engine's answer is not HTTP: {raw[:60]!r}") from None
    headers: list[tuple[str, str]] = []
    chunked, length, close = False, None, version == "HTTP/1.0"
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep:
            raise RelayError(f"the engine's answer has a malformed header: {line[:60]!r}")
        key, value = name.strip().lower(), value.strip()
        if key == "transfer-encoding":
            chunked = value.lower().endswith("chunked")
        elif key == "content-length":
            if not value.isdigit():
                raise RelayError(f"the engine's answer has a bad length: {value[:40]!r}")
            length = int(value)
        elif key == "connection":
            close = "close" in value.lower() or (close and "keep-alive" not in value.lower())
        if key not in HOP_BY_HOP:
            headers.append((name.strip(), value))
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        framing = "none"
    elif chunked:
        framing = "chunked"
    elif length is not None:
        framing = "length"
    else:
        framing, close = "close", True
    reason_text = reason[0] if reason else ""
    return Head(status, reason_text, headers, framing, length, not close)
