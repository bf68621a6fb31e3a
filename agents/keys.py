"""Typed application keys shared by the server and its handlers."""

from __future__ import annotations

from aiohttp import web
from prometheus_client.registry import CollectorRegistry

from agents.config import AgentConfig
from agents.manager import EngineManager
from agents.protocol import NodeInfo
from agents.sampler import Sampler
from agents.security import AuditLog

CONFIG = web.AppKey("config", AgentConfig)
SAMPLER = web.AppKey("sampler", Sampler)
MANAGER = web.AppKey("manager", EngineManager)
NODE_INFO = web.AppKey("node_info", NodeInfo)
AUDIT = web.AppKey("audit", AuditLog)
REGISTRY = web.AppKey("registry", CollectorRegistry)
SOCKETS = web.AppKey("sockets", set[web.WebSocketResponse])
