"""The node's side of ``infer-top node add`` / ``node remove``, run there by its own python3.

``control.node_setup`` sends this file's source over ssh (``python3 -c``) with one command
and its JSON parameters: ``probe`` (what the node has), ``install`` (the wheels arrive as a
tar on stdin; a venv, the agent's config and token, the agent started), ``remove``. The
installed package carries it too, so ``python -m control.node_remote supervise PREFIX``
keeps the agent running where no systemd does. It imports only the standard library and
parses on older Pythons, so a node with an old python3 is told so instead of failing to
compile. Progress goes to stdout as ``progress ...`` lines, the answer as one
``result {json}`` line, a refusal as ``error ...`` (exit 1).
"""

from __future__ import annotations

import ctypes.util
import json
import os
import platform
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

MIN_PYTHON = (3, 11)
UNIT_NAME = "infer-agent.service"
UNIT_DIR = Path("/etc/systemd/system")
AGENT_HOST = "127.0.0.1"
STOP_WAIT_S = 15.0
RESTART_MAX_S = 30.0
COMMAND_TIMEOUT_S = 600


class Refusal(Exception):
    """What the node cannot do, in words for the operator."""


def progress(line: str) -> None:
    print(f"progress {line}", flush=True)


def default_prefix() -> Path:
    if os.geteuid() == 0:
        return Path("/opt/infer-agent")
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "infer-agent"


def _compose() -> str | None:
    docker = shutil.which("docker")
    if docker is not None:
        try:
            found = subprocess.run(
                [docker, "compose", "version", "--short"],
                capture_output=True,
                text=True,
                timeout=20,
            )
        except (OSError, subprocess.TimeoutExpired):
            found = None
        if found is not None and found.returncode == 0:
            return f"docker compose {found.stdout.strip()}"
    legacy = shutil.which("docker-compose")
    return legacy


def _systemd() -> bool:
    """The agent becomes a system unit where systemd runs and we are root; else the
    supervisor (``supervise``) keeps it running."""
    return os.geteuid() == 0 and Path("/run/systemd/system").is_dir()


def _port_taken(params: dict[str, object]) -> bool:
    """Another program has the agent's port (this install's own running agent does not count)."""
    port = int(str(params.get("port") or 0))
    if not port or _port_free(port):
        return False
    prefix = Path(str(params.get("prefix") or default_prefix())).expanduser()
    try:
        config = json.loads((prefix / "agent.json").read_text())
    except (OSError, ValueError):
        return True
    return config.get("port") != port or not _running(prefix, str(config.get("service")))


def probe(params: dict[str, object]) -> dict[str, object]:
    import importlib.util

    libc, libc_version = platform.libc_ver()
    return {
        "python": platform.python_version(),
        "python_ok": sys.version_info[:2] >= MIN_PYTHON,
        "venv": importlib.util.find_spec("venv") is not None,
        "machine": platform.machine(),
        "libc": libc,
        "libc_version": libc_version,
        "docker": shutil.which("docker"),
        "compose": _compose(),
        "nvml": ctypes.util.find_library("nvidia-ml"),
        "jetson": Path("/etc/nv_tegra_release").exists(),
        "systemd": _systemd(),
        "prefix": str(default_prefix()),
        "port_taken": _port_taken(params),
    }


def write_private(path: Path, text: str) -> None:
    """Owner-only from the first byte (the token, the agent's config)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    path.chmod(0o600)


def _receive_wheels(target: Path) -> list[str]:
    """The tar on stdin: flat ``*.whl`` files only (nothing can land outside ``target``)."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(mode=0o700)
    names = []
    with tarfile.open(fileobj=sys.stdin.buffer, mode="r|") as archive:
        for member in archive:
            name = member.name
            if not member.isfile() or "/" in name or not name.endswith(".whl"):
                raise Refusal(f"unexpected entry {name!r} in the wheel archive")
            source = archive.extractfile(member)
            assert source is not None
            with (target / name).open("wb") as out:
                shutil.copyfileobj(source, out)
            names.append(name)
    return names


