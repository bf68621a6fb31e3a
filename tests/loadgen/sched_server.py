"""A purpose-built OpenAI-compatible streaming server with a KNOWN schedule.

Run as its own process (``python tests/loadgen/sched_server.py --port 0``); it
prints ``PORT <n>`` when it listens.  It is plain HTTP/1.1 over asyncio
protocols (no framework between the socket and the clock), so the times it
logs are the times bytes arrived and left: ``recv`` is taken in
``data_received`` and every chunk's time right before ``transport.write``.
``GET /_truth`` returns that log.  (Stamps are taken before each write, so
no measurement can honestly come out earlier than the truth.)

Each answer streams like a real llama-server: a role-only first chunk at once,
content chunks at planned offsets (TTFT, then one every ITL), a finish chunk, a
usage chunk with empty ``choices`` plus llama.cpp ``timings``, and ``[DONE]``.
Request number n is the ``X-Request-Id`` suffix (the load generator sends
``<run>-<level>-<n>``), so a retried request gets the same plan.

``--faults mix``: n % 6 == 1 -> HTTP 500; 2 -> connection dropped after two
content chunks; 3 -> stall after the role chunk; 4 -> connection closed before
any response byte; 5 -> a finished stream without content.
``--close-after-stream``: like llama-server, a kept-alive socket is dead after
one streamed answer (a request reusing it is dropped without an answer).
``--tokens-per-chunk K`` packs K tokens into a chunk (usage counts tokens);
``--no-usage`` never sends usage; ``/v1/completions`` answers with ``text``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

PERF = time.perf_counter
HEAD_END = b"\r\n\r\n"


def sse_event(obj: dict[str, Any] | str) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
    payload = b"data: " + data.encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> bytes:
    obj: dict[str, Any] = {"id": "chatcmpl-sched", "object": "chat.completion.chunk"}
    obj["choices"] = (
        [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    )
    obj.update(extra)
    return sse_event(obj)


def _text_chunk(text: str, finish: str | None = None) -> bytes:
    """A ``/v1/completions`` chunk: text, not a delta."""
    choice = {"index": 0, "text": text, "finish_reason": finish}
    return sse_event({"id": "cmpl-sched", "object": "text_completion", "choices": [choice]})


def _content(chat: bool, text: str) -> bytes:
    return _chunk({"content": text}) if chat else _text_chunk(text)


def _unchunk(data: bytes) -> tuple[bytes, bytes] | None:
    """A chunked request body and what follows it; None until the last chunk arrived."""
    body, pos = b"", 0
    while True:
        eol = data.find(b"\r\n", pos)
        if eol < 0:
            return None
        size = int(data[pos:eol].split(b";")[0], 16)
        end = eol + 2 + size + 2
        if len(data) < end:
            return None
        if size == 0:
            return body, data[end:]  # no trailers: the empty line ends the body
        body += data[eol + 2 : eol + 2 + size]
        pos = end


ROLE_CHUNK = _chunk({"role": "assistant", "content": None})
STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
)


class Server:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.truth: dict[str, dict[str, Any]] = {}
        self.reuse_drops = 0
        self.auto = 0

    def ttft_s(self, n: int) -> float:
        a = self.args
        return float(a.ttft_ms + a.ttft_spread_ms * ((n * 37) % 101) / 100.0) / 1000.0


class Conn(asyncio.Protocol):
    def __init__(self, server: Server) -> None:
        self.server = server
        self.buf = b""
        self.recv = 0.0
        self.served = False
        self.busy = False
        self.transport: Any = None  # uvloop's transports are not asyncio.Transport subclasses
        self.timers: list[asyncio.TimerHandle] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in self.timers:
            timer.cancel()

    def data_received(self, data: bytes) -> None:
        if not self.buf:
            self.recv = PERF()  # first byte of a request: the server's clock starts
        self.buf += data
        self._maybe_request()

    def _maybe_request(self) -> None:
        if self.busy or HEAD_END not in self.buf:
            return
        head, _, rest = self.buf.partition(HEAD_END)
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {
            k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])
        }
        if headers.get("transfer-encoding", "").lower() == "chunked":
            unchunked = _unchunk(rest)  # as llama-server takes it (the agent's proxy sends it)
            if unchunked is None:
                return
            body, self.buf = unchunked
        else:
            length = int(headers.get("content-length", "0"))
            if len(rest) < length:
                return
            body, self.buf = rest[:length], rest[length:]
        recv, self.recv = self.recv, PERF()
        self.busy = True
        if method == "GET":  # the truth log, and what other clients probe first
            self._json(*self._get(path))
            return
        self._answer(recv, headers, body, chat=path.endswith("/chat/completions"))

    def _get(self, path: str) -> tuple[int, Any]:
        if path == "/_truth":
            return 200, {"requests": self.server.truth, "reuse_drops": self.server.reuse_drops}
        if path == "/health":
            return 200, {"status": "ok"}
        if path == "/v1/models":
            # the model the tests name: the bench's pre-flight checks it is served
            return 200, {"object": "list", "data": [{"id": "m", "object": "model"}]}
        return 404, {"error": {"message": f"no route {path}"}}

    def _json(self, status: int, obj: Any) -> None:
        assert self.transport is not None
        data = json.dumps(obj).encode()
        self.transport.write(
            b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (status, len(data), data)
        )
        self._done()

    def _done(self) -> None:
        self.busy = False
        self.served = True
        if self.buf:
            self._maybe_request()

    def _answer(self, recv: float, headers: dict[str, str], body: bytes, *, chat: bool) -> None:
        srv, t = self.server, self.transport
        assert t is not None
        if srv.args.close_after_stream and self.served:
            srv.reuse_drops += 1
            t.abort()  # as llama-server: the kept-alive socket is already gone
            return
        req = json.loads(body)
        rid = headers.get("x-request-id") or f"auto-{srv.auto}"
        srv.auto += 1
        tail = rid.rsplit("-", 1)[-1]
        n = int(tail) if tail.isdigit() else 0
        fault = n % 6 if srv.args.faults == "mix" else 0
        entry: dict[str, Any] = {"recv": recv, "chunks": [], "fault": fault, "chat": chat}
        entry["auth"] = headers.get("authorization")
        srv.truth[rid] = entry
        if fault == 4:
            t.abort()
            return
        if fault == 1:
            self._json(500, {"error": {"message": "overloaded", "code": 500}})
            return
        t.write(STREAM_HEAD + (ROLE_CHUNK if chat else b""))
        entry["role_sent"] = PERF()
        if fault == 3:
            return  # stall: never another byte
        tokens = (
            0
            if fault == 5
            else int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
        )
        itl_s = srv.args.itl_ms / 1000.0
        loop = asyncio.get_running_loop()
        # Planned on the loop's clock (monotonic, like perf_counter) from receipt.
        first_due = loop.time() - (PERF() - recv) + srv.ttft_s(n)
        prompt_tokens = len(str(req.get("messages") or req.get("prompt")).split())
        if tokens == 0:
            self._finish(entry, 0, prompt_tokens, itl_s)
            return
        per_chunk = srv.args.tokens_per_chunk
        chunks = -(-tokens // per_chunk)  # several tokens per chunk, like a stream interval
        entry["tokens"] = tokens
        entry["plan"] = (first_due, itl_s, chunks, prompt_tokens)
        self.timers = [loop.call_at(first_due, self._emit, entry, 0)]

    def _emit(self, entry: dict[str, Any], i: int) -> None:
        t = self.transport
        assert t is not None
        if t.is_closing():
            return
        first_due, itl_s, chunks, prompt_tokens = entry["plan"]
        # Stamped just before the write: a preemption after it cannot make the
        # truth later than the bytes really left.
        entry["chunks"].append(PERF())
        t.write(_content(entry["chat"], f" t{i}"))
        if entry["fault"] == 2 and i == 1:
            t.abort()
            return
        if i == chunks - 1:
            self.timers.clear()
            self._finish(entry, entry["tokens"], prompt_tokens, itl_s)
        else:
            # One chunk's timer at a time, each set by the one before: timers due 1 ms
            # apart could fire out of order on a late loop (uvloop's are whole
            # milliseconds), and a chunk written after the stream's end was read by the
            # client as the next answer's status line ("Bad status line: b'87'").
            loop = asyncio.get_running_loop()
            due = first_due + (i + 1) * itl_s
            self.timers = [loop.call_at(due, self._emit, entry, i + 1)]

    def _finish(self, entry: dict[str, Any], tokens: int, prompt_tokens: int, itl_s: float) -> None:
        t = self.transport
        assert t is not None
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": tokens}
        timings = {"predicted_n": tokens, "predicted_per_second": 1.0 / itl_s if itl_s else 0.0}
        finish = _chunk({}, "length") if entry["chat"] else _text_chunk("", "length")
        if not self.server.args.no_usage:
            finish += _chunk(None, usage=usage, timings=timings)
        t.write(finish + sse_event("[DONE]") + b"0\r\n\r\n")
        entry["usage"] = usage
        self._done()


class SchedServer:
    """This server started in a process of its own (for tests and benchmarks)."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__)), "--port", "0", *args],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(f"schedule server did not start: {line!r}")
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}"

    def truth(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + "/_truth", timeout=30) as resp:
            data: dict[str, Any] = json.load(resp)
        return data

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def main(args: argparse.Namespace) -> None:
    server = Server(args)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(lambda: Conn(server), sock=sock, backlog=8192)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    async with srv:
        await srv.serve_forever()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--ttft-ms", type=float, default=50.0)
    p.add_argument("--ttft-spread-ms", type=float, default=100.0)
    p.add_argument("--itl-ms", type=float, default=20.0)
    p.add_argument("--faults", choices=["none", "mix"], default="none")
    p.add_argument("--close-after-stream", action="store_true")
    p.add_argument("--tokens-per-chunk", type=int, default=1)
    p.add_argument("--no-usage", action="store_true", help="never send a usage chunk")
    return p.parse_args(argv)


if __name__ == "__main__":
    try:
        import uvloop
    except ImportError:
        asyncio.run(main(parse()))
    else:
        uvloop.run(main(parse()))
