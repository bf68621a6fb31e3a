"""``infer-top config init`` (a commented config file to start from) and ``infer-top config
show`` (the config in force, and which file it came from)."""

from __future__ import annotations

import argparse
import os
import stat
import sys
from pathlib import Path

from control.config import ConfigError, config_path, load_config
from control.config_edit import replace_file
from control.config_file import effective_text, template_text

CONFIG_MODE = 0o600
"""Owner-only: the file names token files and may hold webhook URLs with secrets."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "config",
        help="write a commented config file, or show the config in force",
        description="The config file: nodes, screen, store and alert rules (README.md, "
        "'Configuration'). Its path: --config, else $INFER_TOP_CONFIG, else "
        "$XDG_CONFIG_HOME/infer-top/config.toml.",
    )

    def no_action(_args: argparse.Namespace) -> int:
        p.print_usage(sys.stderr)
        print("infer-top config: name an action: init or show", file=sys.stderr)
        return 2

    p.set_defaults(func=no_action)
    actions = p.add_subparsers(dest="config_command", metavar="ACTION")
    init = actions.add_parser(
        "init",
        help="write a commented config file with every default (mode 0600)",
        description="Write a config file listing every setting with its default and a "
        "comment, owner-only (0600). An existing file is kept unless --force.",
    )
    init.add_argument("--config", type=Path, default=None, help=f"where (default {config_path()})")
    init.add_argument("--force", action="store_true", help="replace an existing file")
    init.set_defaults(func=run_init)
    show = actions.add_parser(
        "show",
        help="print the config in force (defaults included, secrets masked) and its file",
    )
    show.add_argument(
        "--config", type=Path, default=None, help=f"the file to read (default {config_path()})"
    )
    show.set_defaults(func=run_show)


def run_init(args: argparse.Namespace) -> int:
    path: Path = (args.config or config_path()).expanduser()
    if path.exists() and not args.force:
        print(
            f"infer-top config init: {path} already exists; nothing written. "
            "`infer-top config show` prints it; --force replaces it.",
            file=sys.stderr,
        )
        return 2
    try:
        replace_file(path, template_text(), CONFIG_MODE)
    except OSError as exc:
        print(f"infer-top config init: cannot write {path}: {exc.strerror}", file=sys.stderr)
        return 2
    print(f"wrote {path} (mode 0600): add your [[nodes]], then `infer-top config show`")
    return 0


def run_show(args: argparse.Namespace) -> int:
    searched = (args.config or config_path()).expanduser()
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"infer-top config show: {exc}", file=sys.stderr)
        return 2
    if config.source is not None and os.stat(config.source).st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        print(
            f"warning: {config.source} is readable by others and may hold secrets; "
            f"run: chmod 600 {config.source}",
            file=sys.stderr,
        )
    sys.stdout.write(effective_text(config, searched))
    return 0
