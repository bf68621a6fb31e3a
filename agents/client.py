"""The control plane's client for one agent (the TUI uses it; so do tests).

Every method raises :class:`AgentError` with the agent's own words on a
refusal or failure.  ``stream()`` reconnects by itself and resumes after the
last frame it delivered, so a dropped connection loses no buffered frame.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

from agents.protocol import (
    AgentEvent,
    EngineInfo,
    LoadRunInfo,
    ModelInventory,
    ModelPull,
    NodeInfo,
    ProtocolError,
    ServiceInfo,
    engine_info_from_dict,
    event_from_dict,
    frame_from_dict,
    load_run_from_dict,
    local_model_from_dict,
    model_inventory_from_dict,
    model_pull_from_dict,
    node_info_from_dict,
    service_info_from_dict,
)
from engines.catalog import get_spec
from engines.model_files import LocalModel
from runs.codec import CodecError
from runs.codec import event_from_dict as run_event_from_dict
from runs.events import RunEvent
from telemetry import TelemetryFrame

log = logging.getLogger(__name__)


class AgentError(Exception):
    """The agent refused or failed; ``status`` is the HTTP status (0: unreachable)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status
        self.message = message


class AgentClient:
    def __init__(
        self,
        base_url: str,
        token: str,
        session: aiohttp.ClientSession | None = None,
        *,
        ssl_context: ssl.SSLContext | aiohttp.Fingerprint | bool = True,
        timeout_s: float = 30.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self._session = session
        self._own_session = session is None
        self._ssl = ssl_context
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    async def close(self) -> None:
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> AgentClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- plumbing ---------------------------------------------------------------
    async def _request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: dict[str, str] | None = None,
        client_timeout: aiohttp.ClientTimeout | None = None,
    ) -> Any:
        try:
            async with self.session.request(
                method,
                self.base_url + path,
                json=json_body,
                params=params,
                headers=self._headers,
                ssl=self._ssl,
                timeout=client_timeout or self._timeout,
            ) as resp:
                text = await resp.text()
                data = _json_or_text(text)
                if resp.status >= 400:
                    message = data.get("error") if isinstance(data, dict) else None
                    raise AgentError(resp.status, str(message or text or resp.reason))
                return data
        except (TimeoutError, aiohttp.ClientConnectionError) as exc:
            raise unreachable(self.base_url, exc) from exc

    # -- queries ----------------------------------------------------------------
    async def node_info(self) -> NodeInfo:
        return node_info_from_dict(await self._request("GET", "/v1/node"))

    async def snapshot(self) -> TelemetryFrame:
        return frame_from_dict(await self._request("GET", "/v1/telemetry"))

    async def engines(self) -> list[EngineInfo]:
        return (await self.listing())[0]

    async def listing(self) -> tuple[list[EngineInfo], list[ServiceInfo]]:
        """The node's engines, and the services this agent deployed to Swarm (an older
        agent sends none)."""
        data = await self._request("GET", "/v1/engines")
        return (
            [engine_info_from_dict(e) for e in data["engines"]],
            [service_info_from_dict(s) for s in data.get("services") or ()],
        )

    async def engine(self, engine_id: str) -> EngineInfo:
        return engine_info_from_dict(await self._request("GET", f"/v1/engines/{engine_id}"))

    async def recent_events(self, since_seq: int = 0) -> list[AgentEvent]:
        data = await self._request("GET", "/v1/events", params={"since_seq": str(since_seq)})
        return [event_from_dict(e) for e in data["events"]]

    async def models(self) -> ModelInventory:
        """The models the node holds, read from their files."""
        return model_inventory_from_dict(await self._request("GET", "/v1/models-inventory"))

    async def remove_model(self, name: str) -> LocalModel:
        """Delete the one model ``name`` (as listed, or its path there); the agent refuses
        while an engine it manages runs it.  The model as it was, removed."""
        data = await self._request("POST", "/v1/models-inventory/remove", json_body={"name": name})
        return local_model_from_dict(data["removed"])

    async def pull_model(
        self,
        model: str,
        *,
        revision: str | None = None,
        engine: str | None = None,
        quant: str | None = None,
        hub_token: str | None = None,
    ) -> ModelPull:
        """Start fetching ``model`` into the node's cache (only the files ``engine``
        loads; ``engine="ollama"``: an Ollama tag); refused before any byte moves when
        the hub refuses or the node's disk is too small.  Follow it with ``follow_pull``."""
        fields = {"revision": revision, "engine": engine, "quant": quant, "token": hub_token}
        body = {"model": model, **{k: v for k, v in fields.items() if v is not None}}
        # the agent asks the hub first: its answer may take a while
        timeout = aiohttp.ClientTimeout(total=max(self._timeout.total or 0, 120.0))
        data = await self._request(
            "POST", "/v1/models-inventory/pull", json_body=body, client_timeout=timeout
        )
        return model_pull_from_dict(data)

    async def follow_pull(
        self, pull_id: str, *, read_timeout_s: float = 30.0
    ) -> AsyncGenerator[ModelPull, None]:
        """The pull's progress, to its final state (done, failed, cancelled)."""
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=read_timeout_s, sock_read=read_timeout_s
        )
        try:
            async with self._lines(f"/v1/models-inventory/pulls/{pull_id}", {}, timeout) as lines:
                async for raw in lines:
                    if raw.strip():  # a blank line: the pull is quiet, the link alive
                        yield model_pull_from_dict(json.loads(raw))
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise AgentError(0, f"model pull {pull_id} on {self.base_url} broke: {exc!r}") from exc

    async def pulls(self) -> list[ModelPull]:
        """The node's model pulls: those running and the last ones ended."""
        data = await self._request("GET", "/v1/models-inventory/pulls")
        return [model_pull_from_dict(p) for p in data["pulls"]]

    async def cancel_pull(self, pull_id: str) -> ModelPull:
        data = await self._request("POST", f"/v1/models-inventory/pulls/{pull_id}/cancel")
        return model_pull_from_dict(data)

    async def metrics_text(self) -> str:
        return str(await self._request("GET", "/metrics"))

    # -- control ----------------------------------------------------------------
    async def start(
        self,
        kind: str,
        config: dict[str, Any],
        gpus: list[int] | None = None,
        *,
        runtime: str | None = None,
        options: dict[str, Any] | None = None,
        wait: bool = True,
        timeout_s: float | None = None,
        health_timeout_s: float | None = None,
    ) -> EngineInfo:
        """Start an engine; with ``wait`` the answer comes when it is healthy or failed.
        Without ``timeout_s`` the call waits as long as the agent's health gate may
        (``health_timeout_s``, else the engine spec's ``start_timeout_s``) plus a margin."""
        if timeout_s is None:
            timeout_s = _start_answer_budget_s(kind, health_timeout_s) if wait else 60.0
        body: dict[str, Any] = {
            "kind": kind,
            "config": config,
            "gpus": gpus,
            "runtime": runtime,
            "options": options or {},
            "wait": wait,
        }
        if health_timeout_s is not None:  # the engine spec's own limit otherwise
            body["health_timeout_s"] = health_timeout_s
        data = await self._request(
            "POST",
            "/v1/engines",
            json_body=body,
            client_timeout=aiohttp.ClientTimeout(total=timeout_s),
        )
        return engine_info_from_dict(data)

    async def stop(self, engine_id: str, remove_volumes: Sequence[str] = ()) -> EngineInfo:
        """Stop the engine; its volumes stay unless ``remove_volumes`` names them (as the
        engine's ``volumes`` lists them), which deletes their data."""
        data = await self._request(
            "POST",
            f"/v1/engines/{engine_id}/stop",
            json_body={"remove_volumes": list(remove_volumes)} if remove_volumes else None,
            client_timeout=aiohttp.ClientTimeout(total=300),
        )
        return engine_info_from_dict(data)

    async def scale(self, engine_id: str, replicas: int) -> EngineInfo:
        """Set a Swarm service's replica count (through the agent that deployed it)."""
        data = await self._request(
            "POST",
            f"/v1/engines/{engine_id}/scale",
            json_body={"replicas": replicas},
            client_timeout=aiohttp.ClientTimeout(total=180),
        )
        return engine_info_from_dict(data)

    async def swap(
        self,
        engine_id: str,
        config: dict[str, Any],
        *,
        kind: str | None = None,
        options: dict[str, Any] | None = None,
        timeout_s: float | None = None,
        health_timeout_s: float | None = None,
    ) -> EngineInfo:
        """Swap and answer when the new engine is healthy, or the old one is back (an
        AgentError 502). ``health_timeout_s`` replaces the new engine spec's health wait;
        without ``timeout_s`` the call waits for that and a roll-back's start too."""
        if timeout_s is None:
            new_s = _start_answer_budget_s(kind or "", health_timeout_s)
            timeout_s = max(SWAP_ANSWER_MIN_S, 2 * new_s)
        body: dict[str, Any] = {"config": config, "kind": kind, "options": options}
        if health_timeout_s is not None:  # the engine spec's own limit otherwise
            body["health_timeout_s"] = health_timeout_s
        data = await self._request(
            "POST",
            f"/v1/engines/{engine_id}/swap",
            json_body=body,
            client_timeout=aiohttp.ClientTimeout(total=timeout_s),
        )
        return engine_info_from_dict(data)

    async def logs(
        self, engine_id: str, tail: int = 100, follow: bool = False
    ) -> AsyncIterator[str]:
        params = {"tail": str(tail), "follow": "1" if follow else "0"}
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        try:
            async with self._lines(f"/v1/engines/{engine_id}/logs", params, timeout) as lines:
                async for raw in lines:
                    yield raw.decode(errors="replace").rstrip("\n")
        except aiohttp.ClientConnectionError as exc:
            raise AgentError(0, f"log stream from {self.base_url} broke: {exc!r}") from exc

    # -- load runs on the node ---------------------------------------------------
    async def start_load(
        self,
        engine_id: str,
        spec: dict[str, Any],
        workload: dict[str, Any],
        *,
        model: str,
        chat: bool = True,
        origin: str = "script",
        name: str | None = None,
        start_at: float | None = None,
    ) -> LoadRunInfo:
        """Start a load run on the engine's node against that engine (``spec`` and
        ``workload`` as ``loadgen.setup.plain`` gives them); ``start_at``: when its first
        request goes, in epoch seconds on the node's clock."""
        body = _load_body(spec, workload, model, chat, origin, name, start_at)
        data = await self._request("POST", f"/v1/engines/{engine_id}/loads", json_body=body)
        return load_run_from_dict(data)

    async def start_peer_load(
        self,
        peer_url: str,
        peer_token: str,
        engine_id: str,
        spec: dict[str, Any],
        workload: dict[str, Any],
        *,
        model: str,
        chat: bool = True,
        origin: str = "script",
        name: str | None = None,
        start_at: float | None = None,
    ) -> LoadRunInfo:
        """Start a load run on this agent's node against engine ``engine_id`` of the agent
        at ``peer_url`` (through that agent's proxy, with its token ``peer_token``)."""
        body = _load_body(spec, workload, model, chat, origin, name, start_at)
        body["peer"] = {"agent_url": peer_url, "token": peer_token, "engine_id": engine_id}
        return load_run_from_dict(await self._request("POST", "/v1/loads", json_body=body))

    async def clock(self) -> float:
        """The node's wall clock (epoch seconds) as its agent read it."""
        return float((await self._request("GET", "/v1/clock"))["time"])

    async def loads(self) -> list[LoadRunInfo]:
        data = await self._request("GET", "/v1/loads")
        return [load_run_from_dict(r) for r in data["loads"]]

    async def cancel_load(self, run_id: str) -> LoadRunInfo:
        data = await self._request("POST", f"/v1/loads/{run_id}/cancel")
        return load_run_from_dict(data)

    async def load_events(
        self, run_id: str, after: int = 0, *, read_timeout_s: float = 30.0
    ) -> AsyncGenerator[tuple[int, RunEvent], None]:
        """The run's events after sequence number ``after`` with their numbers, to its
        final event. One connection: a broken or silent one (the agent says something at
        least every few seconds) is an AgentError with status 0; resume from the last
        number kept."""
        # A node cut off drops packets: connecting would wait for ever without a bound.
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=read_timeout_s, sock_read=read_timeout_s
        )
        try:
            params = {"after": str(after)}
            async with self._lines(f"/v1/loads/{run_id}/events", params, timeout) as lines:
                async for raw in lines:
                    if raw.strip():  # a blank line: the run is quiet, the link alive
                        line = json.loads(raw)
                        yield int(line["seq"]), run_event_from_dict(line["event"])
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise AgentError(
                0, f"load run {run_id} events from {self.base_url} broke: {exc!r}"
            ) from exc
        except (CodecError, ValueError, KeyError) as exc:
            raise AgentError(0, f"load run {run_id}: a malformed event: {exc}") from exc

    # -- streams ----------------------------------------------------------------
    @asynccontextmanager
    async def _lines(
        self, path: str, params: dict[str, str], limits: aiohttp.ClientTimeout
    ) -> AsyncIterator[aiohttp.StreamReader]:
        """A streamed GET's body, line by line; an error answer is an AgentError."""
        async with self.session.get(
            self.base_url + path,
            params=params,
            headers=self._headers,
            ssl=self._ssl,
            timeout=limits,
        ) as resp:
            if resp.status >= 400:
                data = _json_or_text(await resp.text())
                msg = data.get("error") if isinstance(data, dict) else data
                raise AgentError(resp.status, str(msg))
            yield resp.content

    async def _ws_items(
        self, path: str, since_seq: int | None, boot_id: str | None
    ) -> AsyncIterator[dict[str, Any]]:
        params = {} if since_seq is None else {"since_seq": str(since_seq)}
        if boot_id:
            params["boot_id"] = boot_id
        try:
            async with self.session.ws_connect(
                self.base_url + path,
                params=params,
                headers=self._headers,
                ssl=self._ssl,
                heartbeat=30,
            ) as ws:
                async for msg in ws:
                    if msg.type == aiohttp.WSMsgType.TEXT:
                        yield json.loads(msg.data)
                    elif msg.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                        break
        except aiohttp.WSServerHandshakeError as exc:
            if exc.status == 401:
                raise AgentError(401, "missing or wrong bearer token") from exc
            raise AgentError(exc.status, exc.message) from exc

    async def _resuming(
        self, path: str, since_seq: int | None, reconnect: bool, retry_s: float
    ) -> AsyncIterator[dict[str, Any]]:
        """Items of a sequenced stream, reconnecting after a drop and resuming after the
        last seq delivered; when the agent restarted (new boot_id) its seq starts over."""
        last, boot = since_seq, None
        while True:
            try:
                async for data in self._ws_items(path, last, boot):
                    seq, item_boot = int(data["seq"]), data.get("boot_id")
                    if item_boot != boot:
                        boot, last = item_boot, None
                    if last is not None and seq <= last:
                        continue
                    last = seq
                    yield data
            except (TimeoutError, aiohttp.ClientError, ConnectionError) as exc:
                if _refused_certificate(exc):
                    raise unreachable(self.base_url, exc) from exc  # dialling again won't help
                if not reconnect:
                    raise AgentError(0, f"stream from {self.base_url} broke: {exc!r}") from exc
                log.info("stream %s from %s broke (%r); reconnecting", path, self.base_url, exc)
            if not reconnect:
                return
            await asyncio.sleep(retry_s)

    async def stream(
        self, since_seq: int | None = None, *, reconnect: bool = True, retry_s: float = 1.0
    ) -> AsyncIterator[TelemetryFrame]:
        """Frames as the agent samples them; after a drop, resumes after the last seq."""
        try:
            async for data in self._resuming("/v1/telemetry/stream", since_seq, reconnect, retry_s):
                yield frame_from_dict(data)
        except ProtocolError as exc:
            raise AgentError(0, str(exc)) from exc

    async def events(
        self, since_seq: int | None = None, *, reconnect: bool = True, retry_s: float = 1.0
    ) -> AsyncIterator[AgentEvent]:
        """Engine events (starting, healthy, crashed, swapped, ...), resumable like stream()."""
        try:
            async for data in self._resuming("/v1/events/stream", since_seq, reconnect, retry_s):
                yield event_from_dict(data)
        except ProtocolError as exc:
            raise AgentError(0, str(exc)) from exc


