"""Natively installed engines (llama-server, ollama) as plain processes, with the
same lifecycle as containers: a session of their own so they outlive an agent
restart, output to a log file in the state dir, adoption by pid and command line."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import psutil

from agents.catalog_adapter import get_spec, launch_config
from agents.config import AgentConfig
from agents.runtime import Deployment, ExitCallback, RuntimeError_
from agents.runtime.owners import lineage
from agents.runtime.state import StateStore, deployment_from_record
from agents.security import open_private, private_dir

ENGINE_ENV = (
    "PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "LD_LIBRARY_PATH",
    "CUDA_HOME", "HF_HOME", "HF_TOKEN", "OLLAMA_MODELS",
)  # fmt: skip
"""The agent's environment variables a native engine inherits; nothing else (never
the agent's token, never a LLAMA_ARG_* or OLLAMA_HOST meant for something else).  The
engine's own settings come from the catalog (``process_env``) on top."""


def command_for(binary: Path, dep: Deployment) -> tuple[list[str], dict[str, str]]:
    """The catalog's flags for the engine, bound to the deployment's own address, and
    the whole environment it runs with."""
    try:
        args, settings = get_spec(dep.kind).native_command(
            launch_config({**dep.config, "port": dep.port})
        )
    except ValueError as exc:  # LaunchConfig / UnsupportedOption refusals
        raise RuntimeError_(f"cannot launch {dep.kind}: {exc}") from exc
    # The catalog binds 0.0.0.0 for containers; a bare process stays on the agent's address
    # (extra_args cannot carry another --host: the catalog's allow-list refuses it).
    if "--host" in args:
        args[args.index("--host") + 1] = dep.host
    if "OLLAMA_HOST" in settings:
        settings["OLLAMA_HOST"] = f"{dep.host}:{dep.port}"
    env = {name: os.environ[name] for name in ENGINE_ENV if name in os.environ}
    env.update(settings)
    if dep.gpu_ids:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in dep.gpu_ids)
    return [str(binary), *args], env


