"""The telemetry vocabulary shared by the agents that sample it and the store that keeps
it: frame classes declared once (``telemetry.frames``), with per-field metadata saying
what the store keeps (``telemetry.fields``).  Imports nothing else of infer-top."""

from telemetry.fields import StoredField, stored, stored_fields
from telemetry.frames import (
    PROTOCOL_VERSION,
    EngineTelemetry,
    GpuProcess,
    GpuSample,
    HostSample,
    TelemetryFrame,
)

__all__ = [
    "PROTOCOL_VERSION",
    "EngineTelemetry",
    "GpuProcess",
    "GpuSample",
    "HostSample",
    "StoredField",
    "TelemetryFrame",
    "stored",
    "stored_fields",
]