def _pip(venv: Path, wheels: Path, *args: str) -> None:
    """pip run from its copied wheel (the venv needs no ensurepip), installing from the
    copied wheels only: no index, no pip config of the node's, bytecode left to first use."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    pip = next(iter(sorted(wheels.glob("pip-*.whl"))), None)
    if pip is None:
        raise Refusal("no pip wheel among the copied wheels")
    argv = [str(venv / "bin" / "python"), str(pip / "pip"), "install", "-q", "--no-index"]
    argv += ["--no-compile", "--disable-pip-version-check", "--find-links", str(wheels), *args]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=COMMAND_TIMEOUT_S)
    if done.returncode != 0:
        raise Refusal(f"pip install on the node failed:\n{done.stderr.strip()[-2000:]}")


def agent_argv(prefix: Path, config: dict[str, object]) -> list[str]:
    extra = config.get("args") or []
    assert isinstance(extra, list)
    return [
        str(prefix / "venv" / "bin" / "infer-agent"),
        "--listen",
        f"{AGENT_HOST}:{config['port']}",
        "--token-file",
        str(prefix / "token"),
        "--node-name",
        str(config["name"]),
        "--state-dir",
        str(prefix / "state"),
        *(str(arg) for arg in extra),
    ]


def _pid_alive(pid: int) -> bool:
    """Running (an exited process its parent has not reaped yet is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _supervisor_pid(prefix: Path) -> int | None:
    """The running supervisor of this install (its pid file, checked against /proc so a
    reused pid is never taken for it)."""
    try:
        pid = int((prefix / "agent.pid").read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    return pid if str(prefix).encode() in cmdline and b"supervise" in cmdline else None


def _stop(prefix: Path, config: dict[str, object]) -> None:
    if config.get("service") == "systemd":
        unit = UNIT_DIR / UNIT_NAME
        if unit.exists():
            subprocess.run(["systemctl", "disable", "--now", UNIT_NAME], timeout=60)
        return
    pid = _supervisor_pid(prefix)
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT_S
    while _pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _pid_alive(pid):
        os.killpg(pid, signal.SIGKILL)  # the supervisor leads its session and group


def _running(prefix: Path, service: str) -> bool:
    if service == "systemd":
        active = ["systemctl", "is-active", "--quiet", UNIT_NAME]
        return subprocess.run(active, timeout=60).returncode == 0
    return _supervisor_pid(prefix) is not None


def _port_free(port: int) -> bool:
    with socket.socket() as probe_socket:
        try:
            probe_socket.bind((AGENT_HOST, port))
        except OSError:
            return False
    return True


def _start(prefix: Path, config: dict[str, object]) -> int | None:
    if not _port_free(int(str(config["port"]))):
        raise Refusal(
            f"port {config['port']} on the node's loopback is taken by another program: "
            f"pick another with --port"
        )
    if config["service"] == "systemd":
        unit = UNIT_DIR / UNIT_NAME
        unit.write_text(
            "[Unit]\nDescription=infer-top node agent (installed by infer-top node add)\n"
            "After=network-online.target docker.service\n\n"
            f"[Service]\nExecStart={shlex.join(agent_argv(prefix, config))}\n"
            "Restart=on-failure\nRestartSec=2\n\n[Install]\nWantedBy=multi-user.target\n"
        )
        subprocess.run(["systemctl", "daemon-reload"], check=True, timeout=60)
        subprocess.run(["systemctl", "enable", "--now", UNIT_NAME], check=True, timeout=60)
        return None
    python = str(prefix / "venv" / "bin" / "python")
    with (prefix / "agent.log").open("ab") as log:
        supervisor = subprocess.Popen(
            [python, "-m", "control.node_remote", "supervise", str(prefix)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives the ssh session
            cwd=str(prefix),
        )
    (prefix / "agent.pid").write_text(f"{supervisor.pid}\n")
    return supervisor.pid


def _install_package(prefix: Path, wheels: Path, params: dict[str, object]) -> bool:
    """The agent's package in the prefix's venv; False when that wheel is installed already."""
    venv = prefix / "venv"
    if not (venv / "bin" / "python").exists():
        progress(f"creating a venv at {venv}")
        venv_argv = [sys.executable, "-m", "venv", "--without-pip", str(venv)]
        subprocess.run(venv_argv, check=True, timeout=300)
    stamp = prefix / "installed.json"
    installed = json.loads(stamp.read_text()) if stamp.exists() else {}
    wheel, digest = wheels / str(params["wheel"]), str(params["digest"])
    upgraded = installed.get("digest") != digest
    if upgraded:
        progress("installing the agent and its dependencies (pip --no-index)")
        _pip(venv, wheels, "pip", str(wheel))
        if installed:  # the same version number with new code: replace it
            _pip(venv, wheels, "--force-reinstall", "--no-deps", str(wheel))
        stamp.write_text(json.dumps({"digest": digest, "wheel": wheel.name}) + "\n")
    else:
        progress("the agent package is up to date")
    return upgraded


def install(params: dict[str, object]) -> dict[str, object]:
    if sys.version_info[:2] < MIN_PYTHON:
        raise Refusal(f"the agent needs Python >= 3.11; this node's python3 is {sys.version}")
    prefix = Path(str(params.get("prefix") or default_prefix())).expanduser()
    prefix.mkdir(mode=0o700, parents=True, exist_ok=True)
    progress(f"receiving wheels into {prefix}")
    wheels = prefix / "wheels"
    try:
        _receive_wheels(wheels)
        upgraded = _install_package(prefix, wheels, params)
    finally:
        shutil.rmtree(wheels, ignore_errors=True)
    token_file = prefix / "token"
    rotated = bool(params.get("rotate_token")) or not token_file.exists()
    if rotated:
        progress("writing a fresh token (owner-only)")
        write_private(token_file, secrets.token_urlsafe(32) + "\n")
    service = "systemd" if _systemd() else "process"
    extra = params.get("agent_args") or []
    assert isinstance(extra, list)
    config = {
        "name": params["name"],
        "port": params["port"],
        "service": service,
        "args": [str(arg) for arg in extra],
    }
    config_file = prefix / "agent.json"
    old = json.loads(config_file.read_text()) if config_file.exists() else {}
    pid = _supervisor_pid(prefix)
    if upgraded or rotated or old != config or not _running(prefix, service):
        _stop(prefix, old or config)
        write_private(config_file, json.dumps(config, indent=2) + "\n")
        progress(f"starting the agent on {AGENT_HOST}:{config['port']} ({service})")
        pid = _start(prefix, config)
    else:
        progress("the agent is running unchanged")
    return {
        "token": token_file.read_text().strip(),
        "prefix": str(prefix),
        "service": service,
        "pid": pid,
        "changed": upgraded or rotated or old != config,
    }


def remove(params: dict[str, object]) -> dict[str, object]:
    prefix = Path(str(params.get("prefix") or default_prefix())).expanduser()
    config_file = prefix / "agent.json"
    if not prefix.exists():
        return {"removed": False, "prefix": str(prefix)}
    if not config_file.exists():
        raise Refusal(
            f"{prefix} on the node has no agent.json: not an install of infer-top node add, "
            f"so nothing was removed"
        )
    config = json.loads(config_file.read_text())
    progress(f"stopping the agent ({config.get('service')})")
    _stop(prefix, config)
    if config.get("service") == "systemd":
        (UNIT_DIR / UNIT_NAME).unlink(missing_ok=True)
        subprocess.run(["systemctl", "daemon-reload"], timeout=60)
    progress(f"removing {prefix}")
    shutil.rmtree(prefix)
    return {"removed": True, "prefix": str(prefix)}


def supervise(prefix: Path) -> None:
    """Run the agent; start it again (with back-off) whenever it exits; on TERM, end it.
    The handler only signals: the main loop's wait sees the agent go (a wait inside the
    handler would deadlock on the interrupted one's lock)."""
    config = json.loads((prefix / "agent.json").read_text())
    stopping: list[bool] = []
    running: list[subprocess.Popen[bytes]] = []

    def end(_signum: int, _frame: object) -> None:
        stopping.append(True)
        if not running:  # between runs: nothing to wait for
            raise SystemExit(0)
        running[0].terminate()

    signal.signal(signal.SIGTERM, end)
    delay_s = 1.0
    try:
        while not stopping:
            started = time.monotonic()
            running[:] = [subprocess.Popen(agent_argv(prefix, config))]
            code = running[0].wait()
            running.clear()
            if stopping:
                break
            delay_s = 1.0 if time.monotonic() - started > RESTART_MAX_S else delay_s * 2
            delay_s = min(delay_s, RESTART_MAX_S)
            print(f"infer-agent exited ({code}); starting it again in {delay_s:.0f} s", flush=True)
            time.sleep(delay_s)
    finally:
        (prefix / "agent.pid").unlink(missing_ok=True)


COMMANDS = {"probe": probe, "install": install, "remove": remove}


def main(argv: list[str]) -> int:
    if argv[:1] == ["supervise"]:
        supervise(Path(argv[1]))
        return 0
    try:
        result = COMMANDS[argv[0]](json.loads(argv[1]) if len(argv) > 1 else {})
    except Refusal as exc:
        print(f"error {exc}", flush=True)
        return 1
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"error on the node: {exc}", flush=True)
        return 1
    print("result " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
