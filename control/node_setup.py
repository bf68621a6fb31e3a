"""Putting an agent on a node over ssh, and taking it off: ``infer-top node add/remove``.

Everything crosses the system ssh client (``control.ssh_tunnel.ssh_argv``, BatchMode, the
node's ssh_config alias): ``control.node_remote``'s source runs there under the node's
python3, and the agent arrives as wheels built and gathered here (the node needs no package
index): this checkout's wheel, and its dependencies' for the node's Python and platform,
kept in a cache between runs. The agent answers through an ssh forward before the node is
added to the operator's config.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import tempfile
import threading
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from control import node_remote
from control.ssh_tunnel import explain, ssh_argv

Say = Callable[[str], None]
REMOTE_TIMEOUT_S = 900.0
"""The longest one command on the node may take (an install on a slow board)."""
BUILD_TIMEOUT_S = 600.0
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
Json = dict[str, object]
LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
"""The older names of the manylinux_2_17, 2_12 and 2_5 platform tags."""


class NodeSetupError(RuntimeError):
    """A step that failed, with what to do about it."""


def default_wheel_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "infer-top" / "node-wheels"


def _remote_command(command: str, params: Json) -> str:
    """``python3 -c`` with node_remote's source (compressed: only shell-safe characters)
    and the command's JSON, as one string for the remote shell."""
    source = Path(node_remote.__file__).read_bytes()
    packed = base64.b64encode(zlib.compress(source, 9)).decode()
    boot = f"import base64,zlib;exec(zlib.decompress(base64.b64decode('{packed}')))"
    return shlex.join(["python3", "-c", boot, command, json.dumps(params)])


@dataclass(frozen=True, slots=True)
class Remote:
    """The node as ssh reaches it."""

    destination: str
    config_file: Path | None = None

    def call(self, command: str, params: Json, say: Say, stdin: IO[bytes] | None = None) -> Json:
        """Run one node_remote command; its progress lines go to ``say``."""
        argv = ssh_argv(
            self.destination, config_file=self.config_file, command=_remote_command(command, params)
        )
        with tempfile.TemporaryFile() as errors:
            process = subprocess.Popen(
                argv,
                stdin=stdin if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
            )
            timer = threading.Timer(REMOTE_TIMEOUT_S, process.kill)
            timer.start()
            result: Json | None = None
            refusal = ""
            try:
                assert process.stdout is not None
                for line in process.stdout:
                    kind, _, rest = line.rstrip("\n").partition(" ")
                    if kind == "progress":
                        say(f"  {self.destination}: {rest}")
                    elif kind == "result":
                        result = json.loads(rest)
                    elif kind == "error":
                        refusal = rest
                    elif refusal:  # an error's further lines (pip's own)
                        refusal += "\n" + line.rstrip("\n")
                code = process.wait()
            finally:
                timer.cancel()
            errors.seek(0)
            lines = errors.read().decode(errors="replace").strip().splitlines()
        if result is not None and code == 0:
            return result
        raise NodeSetupError(self._why(command, code, refusal, lines))

    def _why(self, command: str, code: int, refusal: str, lines: list[str]) -> str:
        if refusal:
            return f"{self.destination}: {refusal}"
        if code == 255:  # ssh's own failure: its words, and what to do
            return f"ssh {self.destination} failed: {explain(self.destination, lines)}"
        text = "\n".join(lines)
        if code == 127 and "python3" in text:
            return (
                f"{self.destination} has no python3: install Python >= 3.11 with venv "
                f"there (Debian/Ubuntu: apt install python3 python3-venv)"
            )
        if code < 0:
            return f"{self.destination}: {command} did not finish in {REMOTE_TIMEOUT_S:g} s"
        return f"{self.destination}: {command} failed ({code}): {text[-2000:] or 'no output'}"


def check_node(probe: Json, say: Say) -> None:
    """Report what the node has; refuse only what the agent cannot run without."""
    gpu = (
        f"NVML ({probe['nvml']})"
        if probe.get("nvml")
        else "Jetson"
        if probe.get("jetson")
        else "none found (the agent shows host metrics and CPU engines only)"
    )
    say(f"  python {probe['python']}, venv {'yes' if probe.get('venv') else 'missing'}")
    say(f"  docker: {probe.get('docker') or 'not found'}; compose: {probe.get('compose') or '-'}")
    say(f"  GPU: {gpu}")
    if not probe.get("python_ok"):
        raise NodeSetupError(
            f"the node's python3 is {probe['python']}; the agent needs Python >= 3.11: "
            f"install it there (e.g. apt install python3.11 python3.11-venv) and run again"
        )
    if not probe.get("venv"):
        raise NodeSetupError(
            "the node's python3 cannot create a venv (no venv module): install "
            "python3-venv there (Debian/Ubuntu) and run again"
        )
    if probe.get("port_taken"):
        raise NodeSetupError(
            "the agent's port on the node's loopback is taken by another program: "
            "pick another with --port"
        )
    if not probe.get("docker") or not probe.get("compose"):
        say("  (without Docker and Compose the agent runs native engines only)")


