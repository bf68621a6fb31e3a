"""A Hugging Face hub stand-in on 127.0.0.1: the narrow HTTP API ``huggingface_hub``
(2.x) uses to download a repository into its cache, read from its source
(``hf_api.model_info``/``list_repo_tree``, ``file_download.get_hf_file_metadata``/
``http_get``, ``utils._http.hf_raise_for_status``):

* ``GET /api/models/{repo}/revision/{rev}`` (``?blobs=true``): ``id``, ``sha`` and the
  ``siblings`` with ``size``, ``blobId`` and ``lfs`` {``sha256``, ``size``};
* ``GET /api/models/{repo}/tree/{rev}``: the files with ``oid``, ``size``, ``lfs``;
* ``HEAD``/``GET /{repo}/resolve/{rev}/{file}``: ``X-Repo-Commit``, ``ETag`` (the git
  blob id) or for weights ``X-Linked-Etag`` (their sha256) and ``X-Linked-Size``,
  ``Content-Length``; a ``Range: bytes=N-`` request answered 206 with ``Content-Range``;
* errors as the hub words them: ``X-Error-Code`` (``RepoNotFound``,
  ``RevisionNotFound``, ``GatedRepo``) with ``X-Error-Message``.

A repository may be gated (its files need ``Authorization: Bearer <its token>``; its
metadata is public, as on the hub); a file may be served slowly (``rate_bytes_per_s``)
or cut off once (``cut_once``), and every file request is recorded.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from aiohttp import web

from tests.ports import free_port

LFS_SUFFIXES = (".safetensors", ".gguf", ".bin")
CHUNK_BYTES = 16 * 1024
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class HubRepo:
    files: dict[str, bytes]
    commit: str = "a" * 40
    token: str | None = None
    """Gated: the one token its files are served to."""


@dataclass
class HubStandin:
    repos: dict[str, HubRepo]
    rate_bytes_per_s: float | None = None
    cut_once: dict[str, int] = field(default_factory=dict)
    """File name -> after how many bytes its first GET is cut off (a dropped connection)."""
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    """(method, file, Range header) of every file request."""
    sent_bytes: int = 0
    url: str = ""

    def file_gets(self, name: str) -> list[str | None]:
        return [r for m, f, r in self.requests if m == "GET" and f == name]


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _lfs(name: str, data: bytes) -> dict[str, object] | None:
    if not name.endswith(LFS_SUFFIXES):
        return None
    return {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}


def _error(status: int, code: str, message: str) -> web.Response:
    headers = {"X-Error-Code": code, "X-Error-Message": message}
    return web.json_response({"error": message}, status=status, headers=headers)


class _Refused(Exception):
    def __init__(self, response: web.Response) -> None:
        self.response = response


@web.middleware
async def _refusals(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except _Refused as refused:
        return refused.response


def _repo(hub: HubStandin, request: web.Request) -> tuple[str, HubRepo]:
    name = f"{request.match_info['org']}/{request.match_info['name']}"
    repo = hub.repos.get(name)
    if repo is None:
        raise _Refused(_error(404, "RepoNotFound", "Repository not found"))
    rev = request.match_info["rev"]
    if rev not in ("main", repo.commit):
        raise _Refused(_error(404, "RevisionNotFound", f"Invalid rev id: {rev}"))
    return name, repo


def build_app(hub: HubStandin) -> web.Application:
    async def model_info(request: web.Request) -> web.Response:
        name, repo = _repo(hub, request)
        siblings = []
        for fname, data in repo.files.items():
            lfs = _lfs(fname, data)
            sibling: dict[str, object] = {"rfilename": fname, "size": len(data)}
            sibling["blobId"] = git_blob_id(data)
            if lfs is not None:
                sibling["lfs"] = {"sha256": lfs["oid"], "size": lfs["size"], "pointerSize": 134}
            siblings.append(sibling)
        gated = "manual" if repo.token else False
        body = {"id": name, "modelId": name, "sha": repo.commit, "private": False}
        return web.json_response({**body, "gated": gated, "siblings": siblings})

    async def tree(request: web.Request) -> web.Response:
        _, repo = _repo(hub, request)
        items = []
        for fname, data in repo.files.items():
            item: dict[str, object] = {"type": "file", "path": fname, "size": len(data)}
            item["oid"] = git_blob_id(data)
            if (lfs := _lfs(fname, data)) is not None:
                item["lfs"] = lfs
            items.append(item)
        return web.json_response(items)

    async def resolve(request: web.Request) -> web.StreamResponse:
        name, repo = _repo(hub, request)
        fname = request.match_info["file"]
        hub.requests.append((request.method, fname, request.headers.get("Range")))
        if repo.token is not None and request.headers.get("Authorization") != (
            f"Bearer {repo.token}"
        ):
            status = 403 if "Authorization" in request.headers else 401
            return _error(
                status,
                "GatedRepo",
                f"Access to model {name} is restricted and you are not in the authorized "
                "list. Visit https://huggingface.co/" + name + " to ask for access.",
            )
        data = repo.files.get(fname)
        if data is None:
            return _error(404, "EntryNotFound", f"{fname} does not exist on main")
        lfs = _lfs(fname, data)
        headers = {"X-Repo-Commit": repo.commit, "Accept-Ranges": "bytes"}
        if lfs is not None:
            headers["X-Linked-Etag"] = f'"{lfs["oid"]}"'
            headers["X-Linked-Size"] = str(len(data))
        headers["ETag"] = f'"{git_blob_id(data)}"'
        if request.method == "HEAD":
            headers["Content-Length"] = str(len(data))
            return web.Response(status=200, headers=headers)
        start = 0
        if (ranged := request.headers.get("Range")) is not None:
            start = int(ranged.removeprefix("bytes=").partition("-")[0])
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        body = data[start:]
        response = web.StreamResponse(status=206 if ranged else 200, headers=headers)
        response.content_length = len(body)
        await response.prepare(request)
        cut = hub.cut_once.pop(fname, None)
        for offset in range(0, len(body), CHUNK_BYTES):
            if cut is not None and offset >= cut:
                assert request.transport is not None
                request.transport.close()  # the connection drops mid-file
                return response
            chunk = body[offset : offset + CHUNK_BYTES]
            await response.write(chunk)
            hub.sent_bytes += len(chunk)
            if hub.rate_bytes_per_s:
                await asyncio.sleep(len(chunk) / hub.rate_bytes_per_s)
        await response.write_eof()
        return response

    app = web.Application(middlewares=[_refusals])
    app.router.add_get("/api/models/{org}/{name}/revision/{rev}", model_info)
    app.router.add_get("/api/models/{org}/{name}/tree/{rev}", tree)
    app.router.add_route("HEAD", "/{org}/{name}/resolve/{rev}/{file:.+}", resolve)
    app.router.add_get("/{org}/{name}/resolve/{rev}/{file:.+}", resolve, allow_head=False)
    return app


@asynccontextmanager
async def serve_hub(hub: HubStandin) -> AsyncIterator[HubStandin]:
    runner = web.AppRunner(build_app(hub), access_log=None)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    hub.url = f"http://127.0.0.1:{port}"
    try:
        yield hub
    finally:
        await runner.cleanup()
