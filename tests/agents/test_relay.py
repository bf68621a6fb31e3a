"""The proxy's leg to the engine (``agents.relay``): where an answer's body ends however the
engine's bytes are cut, what its head says, and a real connection's answer handed to a real
client connection unchanged, or as chunks where the engine's answer ends at its close."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.http1 import BodyEnd, RelayError, parse_head
from agents.relay import EnginePool
from tests.waiting import PROPERTY_DEADLINE_MS

SETTINGS = settings(
    max_examples=int(os.environ.get("PROP_EXAMPLES", "25")),
    deadline=PROPERTY_DEADLINE_MS,
    suppress_health_check=[HealthCheck.too_slow],
)


def chunked(pieces: list[bytes], extension: bytes = b"", trailer: bytes = b"") -> bytes:
    body = b"".join(b"%x%s\r\n%s\r\n" % (len(p), extension, p) for p in pieces if p)
    return body + b"0\r\n" + trailer + b"\r\n"


def cuts(data: bytes, points: list[int]) -> list[bytes]:
    at = sorted({min(p, len(data)) for p in points} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(at)]


@SETTINGS
@given(
    pieces=st.lists(st.binary(min_size=0, max_size=300), max_size=8),
    extension=st.sampled_from([b"", b";name=value"]),
    trailer=st.sampled_from([b"", b"X-Usage: 8\r\n", b"A: 1\r\nB: 2\r\n"]),
    points=st.lists(st.integers(min_value=0, max_value=4000), max_size=12),
    after=st.binary(max_size=20),
)
def test_the_end_of_a_chunked_body_is_found_wherever_the_bytes_are_cut(
    pieces: list[bytes], extension: bytes, trailer: bytes, points: list[int], after: bytes
) -> None:
    """Every block before the last is the body's whole; the last is cut exactly at the end
    (bytes after it, such as a next answer, stay out)."""
    body = chunked(pieces, extension, trailer)
    end, seen = BodyEnd(), 0
    for block in cuts(body + after, points):
        cut = end.feed(block)
        if cut is not None:
            assert seen + cut == len(body)
            assert end.done
            return
        seen += len(block)
        assert seen < len(body)
    pytest.fail("the end was not found")


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"zz\r\n", "the engine's chunked body is malformed: b'zz'"),
        (b"5\r\nhello\r\n-1\r\n", "the engine's chunked body is malformed: b'-1'"),
        (b"5" * 5000, "the engine's chunked body has a line over 4 KiB"),
    ],
)
def test_a_chunked_body_that_is_not_one_is_the_relays_error(data: bytes, error: str) -> None:
    with pytest.raises(RelayError) as caught:
        BodyEnd().feed(data)
    assert str(caught.value) == error


@pytest.mark.parametrize(
    ("head", "method", "framing", "length", "reuse"),
    [
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked", "POST", "chunked", None, True),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 12", "GET", "length", 12, True),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\nConnection: close", "GET", "length", 12, False),
        (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream", "POST", "close", None, False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 3", "GET", "length", 3, False),
        (
            b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\nConnection: keep-alive",
            "GET",
            "length",
            3,
            True,
        ),
        (b"HTTP/1.1 204 No Content", "POST", "none", None, True),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 99", "HEAD", "none", 99, True),
    ],
)
def test_an_answers_head_says_how_its_body_ends(
    head: bytes, method: str, framing: str, length: int | None, reuse: bool
) -> None:
    parsed = parse_head(head, method)
    assert (parsed.status, parsed.framing, parsed.length, parsed.reuse) == (
        int(head.split()[1]),
        framing,
        length,
        reuse,
    )
    # the framing is the proxy's to write, per connection: never passed on
    names = {name.lower() for name, _ in parsed.headers}
    assert not names & {"transfer-encoding", "content-length", "connection"}


@pytest.mark.parametrize(
    ("head", "error"),
    [
        (b"SSH-2.0-OpenSSH_9.2", "the engine's answer is not HTTP: b'SSH-2.0-OpenSSH_9.2'"),
        (b"HTTP/1.1 abc OK", "the engine's answer is not HTTP: b'HTTP/1.1 abc OK'"),
        (b"HTTP/1.1 200 OK\r\nno colon", "the engine's answer has a malformed header: 'no colon'"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1", "the engine's answer has a bad length: '-1'"),
    ],
)
def test_a_head_that_is_not_http_is_the_relays_error(head: bytes, error: str) -> None:
    with pytest.raises(RelayError) as caught:
        parse_head(head, "GET")
    assert str(caught.value) == error


async def _engine(answer: bytes, *, close: bool) -> tuple[asyncio.Server, int]:
    """A loopback engine that reads one request head and sends ``answer``, in pieces."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        for at in range(0, len(answer), 7):  # cut anywhere: heads and chunk lines too
            writer.write(answer[at : at + 7])
            await writer.drain()
        if close:
            writer.close()
        else:
            await reader.read()  # the relay closes an answered connection it cannot reuse

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


