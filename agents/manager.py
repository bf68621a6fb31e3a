"""Engine lifecycle over pluggable runtimes: start with a health gate, stop,
swap with roll-back, crash detection, adoption after an agent restart, and the
event stream the control plane follows."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
import uuid
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from typing import Any

import aiohttp

from agents.broadcast import Broadcast
from agents.catalog_adapter import UnknownEngine, declared_namespaces, get_spec, launch_config
from agents.collectors.engines import EngineScraper, Scrape
from agents.config import AgentConfig
from agents.engine_version import detect_version
from agents.exit_poll import ExitPoll
from agents.health_watch import PROBE_TIMEOUT_S, HealthWatch
from agents.kv_check import kv_capacity_check
from agents.model_pull import model_ready
from agents.model_store import engine_model_files
from agents.protocol import AgentEvent, ServiceInfo
from agents.runtime import Deployment, Runtime, RuntimeError_, TaskRuntime, VolumeRuntime
from agents.security import check_start_request
from agents.start_gate import checked_health_timeout, health_gate
from telemetry import EngineTelemetry

log = logging.getLogger(__name__)

_RUNNING = ("starting", "loading", "ready")
KEPT_OPTIONS = ("model_dir", "placement", "replicas")
"""Start options a deployment keeps (its runtime reads them; a swap keeps them too)."""


class ManagerError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


class EngineManager:
    def __init__(
        self,
        config: AgentConfig,
        runtimes: Mapping[str, Runtime],
        *,
        platform: str,
        session: aiohttp.ClientSession,
        boot_id: str = "",
    ) -> None:
        self.config = config
        self.runtimes = dict(runtimes)
        self.platform = platform
        self.session = session
        self.deployments: dict[str, Deployment] = {}
        self.boot_id = boot_id
        self.events: Broadcast[AgentEvent] = Broadcast(1000, boot_id=boot_id)
        self.scraper = EngineScraper(session, timeout_s=min(2.0, max(config.interval_s, 0.5)))
        self.exit_poll = ExitPoll(self._poll_exit)
        self._event_seq = 0
        self._locks: dict[str, asyncio.Lock] = {}
        self._unwatch: list[Any] = []
        self._starting: dict[str, asyncio.Task[bool]] = {}
        """Start-ups running in the background (``wait=False``), cancelled by a stop."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self.gpu_mem_bytes: dict[int, int] = {}
        """Each GPU's memory (the server fills it in): the KV estimate's budget."""
        self.health_watch = HealthWatch(
            self.deployments,
            self._probe,
            self.emit,
            interval_s=config.health_interval_s,
            busy=self._busy,
        )

    # -- events -----------------------------------------------------------------
    def emit(self, kind: str, engine_id: str, message: str = "") -> AgentEvent:
        self._event_seq += 1
        event = AgentEvent(self._event_seq, time.time(), kind, engine_id, message, self.boot_id)
        self.events.publish(event)
        log.info("engine %s: %s %s", engine_id, kind, message)
        return event

    def subscribe_events(
        self, since_seq: int | None, boot_id: str | None = None
    ) -> AsyncIterator[AgentEvent]:
        return self.events.subscribe(since_seq, boot_id=boot_id)

    # -- start-up / shutdown ------------------------------------------------------
    async def open(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self.config.adopt_on_start:
            for runtime in self.runtimes.values():
                try:
                    adopted = await runtime.adopt()
                except Exception as exc:  # Docker down: adopt nothing, say why
                    log.warning("runtime %s cannot adopt: %s", runtime.name, exc)
                    continue
                for dep in adopted:
                    self.deployments[dep.id] = dep
                    if dep.state == "crashed":  # died while no agent watched: kept to inspect
                        dep.health = "dead"
                        dep.message = (
                            f"adopted from a previous agent ({runtime.name}), dead meanwhile: "
                            f"{dep.message}; stop it to remove what it left"
                        )
                        self.emit("adopted", dep.id, dep.message)
                        continue
                    dep.message = f"adopted from a previous agent ({runtime.name})"
                    dep.state, dep.health = "ready", "unknown"
                    with contextlib.suppress(UnknownEngine):  # labels name an unknown kind
                        _, health = await self._probe(dep)
                        dep.health = {
                            "ready": "healthy",
                            "loading": "loading",
                            "overloaded": "overloaded",
                        }.get(health, "unhealthy")
                        if dep.health == "healthy":
                            dep.healthy_at = time.time()
                            await self._learn_version(dep)
                    self.emit("adopted", dep.id, f"{dep.message}, {dep.health}")
        for runtime in self.runtimes.values():
            unwatch = runtime.watch(self._exited_threadsafe)
            if unwatch is not None:
                self._unwatch.append(unwatch)
            if isinstance(runtime, TaskRuntime):
                unwatch = runtime.watch_tasks(self._task_threadsafe)
                if unwatch is not None:
                    self._unwatch.append(unwatch)
        self.health_watch.start()

    async def close(self) -> None:
        """Stop watching.  Containers and processes keep running (the next agent adopts
        them); engines living inside this agent (simulators) are stopped."""
        for unwatch in self._unwatch:
            unwatch()
        self._unwatch.clear()
        await self.health_watch.close()
        await self.exit_poll.close()
        await self.scraper.close()
        for task in list(self._starting.values()):
            task.cancel()
        for dep in list(self.deployments.values()):
            runtime = self.runtime_for(dep)
            if not getattr(runtime, "survives_agent", True):
                with contextlib.suppress(Exception):
                    await runtime.stop(dep, self.config.stop_timeout_s)

    def _exited_threadsafe(
        self,
        dep_id: str,
        reason: str,
        at: float,
        *,
        restarted: bool = False,
        exit_code: int | None = None,
    ) -> None:
        if self._loop is None or self._loop.is_closed():
            return
        if restarted:
            self._loop.call_soon_threadsafe(self._restarted, dep_id, reason)
        else:
            self._loop.call_soon_threadsafe(self._exited, dep_id, reason, at, exit_code)

    def _restarted(self, dep_id: str, reason: str) -> None:
        dep = self.deployments.get(dep_id)
        if dep is None or dep.state != "crashed" or dep_id in self._starting:
            return  # our own start, or one already being gated
        dep.state, dep.health, dep.message = "loading", "loading", reason
        dep.started_at, dep.exit_code = time.time(), None
        self.emit("restarted", dep_id, reason)
        self._in_background(dep_id, self._gate(dep))

    def _task_threadsafe(
        self, action: str, dep: Deployment, reason: str, at: float, exit_code: int | None
    ) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._task, action, dep, reason, at, exit_code)

    def _task(
        self, action: str, task: Deployment, reason: str, at: float, exit_code: int | None
    ) -> None:
        """An orchestrator's task on this node started, crashed or was ended by it: the
        node lists the task while it runs here, and follows its restarts."""
        dep = self.deployments.get(task.id)
        if action == "start" and dep is None:
            task.message = reason
            self.deployments[task.id] = task
            self.emit("appeared", task.id, reason)
            self._in_background(task.id, self._gate(task))
        elif action == "start" and dep is not None and dep.state not in _RUNNING:
            dep.state = "crashed"  # whatever ended its last task, this one replaces it
            self._restarted(task.id, reason)
        elif action == "ending" and dep is not None and dep.state in _RUNNING:
            # Swarm stops it (its "stop" follows): no crash, and no scraping meanwhile.
            dep.state, dep.health, dep.message = "stopping", "unknown", reason
        elif action == "die":
            self._exited(task.id, reason, at, exit_code)
        elif action == "stop" and dep is not None and at >= dep.started_at:
            self._forget(task.id)
            self.emit("task_gone", task.id, reason)

    async def _poll_exit(self, dep: Deployment) -> None:
        """The runtime's word on an engine whose page failed: an exit its watcher has not
        reported yet (or a runtime with no watcher) turns the engine crashed."""
        runtime = self.runtime_for(dep)
        status = await runtime.status(dep)
        if status != "running":
            code = await runtime.exit_code(dep)
            how = "" if code is None else f", code {code}"
            self._exited(dep.id, f"the engine is {status} (found by polling{how})", exit_code=code)

    def _in_background(self, dep_id: str, start_up: Coroutine[Any, Any, bool]) -> None:
        task = asyncio.get_running_loop().create_task(start_up)
        self._starting[dep_id] = task  # a reference until done, and for stop() to cancel
        task.add_done_callback(lambda _: self._starting.pop(dep_id, None))

    def _exited(
        self, dep_id: str, reason: str, died_at: float | None = None, exit_code: int | None = None
    ) -> None:
        dep = self.deployments.get(dep_id)
        if dep is None or dep.state not in _RUNNING:
            return  # an exit we caused (stop, swap) or already reported
        if died_at is not None and died_at < dep.started_at:
            return  # the engine this one replaced (swap), reported late by Docker
        dep.state, dep.health, dep.message = "crashed", "dead", reason
        dep.exit_code = exit_code
        self.emit("crashed", dep_id, reason)

    # -- queries ----------------------------------------------------------------
    def get(self, dep_id: str) -> Deployment:
        try:
            return self.deployments[dep_id]
        except KeyError:
            raise ManagerError(404, f"no engine {dep_id!r} on this agent") from None

    def lookup(self, dep_id: str) -> Deployment:
        """An engine listed here, else a service this agent deployed (Swarm) that runs
        no task on this node (what ``GET /v1/engines/{id}`` and logs show)."""
        if dep_id in self.deployments:
            return self.deployments[dep_id]
        return self._controlled(dep_id)

    def _controlled(self, dep_id: str) -> Deployment:
        """What a stop, swap or scale acts on: a service this agent deployed, as its record
        has it (placement and replicas too, which a node's task does not carry), else the
        engine listed here."""
        for runtime in self.runtimes.values():
            if isinstance(runtime, TaskRuntime) and (dep := runtime.deployed(dep_id)):
                return dep
        return self.get(dep_id)  # the 404 where it is neither

    async def services(self) -> list[ServiceInfo]:
        """The services this agent deployed to an orchestrator (``GET /v1/engines``
        lists them beside the engines of this node)."""
        found: list[ServiceInfo] = []
        for runtime in self.runtimes.values():
            if isinstance(runtime, TaskRuntime):
                found.extend(await runtime.services())
        return found

    def runtime_for(self, dep: Deployment) -> Runtime:
        return self.runtimes[dep.runtime]

    async def telemetry(self) -> tuple[EngineTelemetry, ...]:
        deps = [d for d in self.deployments.values() if d.state != "stopped"]

        async def one(dep: Deployment) -> EngineTelemetry:
            scrape = Scrape()
            try:
                if dep.state in _RUNNING:
                    with contextlib.suppress(UnknownEngine):  # adopted from labels: no metrics
                        scrape = await self.scraper.sample(dep, get_spec(dep.kind))
                    if dep.state != "ready":  # no page while loading is no fault
                        scrape = Scrape(scrape.sample)
                    if scrape.sample is None and not scrape.late and dep.state == "ready":
                        # the page failed (a late one is an engine still answering)
                        self.exit_poll.request(dep)
            except Exception as exc:  # this engine's frame says so; the others keep theirs
                log.exception("telemetry of engine %s failed", dep.id)
                scrape = Scrape(error=f"telemetry failed ({type(exc).__name__}: {exc})")
            return self.scraper.telemetry(dep, scrape)

        return tuple(await asyncio.gather(*(one(d) for d in deps)))

    # -- lifecycle --------------------------------------------------------------
    def _pick_runtime(self, kind: str, requested: str | None) -> str:
        name = requested or ("sim" if kind == "sim" else "compose")
        if name not in self.runtimes:
            available = ", ".join(sorted(self.runtimes))
            raise ManagerError(
                400, f"runtime {name!r} is not available here (available: {available})"
            )
        return name

    def prepare(
        self,
        kind: str,
        launch: dict[str, Any],
        gpus: list[int] | None,
        options: dict[str, Any],
        runtime: str | None,
        health_timeout_s: float | None = None,
    ) -> Deployment:
        """Validate a start request against the policy and build its record."""
        health_timeout_s = checked_health_timeout(health_timeout_s)
        runtime_name = self._pick_runtime(kind, runtime)
        if runtime_name == "sim":
            # A simulator imitates one engine; the allow-list entry that matters is "sim".
            check_start_request(self.config, "sim", {}, options)
            try:
                kind = self.runtimes["sim"].kind_of(launch)  # type: ignore[attr-defined]
            except RuntimeError_ as exc:
                raise ManagerError(400, str(exc)) from None
        else:
            spec = get_spec(kind)
            launch = check_start_request(
                self.config,
                kind,
                launch,
                options,
                declared=declared_namespaces(spec, self.platform),
                default_image=spec.default_image(self.platform),
                model_on_host=runtime_name == "process" and spec.model_is_path,
            )
            launch_config({"model": "x", **launch})  # the catalog's own refusals, early
        launch = dict(launch)
        port = int(launch.get("port") or 0) or free_port()
        launch["port"] = port
        gpu_ids = tuple(gpus if gpus is not None else launch.get("gpu_ids") or ())
        if runtime_name != "sim":
            launch["gpu_ids"] = list(gpu_ids)
        dep = Deployment(
            id=uuid.uuid4().hex[:10],
            kind=kind,
            runtime=runtime_name,
            config=launch,
            gpu_ids=gpu_ids,
            port=port,
            simulated=runtime_name == "sim",
            options={k: v for k, v in options.items() if k in KEPT_OPTIONS},
            start_timeout_s=health_timeout_s or get_spec(kind).start_timeout_s,
        )
        try:  # what the runtime would refuse, before a record exists or a swap stops anything
            self.runtimes[runtime_name].check(dep)
        except RuntimeError_ as exc:
            raise ManagerError(400, str(exc)) from None
        return dep

    async def start(
        self,
        kind: str,
        launch: dict[str, Any],
        gpus: list[int] | None = None,
        *,
        options: dict[str, Any] | None = None,
        runtime: str | None = None,
        wait: bool = True,
        health_timeout_s: float | None = None,
    ) -> Deployment:
        dep = self.prepare(kind, launch, gpus, options or {}, runtime, health_timeout_s)
        if getattr(self.runtime_for(dep), "deploys_services", False):
            return await self._deploy(dep)
        self.deployments[dep.id] = dep
        lock = self._locks[dep.id] = asyncio.Lock()

        async def bring_up() -> bool:
            async with lock:  # a stop or swap waits for the health gate
                return await self._bring_up(dep)

        if wait:
            await bring_up()
        else:
            self._in_background(dep.id, bring_up())
        return dep

    async def _deploy(self, dep: Deployment) -> Deployment:
        """Hand the engine to its orchestrator (Swarm): it places the replicas, and the
        agents of the nodes it picks list and health-gate them.  Listed here as a service."""
        self.emit("deploying", dep.id, f"{dep.kind} on port {dep.port}")
        try:
            await self.runtime_for(dep).start(dep)
        except RuntimeError_ as exc:
            self.emit("failed", dep.id, str(exc))
            raise ManagerError(502, f"{dep.kind} {dep.id} was not deployed: {exc}") from exc
        dep.state, dep.health = "deployed", "unknown"
        self.emit("deployed", dep.id, dep.message or "")
        return dep

    async def scale(self, dep_id: str, replicas: int) -> Deployment:
        """Set how many replicas the orchestrator runs (Swarm services only)."""
        dep = self._controlled(dep_id)
        runtime = self.runtime_for(dep)
        if not isinstance(runtime, TaskRuntime):
            raise ManagerError(
                400, f"engine {dep_id} runs on runtime {dep.runtime}: only Swarm services scale"
            )
        try:
            await runtime.scale(dep, replicas)
        except RuntimeError_ as exc:
            raise ManagerError(502, f"engine {dep_id} was not scaled: {exc}") from exc
        self.emit("scaled", dep_id, f"{replicas} replica(s)")
        return dep

    async def _bring_up(self, dep: Deployment) -> bool:
        """Start and health-gate; False (and the reason in dep.message) when it failed."""
        dep.state, dep.health, dep.message = "starting", "unknown", None
        dep.started_at, dep.exit_code = time.time(), None
        self.emit("starting", dep.id, f"{dep.kind} on port {dep.port}")
        try:
            await self.runtime_for(dep).start(dep)
        except RuntimeError_ as exc:
            dep.state, dep.health, dep.message = "crashed", "dead", str(exc)
            self.emit("failed", dep.id, str(exc))
            return False
        self.emit("started", dep.id, dep.url or "")
        return await self._gate(dep)

    async def _probe(self, dep: Deployment) -> tuple[int | None, str]:
        """One request to the engine's health route, judged by the engine's own rules."""
        spec = get_spec(dep.kind)
        status: int | None = None
        body: bytes | None = None
        try:
            async with self.session.get(
                f"{dep.url}{spec.health_path}", timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)
            ) as resp:
                status, body = resp.status, await resp.read()
        except (TimeoutError, aiohttp.ClientError):
            pass
        # Once through its gate, an engine's "loading" answer may mean "overloaded" now.
        return status, str(spec.classify_health(status, body, was_ready=dep.state == "ready"))

    def _busy(self, dep_id: str) -> bool:
        """A start, stop or swap of this engine is under way (it judges health itself)."""
        lock = self._locks.get(dep_id)
        return dep_id in self._starting or (lock is not None and lock.locked())

    async def _gate(self, dep: Deployment) -> bool:
        dep.engine_version = dep.engine_version_from = None  # a swap or restart: ask again
        dep.kv_capacity = None
        if not await health_gate(
            dep, self.runtime_for(dep), self._probe, self.emit, self._has_model
        ):
            return False
        await self._learn_version(dep)
        if not dep.simulated:  # every real start checks the fit estimator
            files = await asyncio.to_thread(engine_model_files, self.config, dep)
            dep.kv_capacity = await kv_capacity_check(
                dep,
                self.runtime_for(dep),
                self.session,
                self.gpu_mem_bytes,
                self.platform,
                files,
            )
        return True

    async def _learn_version(self, dep: Deployment) -> None:
        with contextlib.suppress(UnknownEngine):  # adopted from labels: no dialect to pick
            spec = get_spec(dep.kind)
            found = await detect_version(self.session, dep, spec, self.platform)
            dep.engine_version, dep.engine_version_from = found

    async def _has_model(self, dep: Deployment) -> bool:
        return await model_ready(dep, self.session)

    async def stop(self, dep_id: str, remove_volumes: Sequence[str] = ()) -> Deployment:
        """Stop and remove the engine; its named volumes (model caches) stay unless
        ``remove_volumes`` names them, each exactly as the deployment lists them."""
        dep = self._controlled(dep_id)
        names = list(dict.fromkeys(remove_volumes))
        await self._check_volume_removal(dep, names)  # before anything is stopped
        starting = self._starting.get(dep_id)
        if starting is not None:  # an operator's stop ends a start-up still waiting for health
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starting
        async with self._locks.setdefault(dep_id, asyncio.Lock()):
            if not await self._take_down_or_forget(dep):
                if names:  # the runtime that removes them cannot act either
                    dep.message = f"{dep.message}; volumes {', '.join(names)} were not removed"
                self._forget(dep_id)
                return dep
            not_removed = await self._remove_volumes(dep, names) if names else None
            removed = f"removed volumes {', '.join(names)}" if names and not not_removed else ""
            self.emit("stopped", dep.id, removed)
        self._forget(dep_id)
        if not_removed:
            raise ManagerError(409, f"engine {dep_id} stopped, but {not_removed}")
        return dep

    def _forget(self, dep_id: str) -> None:
        """An engine gone for good: nothing of it stays (its lock too: kept, every engine
        ever started stayed in the agent's memory, found by the soak). A caller still
        waiting on its lock holds it; a new one finds no engine."""
        self.deployments.pop(dep_id, None)
        self.scraper.forget(dep_id)
        self._locks.pop(dep_id, None)

    async def _check_volume_removal(self, dep: Deployment, names: list[str]) -> None:
        """Refuse (400, nothing done) a name the deployment does not mount, or a volume
        another container uses: a removal deletes exactly what the operator named."""
        if unknown := [n for n in names if n not in dep.volumes]:
            mounted = ", ".join(dep.volumes) or "no named volumes"
            raise ManagerError(
                400,
                f"engine {dep.id} does not mount {', '.join(unknown)} (it mounts {mounted}): "
                "nothing was stopped or removed",
            )
        runtime = self.runtime_for(dep)
        for name in names:
            assert isinstance(runtime, VolumeRuntime)  # only these list volumes
            if users := await runtime.volume_users(name, dep):
                raise ManagerError(
                    400,
                    f"volume {name} is also used by {', '.join(users)}: stop those first; "
                    "nothing was stopped or removed",
                )

    async def _remove_volumes(self, dep: Deployment, names: list[str]) -> str | None:
        """Remove the named volumes of a stopped deployment; why not, where one stayed."""
        runtime = self.runtime_for(dep)
        assert isinstance(runtime, VolumeRuntime)  # checked by _check_volume_removal
        try:
            await runtime.remove_volumes(names)
        except RuntimeError_ as exc:  # taken by a container started since the check
            return str(exc)
        return None

    async def _take_down_or_forget(self, dep: Deployment) -> bool:
        """Stop ``dep``; True when its runtime did.  A dead engine whose runtime cannot act
        (Compose missing, Docker gone) is forgotten instead, with what it may have left
        (False): an operator can always remove a crashed engine.  A live one stays listed
        in its state before the stop, and the refusal says why (502)."""
        before = dep.state
        try:
            await self._take_down(dep)
        except RuntimeError_ as exc:
            if dep.health != "dead":
                dep.state = before
                raise ManagerError(
                    502, f"engine {dep.id} could not be stopped: {exc}; it is still running"
                ) from exc
            left = self.runtime_for(dep).forget(dep)
            dep.state, dep.message = (
                "stopped",
                (
                    f"engine {dep.id} had crashed and its runtime could not clean up ({exc}); "
                    f"removed from the list: {left}"
                ),
            )
            self.emit("stopped", dep.id, dep.message)
            return False
        return True

    async def _take_down(self, dep: Deployment) -> None:
        dep.state = "stopping"
        await self.runtime_for(dep).stop(dep, self.config.stop_timeout_s)
        dep.state, dep.health = "stopped", "unknown"

    async def swap(
        self,
        dep_id: str,
        launch: dict[str, Any],
        *,
        kind: str | None = None,
        options: dict[str, Any] | None = None,
        health_timeout_s: float | None = None,
    ) -> Deployment:
        """Stop the old engine, start the new one on the same GPUs and port; if the new
        one fails its health gate, bring the old configuration back."""
        old = self._controlled(dep_id)
        new_kind = kind or old.kind
        launch = {**launch, "port": old.port, "gpu_ids": list(old.gpu_ids)}
        options = old.options if options is None else options  # keep the model mount
        candidate = self.prepare(
            new_kind, launch, list(old.gpu_ids), options, old.runtime, health_timeout_s
        )
        if getattr(self.runtime_for(old), "deploys_services", False):
            # The orchestrator replaces each task in place (stop first: one port per
            # node); the nodes' agents health-gate the new ones as they appear.
            candidate.id = old.id
            swapped = await self._deploy(candidate)
            self.emit("swapped", dep_id, f"now {swapped.kind} {swapped.model}; redeployed")
            return swapped
        async with self._locks.setdefault(dep_id, asyncio.Lock()):
            previous = (old.kind, dict(old.config), dict(old.options), old.start_timeout_s)
            began = time.monotonic()
            await self._take_down(old)
            down_s = time.monotonic() - began
            old.kind, old.config, old.options = candidate.kind, candidate.config, candidate.options
            old.start_timeout_s = candidate.start_timeout_s
            if await self._bring_up(old):
                # The operator's cost of a swap: how long the node served nothing.
                took_s = time.monotonic() - began
                old.message = (
                    f"swapped from {previous[0]} to {old.kind} in {took_s:.1f} s "
                    f"(stopped in {down_s:.1f} s, healthy {took_s - down_s:.1f} s later)"
                )
                model = old.config.get("model", "")
                self.emit("swapped", dep_id, f"now {old.kind} {model}; {old.message}")
                return old
            reason = old.message
            await self._take_down(old)
            old.kind, old.config, old.options, old.start_timeout_s = previous
            ok = await self._bring_up(old)
            old.message = f"swap failed ({reason}); " + (
                "rolled back to the previous engine" if ok else "roll-back failed too"
            )
            self.emit("rolled_back", dep_id, old.message)
            raise ManagerError(502, old.message)

    async def logs(self, dep_id: str, tail: int, follow: bool) -> AsyncIterator[str]:
        dep = self.lookup(dep_id)
        async for line in self.runtime_for(dep).logs(dep, tail, follow):
            yield line
