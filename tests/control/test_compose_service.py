"""``control.compose_service.interpolate`` expands variables as Compose does: every
expression form, checked against ``docker compose config`` on the same file and env."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from control.compose_service import ComposeFileError, interpolate, read_service
from tests.compose.test_compose_engine_files import compose_cli

ENV = {"SET": "value", "EMPTY": "", "ARGS": "--model 'My Model' --port 80"}
EXPRESSIONS = [
    "${SET}",
    "$SET and $$SET",
    "${UNSET:-fallback}",
    "${EMPTY:-fallback}",
    "${EMPTY-fallback}",
    "${UNSET-fallback}",
    "${SET:+alt}",
    "${EMPTY:+alt}",
    "${EMPTY+alt}",
    "${UNSET+alt}",
    "${SET:?never}",
    "${UNSET:-{enable_iter_perf_stats: true}}",
    "${UNSET:---model ${SET} --port 8000}",
    "${ARGS:---model ${UNSET:?not evaluated}}",
    "${UNSET:--1}",
    "pre-${SET}-post $ alone",
]


def test_expressions_expand_as_compose_expands_them(tmp_path: Path) -> None:
    lines = ["services:", "  s:", "    image: busybox", "    environment:"]
    for n, expression in enumerate(EXPRESSIONS):
        lines.append(f"      V{n}: {json.dumps(expression)}")
    (tmp_path / "compose.yml").write_text("\n".join(lines) + "\n")
    (tmp_path / "vars.env").write_text("".join(f'{k}="{v}"\n' for k, v in ENV.items()))
    done = subprocess.run(
        [*compose_cli(), "-f", "compose.yml", "--env-file", "vars.env", "-p", "interp",
         "config", "--format", "json"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    environment = json.loads(done.stdout)["services"]["s"]["environment"]
    for n, expression in enumerate(EXPRESSIONS):
        # `config` writes a Compose file again, so a literal $ comes out escaped as $$
        expected = environment[f"V{n}"].replace("$$", "$")
        assert interpolate(expression, ENV) == expected, expression


@pytest.mark.parametrize("bad", ["${UNSET:?set UNSET}", "${EMPTY:?set EMPTY}", "${UNSET?x}"])
def test_a_required_variable_unset_is_an_error_naming_it(bad: str) -> None:
    with pytest.raises(ComposeFileError, match=r"(UNSET|EMPTY): "):
        interpolate(bad, ENV)


def test_malformed_expressions_are_errors() -> None:
    for bad in ("${SET", "${}", "${SET!x}"):
        with pytest.raises(ComposeFileError):
            interpolate(bad, ENV)


def test_list_environment_and_long_volume_syntax_read_as_compose_reads_them(
    tmp_path: Path,
) -> None:
    (tmp_path / "compose.yml").write_text(
        "services:\n"
        "  engine:\n"
        "    image: ${IMAGE:-busybox:1}\n"
        '    entrypoint: ["serve"]\n'
        "    command: ${ARGS}\n"
        '    environment: ["FIXED=1", "SET", "UNSET", "FROM=${SET}"]\n'
        "    volumes:\n"
        "      - type: volume\n"
        "        source: cache\n"
        "        target: /var/cache/models\n"
        "volumes:\n"
        "  cache: {}\n"
    )
    service = read_service(tmp_path / "compose.yml", ENV)
    env_file = tmp_path / "vars.env"
    env_file.write_text("".join(f'{k}="{v}"\n' for k, v in ENV.items()))
    done = subprocess.run(
        [*compose_cli(), "-f", "compose.yml", "--env-file", "vars.env", "-p", "read",
         "config", "--format", "json"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", **ENV},  # pass-through entries read the environment
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    compose = json.loads(done.stdout)["services"]["engine"]
    assert service.image == compose["image"] == "busybox:1"
    assert list(service.command) == compose["command"] == ["--model", "My Model", "--port", "80"]
    set_in_compose = {k: v for k, v in compose["environment"].items() if v is not None}
    assert service.environment == set_in_compose == {"FIXED": "1", "SET": "value", "FROM": "value"}
    assert service.cache_target == compose["volumes"][0]["target"] == "/var/cache/models"
    assert service.ipc is None and service.configs == ()