@contextlib.asynccontextmanager
async def _client_pair() -> AsyncIterator[tuple[asyncio.Transport, asyncio.StreamReader]]:
    """A real TCP connection: the transport the relay writes to and the reader at the far end."""
    accepted: asyncio.Future[asyncio.Transport] = asyncio.get_running_loop().create_future()

    class Sink(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            accepted.set_result(transport)  # type: ignore[arg-type]

    server = await asyncio.get_running_loop().create_server(Sink, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
    try:
        yield await accepted, reader
    finally:
        writer.close()
        server.close()


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked([b"data: a\n\n", b"x"]),
         chunked([b"data: a\n\n", b"x"])),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world", b"hello world"),
        # no length, no chunks: the engine's close ends it, re-framed as chunks here
        (b"HTTP/1.1 200 OK\r\n\r\nhello world", None),
    ],
)  # fmt: skip
async def test_an_engines_answer_reaches_the_client_as_it_was_framed(
    answer: bytes, expected: bytes | None
) -> None:
    close = expected is None
    server, port = await _engine(answer, close=close)
    pool = EnginePool(asyncio.get_running_loop(), 5.0)
    try:
        async with _client_pair() as (sink, reader):
            conn = await pool.take(("127.0.0.1", port), ahead=False)
            conn.send("GET", b"GET /x HTTP/1.1\r\nHost: e\r\n\r\n")
            assert conn.head is not None and conn.done is not None
            head = await asyncio.wait_for(conn.head, 10)
            assert head.framing == (
                "close" if close else "chunked" if b"chunked" in answer else "length"
            )
            sink.write(conn.take_pending())
            conn.attach(sink, lambda: asyncio.get_running_loop().create_future())
            await asyncio.wait_for(conn.done, 10)
            sink.close()
            got = await asyncio.wait_for(reader.read(), 10)
    finally:
        await pool.close()
        server.close()
    if close:  # the handler writes the last chunk; the body's pieces arrive as chunks
        parts, rest = [], got
        while rest:
            size, _, rest = rest.partition(b"\r\n")
            parts.append(rest[: int(size, 16)])
            rest = rest[int(size, 16) + 2 :]
        assert b"".join(parts) == b"hello world"
    else:
        assert got == expected


async def test_an_engine_that_stops_mid_answer_is_the_relays_error() -> None:
    server, port = await _engine(
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b", close=True
    )
    pool = EnginePool(asyncio.get_running_loop(), 5.0)
    try:
        conn = await pool.take(("127.0.0.1", port), ahead=False)
        conn.send("GET", b"GET /x HTTP/1.1\r\nHost: e\r\n\r\n")
        assert conn.head is not None and conn.done is not None
        await asyncio.wait_for(conn.head, 10)
        with pytest.raises(RelayError, match="the engine stopped mid-answer"):
            await asyncio.wait_for(conn.done, 10)
    finally:
        await pool.close()
        server.close()


async def test_an_engine_that_refuses_is_the_relays_error_in_words() -> None:
    server, port = await _engine(b"", close=True)
    server.close()
    await server.wait_closed()
    pool = EnginePool(asyncio.get_running_loop(), 5.0)
    try:
        with pytest.raises(RelayError, match=r"^Connection refused$"):
            await pool.take(("127.0.0.1", port), ahead=False)
    finally:
        await pool.close()