def source_root() -> Path:
    """This checkout (the agent's wheel is built from it)."""
    root = Path(__file__).resolve().parents[1]
    if not (root / "pyproject.toml").exists():
        raise NodeSetupError(
            f"{root} is an installed copy, not a source checkout: run `infer-top node add` "
            f"from a checkout of infer-top (its wheel is what gets installed on the node)"
        )
    return root


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)


def build_wheel(out_dir: Path) -> Path:
    root = source_root()
    done = _pip("wheel", "--no-deps", "-q", "-w", str(out_dir), str(root))
    wheels = sorted(out_dir.glob("infer_top-*.whl"))
    if done.returncode != 0 or not wheels:
        raise NodeSetupError(
            f"building the agent's wheel from {root} failed (pip wheel needs setuptools from "
            f"your package index):\n{done.stderr.strip()[-2000:]}"
        )
    return wheels[0]


def wheel_digest(wheel: Path) -> str:
    """The wheel's contents (names and bytes, not zip timestamps): equal for a rebuild of
    the same code, so a second ``node add`` is a no-op."""
    digest = hashlib.sha256()
    with zipfile.ZipFile(wheel) as archive:
        for name in sorted(archive.namelist()):
            digest.update(name.encode() + b"\0" + archive.read(name))
    return "sha256:" + digest.hexdigest()


def target_of(probe: Json) -> tuple[str, list[str]]:
    """The node's wheel target: a cache key and pip's ``--python-version ...`` options."""
    major, minor = str(probe["python"]).split(".")[:2]
    machine = str(probe["machine"])
    glibc = re.fullmatch(r"(\d+)\.(\d+).*", str(probe.get("libc_version") or ""))
    if probe.get("libc") != "glibc" or glibc is None:
        raise NodeSetupError(
            f"the node's C library is {probe.get('libc') or 'unknown'}, not glibc: "
            f"no prebuilt wheels fit it"
        )
    newest = int(glibc.group(2)) if glibc.group(1) == "2" else 0
    platform = f"manylinux_2_{newest}_{machine}"
    options = ["--python-version", f"{major}.{minor}", "--implementation", "cp"]
    options += [
        "--abi",
        f"cp{major}{minor}",
        "--abi",
        "abi3",
        "--abi",
        "none",
        "--only-binary=:all:",
    ]
    for older in range(newest, 4, -1):  # pip takes each compatible platform tag by name
        options += ["--platform", f"manylinux_2_{older}_{machine}"]
        legacy = LEGACY_MANYLINUX.get(older)
        options += ["--platform", f"{legacy}_{machine}"] if legacy else []
    return f"cp{major}{minor}-{platform}", options


def dependency_wheels(wheel: Path, probe: Json, cache: Path, say: Say) -> list[Path]:
    """The wheels of the agent's dependencies for the node, from the cache when it holds
    them all (no index asked), else through pip's own index configuration."""
    key, options = target_of(probe)
    target = cache / key
    target.mkdir(parents=True, exist_ok=True)
    download = ["download", "-q", "-d", str(target), *options]
    wanted = (str(wheel), "pip")  # pip too: the node's venv is made without ensurepip
    offline = _pip(*download, "--no-index", "--find-links", str(target), *wanted)
    if offline.returncode == 0:
        say(f"  dependency wheels for {key}: all in {target}")
    else:
        say(f"  dependency wheels for {key}: downloading into {target}")
        online = _pip(*download, *wanted)
        if online.returncode != 0:
            raise NodeSetupError(
                f"pip could not gather the dependency wheels for the node ({key}):\n"
                f"{online.stderr.strip()[-2000:]}\nCheck your pip index settings, or "
                f"fill {target} with those wheels"
            )
    for copy in target.glob("infer_top-*.whl"):
        copy.unlink()
    return sorted(target.glob("*.whl"))


def wheel_archive(wheels: list[Path], out: IO[bytes]) -> None:
    """A flat tar of ``wheels`` (node_remote extracts nothing else)."""
    with tarfile.open(fileobj=out, mode="w") as archive:
        for path in wheels:
            archive.add(path, arcname=path.name)
    out.seek(0)
