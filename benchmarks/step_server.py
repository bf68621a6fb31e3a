"""An OpenAI-compatible streaming server that decodes in lock-step, as a batching engine
does: every ``--step-ms`` one token goes to every open stream at once.

Run as its own process from the repository root (``python -m benchmarks.step_server --port
0``; it prints ``PORT <n>``).  It offers exactly (open streams × 1000 / step_ms) tokens
per second and spends little CPU doing so (one timer per step, pre-encoded chunks), so a client that
receives less is the client's limit, not the server's.  ``GET /_stats`` says how many
chunks it wrote and how many steps ran late (a server starved of CPU would show there).
Plain HTTP/1.1 with keep-alive, chunked SSE, llama.cpp-like usage chunk at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import time
from typing import Any

from tests.loadgen.sched_server import HEAD_END, sse_event


def _chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    obj = {"id": "chatcmpl-step", "object": "chat.completion.chunk", "choices": choices}
    return sse_event({**obj, **extra})


STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
) + _chunk({"role": "assistant", "content": None})
TOKEN = _chunk({"content": " t"})


class Stream:
    __slots__ = ("conn", "left", "prompt_tokens", "tokens")

    def __init__(self, conn: Conn, tokens: int, prompt_tokens: int) -> None:
        self.conn, self.tokens, self.left = conn, tokens, tokens
        self.prompt_tokens = prompt_tokens


class Server:
    def __init__(self, step_s: float) -> None:
        self.step_s = step_s
        self.streams: list[Stream] = []
        self.joining: list[Stream] = []
        self.chunks = 0
        self.steps = 0
        self.late_steps = 0

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._due = loop.time() + self.step_s
        loop.call_at(self._due, self._step)

    def _step(self) -> None:
        loop = asyncio.get_running_loop()
        if loop.time() - self._due > self.step_s:
            self.late_steps += 1
        self.steps += 1
        if self.joining:
            self.streams += self.joining
            self.joining = []
        kept = []
        for s in self.streams:
            t = s.conn.transport
            if t.is_closing():
                continue
            s.left -= 1
            self.chunks += 1
            if s.left:
                t.write(TOKEN)
                kept.append(s)
                continue
            usage = {"prompt_tokens": s.prompt_tokens, "completion_tokens": s.tokens}
            t.write(
                TOKEN + _chunk({}, "length") + _chunk(None, usage=usage) + sse_event("[DONE]")
                + b"0\r\n\r\n"
            )  # fmt: skip
            s.conn.done()
        self.streams = kept
        self._due += self.step_s  # a fixed cadence: a late step does not shift the next
        loop.call_at(self._due, self._step)


class Conn(asyncio.Protocol):
    def __init__(self, server: Server) -> None:
        self.server = server
        self.buf = b""
        self.busy = False
        self.transport: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._maybe_request()

    def done(self) -> None:
        self.busy = False
        if self.buf:
            self._maybe_request()

    def _maybe_request(self) -> None:
        if self.busy or HEAD_END not in self.buf:
            return
        head, _, rest = self.buf.partition(HEAD_END)
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        if len(rest) < length:
            return
        body, self.buf = rest[:length], rest[length:]
        self.busy = True
        if method == "GET":
            srv = self.server
            stats = {"chunks": srv.chunks, "steps": srv.steps, "late_steps": srv.late_steps,
                     "cpu_s": time.process_time()}  # fmt: skip
            answers = {
                "/v1/models": {"object": "list", "data": [{"id": "m", "object": "model"}]},
                "/health": {"status": "ok"},
                "/_stats": stats,
            }
            obj = answers.get(path, {"error": {"message": f"no route {path}"}})
            status = 200 if path in answers else 404
            data = json.dumps(obj).encode()
            self.transport.write(
                b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (status, len(data), data)
            )
            self.done()
            return
        req = json.loads(body)
        tokens = int(req.get("max_tokens") or 16)
        prompt = len(str(req.get("messages") or req.get("prompt")).split())
        self.transport.write(STREAM_HEAD)
        self.server.joining.append(Stream(self, tokens, prompt))


async def main(args: argparse.Namespace) -> None:
    server = Server(args.step_ms / 1000.0)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(lambda: Conn(server), sock=sock, backlog=8192)
    server.start()
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    async with srv:
        await srv.serve_forever()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--step-ms", type=float, default=5.0)
    try:
        import uvloop
    except ImportError:
        asyncio.run(main(p.parse_args()))
    else:
        uvloop.run(main(p.parse_args()))
