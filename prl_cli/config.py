"""``prl config``."""

from __future__ import annotations

import argparse
import json
import sys


def _cmd_config_check(args: argparse.Namespace) -> int:
    from prl_core.config import AlgorithmConfig, ConfigError

    try:
        cfg = AlgorithmConfig.from_yaml(args.file)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(cfg.to_dict(), indent=2))
    return 0


def register(sub) -> None:
    """Add ``config`` to the ``prl`` command's subparsers."""
    p = sub.add_parser("config", help="algorithm config tools")
    csub = p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    c = csub.add_parser(
        "check",
        help="validate a config file",
        description="Validate the 'algorithm:' section of a YAML config (types, ranges, cross-field rules) "
        "and print it as JSON with every default resolved. Exit status 2 with a message saying how to fix it. "
        "Example: prl config check configs/algorithm/prl.yaml",
    )
    c.add_argument("file", help="YAML file, e.g. configs/algorithm/prl.yaml")
    c.set_defaults(func=_cmd_config_check)