def _refused_certificate(exc: BaseException) -> bool:
    return isinstance(
        exc, aiohttp.ServerFingerprintMismatch | aiohttp.ClientConnectorCertificateError
    )


def unreachable(base_url: str, exc: BaseException) -> AgentError:
    """Why the agent could not be asked; a TLS certificate this client refuses says which
    fingerprints met, or how to trust the certificate's CA."""
    if isinstance(exc, aiohttp.ServerFingerprintMismatch):
        return AgentError(
            0,
            f"agent at {base_url} presented a TLS certificate with fingerprint "
            f"sha256:{exc.got.hex()}, but the node's config pins sha256:{exc.expected.hex()}: "
            "refused. If the agent's certificate was replaced on purpose, pin the fingerprint "
            "infer-agent printed at start-up",
        )
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return AgentError(
            0,
            f"agent at {base_url}: its TLS certificate is not trusted "
            f'({exc.certificate_error}): name the CA that signed it with ca = "/path/ca.pem" '
            'in the node\'s config, or pin the certificate with fingerprint = "sha256:..." '
            "(infer-agent prints it at start-up)",
        )
    return AgentError(0, f"agent at {base_url} unreachable: {exc!r}")


def _load_body(
    spec: dict[str, Any],
    workload: dict[str, Any],
    model: str,
    chat: bool,
    origin: str,
    name: str | None,
    start_at: float | None,
) -> dict[str, Any]:
    body = {"spec": spec, "workload": workload, "model": model, "chat": chat, "origin": origin}
    if name:
        body["name"] = name
    if start_at is not None:
        body["start_at"] = float(start_at)
    return body


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


START_ANSWER_MARGIN_S = 60.0
"""Beyond the agent's health budget: its own verdict on the start arrives first."""


SWAP_ANSWER_MIN_S = 900.0
"""A swap stops one engine and starts another (and, on failure, the old one again)."""


def _start_answer_budget_s(kind: str, health_timeout_s: float | None) -> float:
    # A value that is not a number is sent as given: the agent refuses it in words.
    if isinstance(health_timeout_s, int | float) and not isinstance(health_timeout_s, bool):
        return float(health_timeout_s) + START_ANSWER_MARGIN_S
    try:
        return get_spec(kind).start_timeout_s + START_ANSWER_MARGIN_S
    except (KeyError, ValueError):  # "sim", or a kind this catalog does not know
        return 600.0
