"""The agent's aiohttp app: a thin server over the collectors and the engine
manager.  ``create_app(config)`` is all a caller needs (the CLI, the TUI's
embedded agent, tests)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import platform as host_platform
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Mapping

import aiohttp
from aiohttp import web

from agents import __version__
from agents.collectors import GpuCollector
from agents.collectors.host import HostCollector
from agents.config import AgentConfig, bundled_trace
from agents.keys import AUDIT, CONFIG, MANAGER, NODE_INFO, REGISTRY, SAMPLER
from agents.loadruns import add_load_routes
from agents.manager import EngineManager
from agents.metrics import make_registry
from agents.model_routes import add_model_routes
from agents.peerloads import add_peer_routes
from agents.protocol import NodeInfo
from agents.pull_routes import add_pull_routes
from agents.routes import add_routes, error_middleware
from agents.runtime import Runtime
from agents.runtime.owners import pid_owner
from agents.sampler import Sampler
from agents.security import AuditLog, auth_middleware

log = logging.getLogger(__name__)


def detect_platform(config: AgentConfig) -> str:
    if config.platform:
        return config.platform
    from agents.collectors.jetson import is_jetson
    from agents.collectors.nvml import nvml_available

    if nvml_available():
        return "nvidia"
    if is_jetson():
        return "jetson"
    return "linux"


def make_gpu_collector(config: AgentConfig, platform: str) -> GpuCollector | None:
    if platform == "replay":
        from agents.collectors.nvml import NvmlCollector
        from agents.collectors.replay import ReplayNvml

        fake = ReplayNvml(
            config.replay_trace or bundled_trace(),
            gpus=config.replay_gpus,
            processes=config.replay_processes,
        )
        return NvmlCollector(fake, simulated=True)
    if platform == "nvidia":
        from agents.collectors.nvml import NvmlCollector

        return NvmlCollector()
    if platform == "jetson":
        from agents.collectors import jetson

        if jetson.JTOP_SOCKET.exists():
            with contextlib.suppress(ImportError):
                from agents.collectors.jtop import JtopCollector

                return JtopCollector(config.interval_s)
        if jetson.has_tegrastats():
            return jetson.TegrastatsCollector(config.interval_s)
        return jetson.SysfsCollector()
    return None


def compose_platform(platform: str) -> str:
    """The catalog's Compose variant for this node: replayed GPUs run CPU engines."""
    return platform if platform in ("nvidia", "jetson") else "cpu"


def default_runtimes(config: AgentConfig, platform: str) -> dict[str, Runtime]:
    from agents.runtime.compose import ComposeRuntime
    from agents.runtime.process import ProcessRuntime
    from agents.runtime.state import StateStore
    from agents.runtime.swarm import SwarmRuntime

    state = StateStore(config.state_dir)
    runtimes: dict[str, Runtime] = {
        "compose": ComposeRuntime(
            node=config.node_name, platform=compose_platform(platform), state=state
        ),
        "process": ProcessRuntime(config, state=state),
        "swarm": SwarmRuntime(
            node=config.node_name, platform=compose_platform(platform), state=state
        ),
    }
    with contextlib.suppress(ImportError):
        from agents.runtime.sim import SimRuntime

        runtimes["sim"] = SimRuntime()
    return runtimes


def _versions() -> tuple[str | None, str | None]:
    from agents.runtime.compose import compose_version

    docker_version = None
    try:
        import docker

        client = docker.from_env(timeout=5)
        docker_version = str(client.version().get("Version"))
        client.close()
    except Exception:  # no daemon here: node info says null
        docker_version = None
    return docker_version, compose_version()


def _agent_ctx(
    gpu_override: GpuCollector | None, runtimes_override: Mapping[str, Runtime] | None
) -> Callable[[web.Application], AsyncIterator[None]]:
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        config = app[CONFIG]
        platform = detect_platform(config)
        gpu = gpu_override or make_gpu_collector(config, platform)
        runtimes = runtimes_override or default_runtimes(config, platform)
        async for _ in _run_agent(app, config, platform, gpu, runtimes):
            yield

    return ctx


async def _run_agent(
    app: web.Application,
    config: AgentConfig,
    platform: str,
    gpu_c: GpuCollector | None,
    runtimes: Mapping[str, Runtime],
) -> AsyncIterator[None]:
    gpu_infos = await asyncio.to_thread(gpu_c.open) if gpu_c else ()
    session = aiohttp.ClientSession()
    boot_id = uuid.uuid4().hex[:12]
    manager = EngineManager(
        config, runtimes, platform=compose_platform(platform), session=session, boot_id=boot_id
    )
    manager.gpu_mem_bytes = {g.index: g.mem_total_bytes for g in gpu_infos if g.mem_total_bytes}
    await manager.open()
    sampler = Sampler(
        config.node_name,
        gpu_c,
        host=HostCollector(config.state_dir),
        engines=manager.telemetry,
        interval_s=config.interval_s,
        buffer=config.frame_buffer,
        platform=platform,
        boot_id=boot_id,
        owner=pid_owner(runtimes.values()),
    )
    if platform == "replay":  # replayed GPUs show what the engines on them do
        from agents.replay_load import follow_engines

        follow_engines(gpu_c, lambda: manager.deployments.values(), lambda: sampler.latest)
    docker_version, compose_ver = await asyncio.to_thread(_versions)
    app[MANAGER] = manager
    app[SAMPLER] = sampler
    app[REGISTRY] = make_registry(lambda: sampler.latest, manager.scraper.stats)
    app[NODE_INFO] = NodeInfo(
        node=config.node_name,
        host=socket.gethostname(),
        platform=platform,
        agent_version=__version__,
        gpus=gpu_infos,
        docker_version=docker_version,
        compose_version=compose_ver,
        driver_version=gpu_c.driver_version if gpu_c else None,
        unified_memory=bool(gpu_c and gpu_c.unified_memory),
        simulated=bool(gpu_c and gpu_c.simulated),
        interval_s=config.interval_s,
        runtimes=tuple(sorted(runtimes)),
    )
    log.info(
        "agent %s on %s (%s, %d GPUs)",
        config.node_name,
        host_platform.node(),
        platform,
        len(gpu_infos),
    )
    await sampler.sample_once()  # /metrics and snapshots have a frame from the first request
    task = asyncio.get_running_loop().create_task(sampler.run(), name="sampler")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await manager.close()
        await session.close()
        if gpu_c is not None:
            await asyncio.to_thread(gpu_c.close)


def create_app(
    config: AgentConfig,
    *,
    gpu: GpuCollector | None = None,
    runtimes: Mapping[str, Runtime] | None = None,
) -> web.Application:
    """The agent app.  ``gpu`` / ``runtimes`` replace the detected ones (tests, benchmarks)."""
    app = web.Application(middlewares=[auth_middleware(config.token), error_middleware])
    app[CONFIG] = config
    app[AUDIT] = AuditLog(config.audit_log)
    add_routes(app)
    add_model_routes(app)
    app.cleanup_ctx.append(_agent_ctx(gpu, runtimes))
    add_load_routes(app)  # after the agent: its runs stop before the engines do
    add_pull_routes(app)  # likewise its model pulls
    add_peer_routes(app)
    return app
