"""The agent <-> control-plane wire protocol (versioned), shared by
``agents.server`` and ``agents.client``: the control-plane messages, and the
encoding of those and of the telemetry frames (declared in ``telemetry.frames``,
which the store reads too).  A value a device or engine does not report is
``None`` on the wire (JSON ``null``) and "n/a" on screen — never 0.
"""

from __future__ import annotations

import json
import math
import types
import typing
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any, NamedTuple

from engines.catalog.options import run_options
from engines.model_files import LocalModel, ModelArch
from telemetry.frames import (
    PROTOCOL_VERSION,
    EngineTelemetry,
    GpuProcess,
    GpuSample,
    HostSample,
    TelemetryFrame,
)

# --- control-plane messages (added with the agent server, protocol 1) ------
# Fields added later within protocol 1 are optional with a None default: an older
# client ignores them (``_build``), an older agent never sends them.


@dataclass(frozen=True, slots=True)
class GpuInfo:
    index: int
    name: str
    uuid: str | None = None
    mem_total_bytes: int | None = None
    power_limit_w: float | None = None


@dataclass(frozen=True, slots=True)
class NodeInfo:
    node: str
    host: str
    platform: str
    agent_version: str
    gpus: tuple[GpuInfo, ...] = ()
    docker_version: str | None = None
    compose_version: str | None = None
    driver_version: str | None = None
    unified_memory: bool = False
    simulated: bool = False
    interval_s: float = 1.0
    runtimes: tuple[str, ...] = ()
    protocol: int = PROTOCOL_VERSION


@dataclass(frozen=True, slots=True)
class ImagePull:
    """An image a Compose start needs, as the agent got it onto the node: ``present``
    (used as it was, no registry asked), ``pulling`` (bytes and layers so far, from
    Docker's own pull progress) or ``pulled``."""

    image: str
    state: str
    done_bytes: int | None = None
    total_bytes: int | None = None
    """Of the layers whose size Docker has announced so far (it grows early in a pull)."""
    layers_done: int | None = None
    layers_total: int | None = None

    @property
    def fraction(self) -> float | None:
        """Bytes downloaded of those announced; None before any size is known."""
        if self.state != "pulling":
            return 1.0
        if not self.total_bytes:
            return None
        return min(1.0, (self.done_bytes or 0) / self.total_bytes)

    def describe(self) -> str:
        if self.state == "present":
            return f"image {self.image} present on the node (not pulled)"
        if self.state == "pulled":
            return f"image {self.image} pulled"
        mib = 1024 * 1024
        text = f"pulling image {self.image}"
        if self.total_bytes:
            text += f": {(self.done_bytes or 0) / mib:,.0f} of {self.total_bytes / mib:,.0f} MiB"
        if self.layers_total:
            text += f", {self.layers_done or 0} of {self.layers_total} layers done"
        return text


@dataclass(frozen=True, slots=True)
class KvCapacity:
    """The KV-cache capacity a running engine states, beside the fit estimator's figure
    for the same launch (``engines.fit.estimated_kv_capacity``), in tokens."""

    reported_tokens: int | None = None
    estimated_tokens: int | None = None
    difference_tokens: int | None = None
    """reported - estimated: positive where the engine holds more than predicted."""
    source: str = ""
    """Where the reported figure came from (the engine's route, its start-up log), or
    why there is none."""
    estimate_basis: str = ""
    """What the estimate rests on, or why there is none."""


@dataclass(frozen=True, slots=True)
class EngineInfo:
    """One deployment the agent manages (a Compose project, a process or a simulator)."""

    id: str
    kind: str
    runtime: str
    """compose | process | sim"""
    state: str
    health: str
    url: str | None = None
    port: int | None = None
    gpu_ids: tuple[int, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)
    simulated: bool = False
    started_at: float | None = None
    message: str | None = None
    """The last thing worth telling the operator (why it failed, what it adopted)."""
    healthy_at: float | None = None
    """Unix epoch seconds of the last good answer of the engine's health route (the agent
    asks every ``--health-interval``); with health "unhealthy" or "overloaded" (was ready,
    now too busy to pass its own health check: SGLang's 503) it says since when."""
    exit_code: int | None = None
    """A crashed engine's exit status, where the runtime knows it (an adopted process
    that died while no agent watched left none)."""
    start_timeout_s: float | None = None
    """How long the start's health gate waits: the start request's ``health_timeout_s``,
    else the engine spec's ``start_timeout_s``."""
    last_log_line: str | None = None
    """While starting or loading (and after a failed start): the engine's newest log line,
    so a long load shows what it is doing."""
    volumes: tuple[str, ...] = ()
    """Named Docker volumes the deployment mounts (its model caches): a stop keeps them;
    ``POST .../stop`` with ``remove_volumes`` naming them removes them too."""
    engine_version: str | None = None
    """The engine's version as the agent found it once the engine was ready: the engine's
    own answer, else the catalog's pin for the catalog's image; None where neither says.
    Its metrics are read with the series names of this version."""
    engine_version_from: str | None = None
    """Where ``engine_version`` came from, in words."""
    image_pull: ImagePull | None = None
    """A Compose engine's image: present, or its pull's progress while it starts."""
    kv_capacity: KvCapacity | None = None
    """Checked once the engine became healthy; None before, and for simulators."""

    @property
    def model(self) -> str | None:
        return config_model(self.config)


