"""The config file as text: the commented one ``infer-top config init`` writes and the
effective one ``infer-top config show`` prints (secrets masked).

Both are rendered from the code's own defaults and parsers' names (``control.config``,
``alerts.config``), so the file a new user starts from says what infer-top reads, and
``tests/control/test_config_cli.py`` checks that it parses back to the defaults.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from alerts import AlertConfig, Severity
from alerts.config import DEFAULT_HOOK_TIMEOUT_S, DEFAULT_RULES, HookConfig, RuleConfig
from control.config import DEFAULT_REFRESH_S, Config, NodeConfig
from control.cost import Prices
from store import default_db_path

MASK = "***"
SECRET_WORD = re.compile(r"token|bearer|secret|passw|api[-_]?key|auth", re.IGNORECASE)

HEADER = """\
# infer-top configuration (TOML), read by the TUI and every infer-top sub-command.
# Written by `infer-top config init`; `infer-top config show` prints what infer-top reads.
# Every value set below is infer-top's default: change it, or delete the line to keep the
# default. Commented-out lines are settings without a default (or examples).
# This file names token files and may hold webhook URLs with secrets: keep it owner-only
# (config init creates it with mode 0600). README.md, "Configuration", explains every key.
"""

NODES_EXAMPLE = """\
# --- Nodes: one [[nodes]] table per agent to watch. With none, the TUI starts an
# embedded agent on this machine (the first run shows something real).
#
# [[nodes]]
# name = "h100-a"
# url = "https://10.0.0.5:7443"     # the agent's URL (http:// or https://)
# token_file = "h100-a.token"       # its bearer token, chmod 600 (relative: to this file)
# fingerprint = "sha256:3f9a..."    # pin the agent's TLS certificate as infer-agent printed it,
# # ca = "lab-ca.pem"               # or the CA that signed it (one of the two)
#
# [[nodes]]
# name = "jetson"
# transport = "ssh"                 # reach the agent through your ssh client ("http": direct)
# ssh = "jetson"                    # user@host or a ~/.ssh/config alias
# url = "http://127.0.0.1:7070"     # the agent as the node sees it (the default with ssh)
# token_file = "jetson.token"
# # ssh_config = "~/.ssh/lab.conf"  # an ssh_config file for this node (ssh -F)
"""

HOOKS_EXAMPLE = f"""\
# --- Alert hooks: what runs when an alert of a severity ({", ".join(Severity)}) is raised
# and cleared; each gets the alert as JSON, within timeout_s (default {DEFAULT_HOOK_TIMEOUT_S:g}).
#
# [alerts.hooks.critical]
# command = ["/usr/local/bin/page-oncall"]          # argv, no shell; the JSON on stdin
#
# [alerts.hooks.warning]
# webhook = "https://chat.example/hooks/infer-top"  # the JSON as a POST body
# timeout_s = {DEFAULT_HOOK_TIMEOUT_S:g}"""


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(int(value)) if float(value).is_integer() else repr(float(value))
    if isinstance(value, str | Path):
        return json.dumps(str(value))  # a JSON string is a TOML basic string
    if isinstance(value, Sequence):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def _rule(name: str, rule: RuleConfig, *, doc: bool) -> str:
    lines = [f"[alerts.rules.{name}]"]
    if doc:
        lines.append(f"# {rule.title}: {rule.doc}")
    lines += [f"severity = {toml_value(str(rule.severity))}", f"hold_s = {toml_value(rule.hold_s)}"]
    for key in ("threshold", "window_s"):
        value = getattr(rule, key)
        if value is not None:
            lines.append(f"{key} = {toml_value(value)}")
    lines.append(f"enabled = {toml_value(rule.enabled)}")
    return "\n".join(lines) + "\n"


def _ui(refresh_s: float) -> str:
    return (
        "[ui]\n"
        f"refresh_s = {toml_value(refresh_s)}"
        "   # the slowest the screen lags the newest frame, 0.02-5 s\n"
    )


COST_EXAMPLE = """\
# --- Prices, for cost per million tokens in reports and comparisons (control.cost).
#
# [cost]
# currency = "EUR"
# kwh = 0.30                        # price per kWh of GPU energy
# [cost.gpu_hourly]                 # per GPU of that model, per hour
# H100 = 2.50
# [cost.nodes]                      # the whole node per hour, or its GPU model's name
# h100-a = 19.90
# h100-b = "H100"                  # 2.50 x the GPUs its engine uses
"""

PROFILES_EXAMPLE = """\
# --- Load profiles the Load screen offers beside smoke / sweep / seed-h100 (e edits and saves
# them here; control.load_profiles). concurrency = [...] or rate = [...] (requests/s).
#
# [load.profiles.long-prompts]
# concurrency = [1, 4, 16]
# requests = 64
# input_len = 2048
# output_len = 256
# warmup = 4
# timeout_s = 600
# slo = "ttft=2s,tpot=50ms"
"""


