"""Plain Compose files, one per engine, shipped inside the wheel.

Operators can run them by hand::

    docker compose -f compose/vllm.yml --env-file my.env up -d

Every file labels its services with ``org.infer-top.*`` so an agent can find
its own projects again after a restart.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

LABEL_PREFIX = "org.infer-top"
LABEL_MANAGED = f"{LABEL_PREFIX}.managed"
LABEL_ENGINE = f"{LABEL_PREFIX}.engine"
LABEL_DEPLOYMENT = f"{LABEL_PREFIX}.deployment"
LABEL_NODE = f"{LABEL_PREFIX}.node"


def compose_dir() -> Path:
    """The directory holding the Compose files (works after a plain ``pip install .``)."""
    return Path(str(files(__name__)))


def compose_file(name: str) -> Path:
    """Path of ``<name>.yml``; raises FileNotFoundError naming the files that exist."""
    path = compose_dir() / f"{name}.yml"
    if not path.is_file():
        known = sorted(p.stem for p in compose_dir().glob("*.yml"))
        raise FileNotFoundError(f"no compose file {name!r}; known: {', '.join(known)}")
    return path