@dataclass(frozen=True, slots=True)
class ServiceInfo:
    """An engine this agent deployed to an orchestrator (a Swarm service): listed by the
    deploying agent beside its own engines; each replica is an engine of the node that
    runs it."""

    id: str
    kind: str
    runtime: str
    state: str
    """deployed | missing (its record is here, the orchestrator has no such service)"""
    replicas: int
    """How many replicas the orchestrator is asked to run."""
    running: int | None = None
    """How many run now; None where the orchestrator did not answer."""
    nodes: tuple[str, ...] = ()
    """The nodes running a replica (host names), one per replica."""
    placement: str = "any node"
    """Where replicas may run, in the orchestrator's constraint words."""
    port: int | None = None
    config: dict[str, Any] = field(default_factory=dict)
    message: str | None = None

    @property
    def model(self) -> str | None:
        return config_model(self.config)


def config_model(config: dict[str, Any]) -> str | None:
    """The model a launch config names: ``model``, or a simulator's ``profile``."""
    named = config.get("model") or config.get("profile")
    return None if named is None else str(named)


EVENT_KINDS = (
    "restarted",
    "starting",
    "started",
    "healthy",
    "unhealthy",
    "overloaded",
    "crashed",
    "stopped",
    "swapped",
    "rolled_back",
    "adopted",
    "failed",
    # Swarm: deployed or scaled by a manager; a task that appeared on or left this node
    "deploying",
    "deployed",
    "scaled",
    "appeared",
    "task_gone",
)


@dataclass(frozen=True, slots=True)
class AgentEvent:
    seq: int
    ts: float
    kind: str
    """One of EVENT_KINDS."""
    engine_id: str
    message: str = ""
    boot_id: str = ""
    """As TelemetryFrame.boot_id."""


@dataclass(frozen=True, slots=True)
class LoadRunInfo:
    """A load run the agent generates on its node (``/v1/loads``)."""

    run_id: str
    engine: str
    """The deployment it loads."""
    started_at: float
    last_seq: int
    """The sequence number of its newest event."""
    state: str
    """running, or its final event: RunFinished, RunFailed, RunInterrupted."""


@dataclass(frozen=True, slots=True)
class ModelInventory:
    """The models a node holds (``GET /v1/models-inventory``), each as its files state it
    (``engines.model_files.LocalModel``)."""

    node: str
    models: tuple[LocalModel, ...] = ()
    roots: tuple[str, ...] = ()
    """The directories searched: model dirs, cache dirs, cache volumes' mountpoints."""
    problems: tuple[str, ...] = ()
    """What could not be searched (Docker down, an unreadable directory)."""


PULL_FINAL_STATES = ("done", "failed", "cancelled")


@dataclass(frozen=True, slots=True)
class ModelPull:
    """A model the agent fetches into its node's cache (``/v1/models-inventory/pull``):
    a Hugging Face repository's files through ``huggingface_hub``, or an Ollama tag
    through the Ollama engine's own pull."""

    id: str
    node: str
    source: str
    """hf | ollama"""
    model: str
    """The repo id (``org/name``) or the Ollama tag."""
    state: str
    """pulling, then done, failed or cancelled."""
    revision: str | None = None
    """As asked (``main``, a tag, a commit); ``commit`` is what it resolved to."""
    commit: str | None = None
    files: tuple[str, ...] = ()
    """The repository's files the engine needs: only these are fetched."""
    total_bytes: int | None = None
    """What the files hold (the hub's file metadata); Ollama: the current layer's."""
    done_bytes: int = 0
    """Of ``total_bytes``, on the node now (files already cached count)."""
    rate_bytes_per_s: float | None = None
    """Over the last few seconds; None before two readings."""
    message: str = ""
    """What it is doing, or why it failed, in words."""
    path: str | None = None
    """Where the model is once done (the snapshot folder)."""
    started_at: float = 0.0
    elapsed_s: float = 0.0

    @property
    def final(self) -> bool:
        return self.state in PULL_FINAL_STATES