def template_text() -> str:
    """The file ``config init`` writes: every setting with its default and a comment."""
    rules = "\n".join(_rule(name, rule, doc=True) for name, rule in DEFAULT_RULES.items())
    return (
        "\n".join(
            [
                HEADER,
                NODES_EXAMPLE,
                "# --- The screen.",
                _ui(DEFAULT_REFRESH_S),
                "# --- Where runs, telemetry and alerts are kept (one SQLite file). Default:",
                "# $INFER_TOP_DB, else $XDG_DATA_HOME/infer-top/infer-top.db.",
                "[store]",
                f"# path = {toml_value(default_db_path())}\n",
                "# --- Alert rules: raise once the condition held hold_s seconds, clear once",
                "# it was gone as long; threshold and window_s in the unit its comment says.",
                rules,
                HOOKS_EXAMPLE,
                "",
                COST_EXAMPLE,
                "",
                PROFILES_EXAMPLE,
            ]
        )
        + "\n"
    )


def mask_url(url: str) -> str:
    """A URL with what can carry a secret (user info, path, query) masked; host shown."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    if parts.username or parts.password:
        host = f"{MASK}@{host}"
    secret_path = parts.path not in ("", "/") or parts.query or parts.fragment
    return urlunsplit((parts.scheme, host, "/" + MASK if secret_path else parts.path, "", ""))


def mask_command(argv: Sequence[str]) -> list[str]:
    """argv with each argument that names a secret, and the one after such a flag, masked."""
    out: list[str] = []
    after_flag = False
    for arg in argv:
        if after_flag:
            out.append(MASK)
            after_flag = False
        elif SECRET_WORD.search(arg) and out:
            flag, sep, _ = arg.partition("=")
            after_flag = flag.startswith("-") and not sep  # ``--token VALUE``: mask VALUE
            out.append(arg if after_flag else f"{flag}={MASK}" if sep else MASK)
        else:
            out.append(arg)
    return out


def _node(node: NodeConfig) -> str:
    values: list[tuple[str, object | None]] = [
        ("name", node.name),
        ("transport", node.transport),
        ("ssh", node.ssh),
        ("url", mask_url_userinfo(node.url)),
        ("token_file", node.token_file),
        ("ssh_config", node.ssh_config),
        ("ca", node.ca),
        ("fingerprint", node.fingerprint),
    ]
    lines = ["[[nodes]]"] + [f"{k} = {toml_value(v)}" for k, v in values if v is not None]
    return "\n".join(lines) + "\n"


def mask_url_userinfo(url: str) -> str:
    """An agent URL as it is but for a password in it (the token is in token_file)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:{MASK}@" + parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=netloc))


def _hook(severity: Severity, hook: HookConfig) -> str:
    lines = [f"[alerts.hooks.{severity}]"]
    if hook.command:
        lines.append(f"command = {toml_value(mask_command(hook.command))}")
    if hook.webhook is not None:
        lines.append(f"webhook = {toml_value(mask_url(hook.webhook))}")
    lines.append(f"timeout_s = {toml_value(hook.timeout_s)}")
    return "\n".join(lines) + "\n"


def _alerts(alerts: AlertConfig) -> list[str]:
    rules = [_rule(name, rule, doc=False) for name, rule in alerts.rules.items()]
    return rules + [_hook(severity, hook) for severity, hook in alerts.hooks.items()]


def effective_text(config: Config, searched: Path) -> str:
    """What ``config show`` prints: where the config came from, then every setting in
    force (defaults included) as TOML, with secrets in URLs and hook commands masked."""
    if config.source is None:
        origin = (
            f"# no config file ({searched} does not exist): infer-top's defaults.\n"
            "# `infer-top config init` writes a commented file to start from.\n"
        )
    else:
        origin = f"# effective config, read from {config.source}\n"
    if not config.nodes:
        origin += "# no [[nodes]]: the TUI starts an embedded agent on this machine\n"
    origin += f"# secrets in URLs and hook commands are shown as {MASK}\n"
    parts = [origin, *(_node(node) for node in config.nodes)]
    store = f"[store]\npath = {toml_value(config.db_path)}"
    if os.environ.get("INFER_TOP_DB"):
        store += "   # from $INFER_TOP_DB, which wins over the file"
    parts += [_ui(config.refresh_s), store + "\n"]
    extra = [_cost(config.prices)] if config.prices.configured else []
    extra += [profile.toml() for profile in config.load_profiles]
    return "\n".join(parts + _alerts(config.alerts) + extra)


def _cost(prices: Prices) -> str:
    lines = ["[cost]", f"currency = {toml_value(prices.currency)}"]
    if prices.kwh is not None:
        lines.append(f"kwh = {toml_value(prices.kwh)}")
    if prices.gpu_hourly:
        lines += ["[cost.gpu_hourly]"]
        lines += [f"{toml_value(k)} = {toml_value(v)}" for k, v in prices.gpu_hourly.items()]
    nodes = {**prices.node_gpu, **prices.node_hourly}
    if nodes:
        lines += ["[cost.nodes]"] + [f"{toml_value(k)} = {toml_value(v)}" for k, v in nodes.items()]
    return "\n".join(lines) + "\n"
