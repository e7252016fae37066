"""What every ``prl`` command shares: the options no config holds, and running a Prefect flow."""

from __future__ import annotations

import contextlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


@dataclass
class ProgressOptions:
    """The switch of every command that shows a progress bar."""

    no_progress: bool = False
    """No progress bar."""


def print_json(result: Any) -> None:
    print(json.dumps(result, indent=2, default=str))


def run_flow(log_file: str | Path, run: Callable[[], Any], *, show: Callable[[Any], None] = print_json,
             next_hint: Callable[[Any], str] | None = None) -> int:
    """Run a flow (``run``) as every command that runs one does: library messages to the run's log file
    (``prl.log_routing.log_to``), library chatter printed to stdout moved to stderr while it runs (stdout carries
    the result), the result shown on stdout (JSON by default), then the command to run next on stderr.
    The environment Prefect needs is set once for every command by ``prl_cli.main.main``."""
    from prl import log_routing

    log_routing.log_to(Path(log_file))
    with contextlib.redirect_stdout(sys.stderr):
        result = run()
    show(result)
    if next_hint is not None:
        print(f"next: {next_hint(result)}", file=sys.stderr)
    return 0