def engine_facts(info: EngineInfo) -> dict[str, Any]:
    """What a run stores of its engine (``RunSetup.engine``): the start options it was
    launched with and its KV-capacity check."""
    return {
        "options": run_options(info.config),
        "kv_capacity": None if info.kv_capacity is None else to_dict(info.kv_capacity),
    }


def to_dict(obj: Any) -> dict[str, Any]:
    """A protocol dataclass as plain wire data (see ``reported``)."""
    result: dict[str, Any] = reported(asdict(obj))
    return result


def reported(data: Any) -> Any:
    """``data`` with every NaN or infinity made None: such a value was not measured (a
    histogram with infinite counts, a broken sensor), and JSON has no spelling for it but
    null ("NaN" is no JSON, and strict parsers refuse the whole message)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: reported(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [reported(value) for value in data]
    return data


def dumps(data: Any) -> str:
    """The JSON text of anything the agent sends: standard JSON only (``allow_nan=False``
    makes a non-finite float that bypassed ``to_dict`` an error, never a "NaN" on the wire)."""
    return json.dumps(data, allow_nan=False, default=str)


def _build(cls: type[Any], data: Any) -> Any:
    """Rebuild ``cls`` from plain data, ignoring keys a newer agent added; a NaN or an
    infinity reads as None (see ``reported``)."""
    if not isinstance(data, dict):
        raise ProtocolError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
    kwargs: dict[str, Any] = {}
    # one pass of plain locals per field: a fleet's TUI decodes thousands a second
    for name, hint, fits, exact, one, many in _plan(cls):
        value = data.get(name, _ABSENT)
        if value is _ABSENT:
            continue
        kind = type(value)
        if one is not None and value is not None:
            value = _build_in(cls, name, one, value)
            kind = one
        elif many is not None:
            if kind is not list and kind is not tuple:
                raise ProtocolError(f"{cls.__name__}.{name}: expected a list")
            try:
                value = tuple([_build(many, v) for v in value])
            except ProtocolError as exc:
                raise ProtocolError(f"{cls.__name__}.{name}: {exc}") from None
            kind = tuple
        elif kind is float:
            if not math.isfinite(value):
                value, kind = None, type(None)
        elif kind is list or kind is tuple:
            value, kind = tuple(reported(value)), tuple
        elif kind is dict:
            value = reported(value)
        if kind not in exact if exact is not None else not fits(value):
            raise ProtocolError(
                f"{cls.__name__}.{name}: expected {_type_name(hint)}, "
                f"got {type(value).__name__} {value!r:.40}"
            )
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ProtocolError(f"{cls.__name__}: {exc}") from exc


def _build_in(outer: type[Any], name: str, cls: type[Any], data: Any) -> Any:
    """A nested message; its error says where it sits (``TelemetryFrame.gpus: ...``)."""
    try:
        return _build(cls, data)
    except ProtocolError as exc:
        raise ProtocolError(f"{outer.__name__}.{name}: {exc}") from None


Fits = Callable[[Any], bool]


class _Field(NamedTuple):
    """How one field of a message class is read off the wire, worked out once per class:
    a fleet's TUI decodes thousands of these a second (typing's introspection on every
    field of every frame was most of its CPU at 256 nodes)."""

    name: str
    hint: Any
    fits: Fits
    exact: frozenset[type[Any]] | None
    """The exact types that fit, where a type test is all ``fits`` does (nearly every
    field: JSON gives exact types), so most fields cost a set lookup and no call."""
    one: type[Any] | None
    """The nested message class of a field holding one."""
    many: type[Any] | None
    """The nested message class of a field holding a list of them."""


_ABSENT = object()


_PLANS: dict[type[Any], tuple[_Field, ...]] = {}


def _plan(cls: type[Any]) -> tuple[_Field, ...]:
    plan = _PLANS.get(cls)
    if plan is None:
        hints = typing.get_type_hints(cls)
        one, many = _NESTED_ONE.get(cls, {}), _NESTED_MANY.get(cls, {})
        plan = _PLANS[cls] = tuple(
            _Field(
                f.name,
                hints[f.name],
                _fits(hints[f.name]),
                _exact_types(hints[f.name]),
                one.get(f.name),
                many.get(f.name),
            )
            for f in fields(cls)
        )
    return plan


_EXACT: dict[Any, tuple[type[Any], ...]] = {
    float: (float, int),  # JSON writes 300.0 as 300; a bool is no number
    int: (int,),
    bool: (bool,),
    str: (str,),
    type(None): (type(None),),
}


def _exact_types(hint: Any) -> frozenset[type[Any]] | None:
    """``_fits(hint)`` as a set of exact types, or None where it needs more than the type
    (a tuple's items, Any, a class a subclass of which could arrive)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is types.UnionType or origin is typing.Union:
        parts = [_exact_types(a) for a in args]
        return None if None in parts else frozenset().union(*(p for p in parts if p))
    if origin is dict:
        return frozenset({dict})  # json.loads and ``reported`` make plain dicts
    if hint in _EXACT:
        return frozenset(_EXACT[hint])
    if isinstance(hint, type) and is_dataclass(
        hint
    ):  # a nested message, built by ``_build`` itself
        return frozenset({hint})
    return None


def _fits(hint: Any) -> Fits:
    """The test that a value has the declared type ``hint`` (nested messages are built
    already): a message field of another type fails at the wire, not later on a screen."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is types.UnionType or origin is typing.Union:
        alternatives = tuple(_fits(a) for a in args)
        return lambda v: any(fits(v) for fits in alternatives)
    if origin is tuple:
        item = _fits(args[0])
        return lambda v: isinstance(v, tuple) and all(item(x) for x in v)
    if origin is dict:
        return lambda v: isinstance(v, dict)
    if hint is Any:
        return lambda v: True
    if hint in _EXACT:  # the scalar rules live once, in _EXACT
        kinds = _EXACT[hint]
        return lambda v: type(v) in kinds
    return lambda v: isinstance(v, hint)


def _type_name(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


def _decode(cls: type[Any], data: Any) -> Any:
    # An older agent may still send NaN (json.loads takes it): not reported either way.
    return _build(cls, data)


_NESTED_ONE: dict[type[Any], dict[str, type[Any]]] = {
    TelemetryFrame: {"host": HostSample},
    EngineInfo: {"image_pull": ImagePull, "kv_capacity": KvCapacity},
    LocalModel: {"arch": ModelArch},
}
_NESTED_MANY: dict[type[Any], dict[str, type[Any]]] = {
    TelemetryFrame: {"gpus": GpuSample, "engines": EngineTelemetry},
    GpuSample: {"processes": GpuProcess},
    NodeInfo: {"gpus": GpuInfo},
    ModelInventory: {"models": LocalModel},
}


class ProtocolError(ValueError):
    """A message that does not fit the protocol (wrong version, missing fields)."""


def _check_version(data: dict[str, Any]) -> None:
    if not isinstance(data, dict):
        raise ProtocolError(f"expected an object, got {type(data).__name__}")
    version = data.get("protocol", PROTOCOL_VERSION)
    if version != PROTOCOL_VERSION:
        raise ProtocolError(
            f"agent speaks protocol {version}, this client speaks {PROTOCOL_VERSION}: "
            "upgrade the older side"
        )


def frame_to_dict(frame: TelemetryFrame) -> dict[str, Any]:
    return to_dict(frame)


def frame_from_dict(data: dict[str, Any]) -> TelemetryFrame:
    _check_version(data)
    frame: TelemetryFrame = _decode(TelemetryFrame, data)
    return frame


def node_info_from_dict(data: dict[str, Any]) -> NodeInfo:
    _check_version(data)
    info: NodeInfo = _decode(NodeInfo, data)
    return info


def engine_info_from_dict(data: dict[str, Any]) -> EngineInfo:
    info: EngineInfo = _decode(EngineInfo, data)
    return info


def service_info_from_dict(data: dict[str, Any]) -> ServiceInfo:
    info: ServiceInfo = _decode(ServiceInfo, data)
    return info


def event_from_dict(data: dict[str, Any]) -> AgentEvent:
    event: AgentEvent = _decode(AgentEvent, data)
    return event


def load_run_from_dict(data: dict[str, Any]) -> LoadRunInfo:
    info: LoadRunInfo = _decode(LoadRunInfo, data)
    return info


def model_inventory_from_dict(data: dict[str, Any]) -> ModelInventory:
    found: ModelInventory = _decode(ModelInventory, data)
    return found


def model_pull_from_dict(data: dict[str, Any]) -> ModelPull:
    pull: ModelPull = _decode(ModelPull, data)
    return pull


def local_model_from_dict(data: dict[str, Any]) -> LocalModel:
    model: LocalModel = _decode(LocalModel, data)
    return model
