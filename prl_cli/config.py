"""``prl config``."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from prl.options import add_config_arguments, option

from prl_cli.common import Verbosity


@dataclass
class CheckOptions:
    """`prl config check`."""

    file: str = option(flag="positional")
    """YAML file, e.g. configs/algorithm/prl.yaml."""


def _cmd_config_check(args: argparse.Namespace) -> int:
    from prl.config_files import load_algorithm_config

    print(json.dumps(load_algorithm_config(args.file).to_dict(), indent=2))  # a ConfigError: main's one line
    return 0


def register(sub) -> None:
    """Add ``config`` to the ``prl`` command's subparsers."""
    p = sub.add_parser("config", help="algorithm config tools")
    csub = p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    c = csub.add_parser(
        "check",
        help="validate an algorithm config file and print it with defaults resolved",
        description="Validate the 'algorithm:' section of a YAML config (types, ranges, cross-field rules) "
        "and print it as JSON with every default resolved. Exit status 2 with a message saying how to fix it. "
        "Example: prl config check configs/algorithm/prl.yaml",
    )
    add_config_arguments(c, CheckOptions)
    add_config_arguments(c, Verbosity)
    c.set_defaults(func=_cmd_config_check)
