"""Which version of an engine runs: asked of the engine itself once it is ready (its
spec's ``version_path``), else the catalog's pin for the catalog's own image.  The
scraper reads metric names for this version, not for the catalog's pinned tag: an
operator's image or a Jetson build (vLLM 0.8, V0-era names) speaks its own dialect."""

from __future__ import annotations

import aiohttp

from agents.runtime import Deployment
from engines.catalog import EngineSpec

VERSION_TIMEOUT_S = 5.0
MAX_VERSION_BYTES = 1 << 20
"""SGLang's /get_server_info carries all its server arguments: tens of KiB."""


async def detect_version(
    session: aiohttp.ClientSession, dep: Deployment, spec: EngineSpec, platform: str
) -> tuple[str | None, str | None]:
    """(version, where it came from) for ``dep``; (None, None) when nothing says."""
    if dep.url is not None and spec.version_path is not None:
        headers = {}
        if dep.config.get("api_key"):
            headers["Authorization"] = f"Bearer {dep.config['api_key']}"
        try:
            async with session.get(
                dep.url + spec.version_path,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=VERSION_TIMEOUT_S),
            ) as resp:
                body = await resp.content.read(MAX_VERSION_BYTES)
                if resp.status == 200 and (version := spec.version_from(body)):
                    return version, f"the engine (GET {spec.version_path})"
        except (TimeoutError, aiohttp.ClientError):
            pass  # an engine without the route, or busy: the catalog's pin below
    image = dep.config.get("image")
    pinned = spec.pinned_version(image if isinstance(image, str) else None, platform)
    if pinned is not None:
        return pinned, f"the catalog's pin of {image or spec.default_image(platform)}"
    return None, None