class ProcessRuntime:
    name = "process"

    def __init__(self, config: AgentConfig, *, state: StateStore) -> None:
        self.config = config
        self.state = state
        self.log_dir = config.state_dir / "logs"
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._adopted: dict[str, Deployment] = {}

    def log_path(self, dep: Deployment) -> Path:
        return self.log_dir / f"{dep.id}.log"

    def _command(self, dep: Deployment) -> tuple[list[str], dict[str, str]]:
        binary = self.config.native_binaries.get(dep.kind)
        if binary is None:
            known = ", ".join(sorted(self.config.native_binaries)) or "none"
            raise RuntimeError_(
                f"no native binary configured for {dep.kind!r} (configured: {known}; see --native)"
            )
        if not (binary.is_file() and os.access(binary, os.X_OK)):
            raise RuntimeError_(f"the native binary for {dep.kind!r}, {binary}, is not executable")
        return command_for(binary, dep)

    def check(self, dep: Deployment) -> None:
        self._command(dep)

    async def start(self, dep: Deployment) -> None:
        argv, env = self._command(dep)
        proc = self._spawn(argv, env, self.log_path(dep))
        self._procs[dep.id] = proc
        self.state.save(dep, pid=proc.pid, argv=argv)

    def _spawn(
        self, argv: list[str], env: dict[str, str], log_path: Path
    ) -> subprocess.Popen[bytes]:
        # A session of its own: the engine outlives an agent restart and is adopted again.
        private_dir(log_path.parent)
        with open_private(log_path, "ab") as out:
            try:
                return subprocess.Popen(
                    argv,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    start_new_session=True,
                )
            except OSError as exc:
                raise RuntimeError_(f"cannot run {argv[0]}: {exc.strerror}") from exc

    def _pid(self, dep: Deployment) -> int | None:
        if dep.id in self._procs:
            return self._procs[dep.id].pid
        record = self.state.load(dep.id) or {}
        pid = record.get("pid")
        return int(pid) if pid else None

    def _alive(self, dep: Deployment) -> bool:
        proc = self._procs.get(dep.id)
        if proc is not None:
            return proc.poll() is None
        pid = self._pid(dep)
        return pid is not None and _same_process(pid, self.state.load(dep.id) or {})

    def owner_of(self, pid: int) -> str | None:
        """The deployment whose engine is ``pid`` or one of its ancestors."""
        roots = {proc.pid: dep_id for dep_id, proc in list(self._procs.items())}
        for dep_id, dep in list(self._adopted.items()):
            if (root := self._pid(dep)) is not None:
                roots[root] = dep_id
        if not roots:
            return None
        return next((roots[p] for p in lineage(pid) if p in roots), None)

    def forget(self, dep: Deployment) -> str:
        self.state.remove(dep.id)
        return "its process had already exited: nothing is left behind"

    async def stop(self, dep: Deployment, timeout_s: float) -> None:
        pid = self._pid(dep)
        if pid is not None and self._alive(dep):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
            for _ in range(max(int(timeout_s * 10), 1)):
                if not self._alive(dep):
                    break
                await asyncio.sleep(0.1)
            if self._alive(dep):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
        self._adopted.pop(dep.id, None)
        proc = self._procs.pop(dep.id, None)
        if proc is not None:
            await asyncio.to_thread(proc.wait)
        self.state.remove(dep.id)

    async def status(self, dep: Deployment) -> str:
        return "running" if self._alive(dep) else "exited"

    async def exit_code(self, dep: Deployment) -> int | None:
        proc = self._procs.get(dep.id)  # an adopted engine is no child of ours: unknown
        return None if proc is None else proc.poll()

    async def logs(self, dep: Deployment, tail: int, follow: bool) -> AsyncIterator[str]:
        path = self.log_path(dep)
        lines = path.read_text(errors="replace").splitlines() if path.exists() else []
        for line in lines[-tail:] if tail > 0 else []:
            yield line
        if not follow:
            return
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            while self._alive(dep):
                chunk = fh.readline()
                if chunk:
                    yield chunk.decode(errors="replace").rstrip("\n")
                else:
                    await asyncio.sleep(0.2)

    async def adopt(self) -> list[Deployment]:
        out = []
        for record in self.state.all(self.name):
            dep = deployment_from_record(record)
            if record.get("pid") and _same_process(int(record["pid"]), record):
                self._adopted[dep.id] = dep
            else:  # died while no agent watched; only its parent (gone) saw the exit status
                dep.state = "crashed"
                dep.message = (
                    f"process {record.get('pid')} is gone; its exit code is unknown "
                    "(it was the previous agent's child)"
                )
            out.append(dep)
        return out

    def watch(self, on_exit: ExitCallback) -> Callable[[], None] | None:
        async def poll(known: dict[str, Any]) -> None:
            while True:
                for dep_id, proc in list(self._procs.items()):
                    code = proc.poll()
                    if code is not None and known.get(dep_id) is None:
                        known[dep_id] = code
                        reason = f"process {proc.pid} exited (code {code})"
                        on_exit(dep_id, reason, time.time(), exit_code=code)
                # Not our children (an earlier agent started them): is the pid still theirs?
                for dep_id, dep in list(self._adopted.items()):
                    if not self._alive(dep):
                        del self._adopted[dep_id]
                        on_exit(dep_id, f"adopted process {self._pid(dep)} is gone", time.time())
                await asyncio.sleep(0.5)

        task = asyncio.get_running_loop().create_task(poll({}), name="process-watch")

        def unwatch() -> None:
            task.cancel()

        return unwatch


def _same_process(pid: int, record: dict[str, Any]) -> bool:
    """The pid is alive and still runs our command (pids are reused)."""
    try:
        cmdline = psutil.Process(pid).cmdline()
    except (psutil.Error, ValueError):
        return False
    argv = record.get("argv") or []
    return bool(argv) and cmdline[:1] == argv[:1]
