"""Pre-flight of a load run: before the first measured request, the endpoint answers,
serves the model named, is the engine kind named (or that kind is detected), and its
context holds the run's longest request (prompt + output, where the engine says its
context: the catalog's ``context_route``).

A wrong ``--model`` or a prompt longer than the engine's context would otherwise become
a run of 100 % ``http_status`` failures (or of answers cut short) that is saved to the
store; here it is an error in words, and no run exists yet to be saved."""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp

from engines.catalog import all_specs, get_spec
from loadgen.workload import Workload
from sim.labels import is_simulated

GENERIC_KIND = "openai"
"""An OpenAI-compatible server of no known kind: nothing to check it against."""


class PreflightError(Exception):
    """The endpoint cannot take the run as asked: the message says what it offers."""


@dataclass(frozen=True, slots=True)
class Preflight:
    """What the endpoint said before the run."""

    model: str
    """The model the run asks for (the one named, or the only one served)."""
    models: tuple[str, ...]
    """Every model id ``/v1/models`` lists."""
    detected_kinds: tuple[str, ...]
    """Engine kinds that ``/v1/models`` (its ``owned_by``) or ``/metrics`` (its series)
    name (empty: none recognised)."""
    simulated: bool
    context_tokens: int | None = None
    """The most tokens one request may hold, as the engine says (None: it does not)."""


def _v1(base_url: str) -> str:
    url = base_url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def _root(base_url: str) -> str:
    url = base_url.rstrip("/")
    return url.removesuffix("/v1")


def kinds_in_metrics(text: str) -> tuple[str, ...]:
    """Engine kinds whose own token or queue series appear in a ``/metrics`` page (the
    catalog's metric names, one place): forks that share a dialect all match."""
    names = {line.split("{", 1)[0].split(" ", 1)[0] for line in text.splitlines() if line}
    found = []
    for spec in all_specs():
        table = spec.metric_names
        if table is None:
            continue
        own = (*table.generation_tokens, *table.prompt_tokens, *table.running)
        if names.intersection(own):
            found.append(spec.kind)
    return tuple(sorted(found))


def kinds_owning(models: object) -> tuple[str, ...]:
    """Engine kinds whose ``owned_by`` the ``/v1/models`` answer shows (the catalog's)."""
    listed = models.get("data") if isinstance(models, dict) else None
    owners = {m.get("owned_by") for m in listed or () if isinstance(m, dict)}
    return tuple(s.kind for s in all_specs() if s.models_owned_by and s.models_owned_by in owners)


async def preflight(
    base_url: str,
    *,
    model: str | None,
    engine_kind: str,
    api_key: str | None = None,
    timeout_s: float = 10.0,
    workload: Workload | None = None,
) -> Preflight:
    """Ask ``/v1/models`` (and ``/metrics`` for the kind, the context route for its
    context); PreflightError in words when the endpoint does not answer, does not serve
    ``model``, is another kind or cannot hold ``workload``'s longest request."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    url = f"{_v1(base_url)}/models"
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
        try:
            async with session.get(url) as resp:
                simulated = is_simulated(headers=resp.headers)
                if resp.status != 200:
                    raise PreflightError(
                        f"{url} answered HTTP {resp.status}: not an OpenAI-compatible "
                        "engine, or the API key is wrong (pass --api-key or "
                        "$INFER_TOP_API_KEY)"
                    )
                data: object = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise PreflightError(
                f"the endpoint {base_url} does not answer ({type(exc).__name__}: {exc}): "
                "check --url and that the engine is up"
            ) from None
        except ValueError:
            raise PreflightError(f"{url} did not answer JSON: is {base_url} an engine?") from None
        models = _model_ids(data)
        simulated = simulated or (isinstance(data, dict) and is_simulated(models=data))
        detected = tuple(sorted({*kinds_owning(data), *await _detect_kinds(session, base_url)}))
        known = detected[0] if engine_kind == GENERIC_KIND and len(detected) == 1 else None
        kind = known or engine_kind
        named = model or (models[0] if len(models) == 1 else "")
        context = await _context(session, base_url, kind, named)
    offered = ", ".join(models) or "none"
    if model is None:
        if len(models) != 1:
            raise PreflightError(f"name the model with --model; {url} lists: {offered}")
        model = models[0]
    elif models and model not in models:
        raise PreflightError(
            f"the engine at {base_url} does not serve model {model!r}; it serves: {offered} "
            "(pass one of these as --model)"
        )
    if engine_kind != GENERIC_KIND and detected and engine_kind not in detected:
        raise PreflightError(
            f"the engine at {base_url} is {' or '.join(detected)} by its own word, not "
            f"{engine_kind}: pass --engine {detected[0]} (or --engine {GENERIC_KIND})"
        )
    if workload is not None and context is not None:
        check_fits(workload, context, kind, base_url)
    return Preflight(model, models, detected, simulated, context)


async def context_tokens(
    base_url: str,
    *,
    model: str,
    engine_kind: str,
    api_key: str | None = None,
    timeout_s: float = 10.0,
) -> int | None:
    """The engine's context as it says (its catalog ``context_route``), or None where it
    does not say or does not answer (the run then shows what the engine says)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
        return await _context(session, base_url, engine_kind, model)


def check_fits(workload: Workload, context: int, engine_kind: str, base_url: str) -> None:
    """PreflightError in words when ``workload``'s longest request (prompt + output)
    exceeds ``context``, the engine's: every such request would be refused (a prompt
    longer than it) or its answer cut short where the context ends."""
    longest = workload.longest_request()
    if longest is None or sum(longest) <= context:
        return
    prompt, output = longest
    spec = get_spec(engine_kind)
    said = spec.context_route.describe() if spec.context_route else "its own word"
    raise PreflightError(
        f"the run's requests take up to {prompt} prompt + {output} output = "
        f"{prompt + output} tokens, more than the context of {context} tokens that "
        f"{spec.display_name} at {base_url} has ({said}): the engine would refuse them or "
        "cut their answers short. Ask for shorter prompts or outputs, or start the "
        "engine with a longer context"
    )


async def _context(
    session: aiohttp.ClientSession, base_url: str, engine_kind: str, model: str
) -> int | None:
    try:
        route = get_spec(engine_kind).context_route
    except KeyError:  # "openai": an engine of no known kind
        return None
    if route is None:
        return None
    try:
        async with session.get(f"{_root(base_url)}{route.path}") as resp:
            if resp.status != 200:
                return None
            return route.read(await resp.json(content_type=None), model)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


def _model_ids(data: object) -> tuple[str, ...]:
    listed = data.get("data") if isinstance(data, dict) else None
    if not isinstance(listed, list):
        return ()
    return tuple(str(m["id"]) for m in listed if isinstance(m, dict) and m.get("id"))


async def _detect_kinds(session: aiohttp.ClientSession, base_url: str) -> tuple[str, ...]:
    """The kinds ``/metrics`` shows; none when it is absent (llama-server without
    ``--metrics``): then the kind named is taken on trust."""
    try:
        async with session.get(f"{_root(base_url)}/metrics") as resp:
            if resp.status != 200:
                return ()
            return kinds_in_metrics(await resp.text())
    except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError):
        return ()
