"""One logging helper for the flows."""

from __future__ import annotations

import sys

from prefect import get_run_logger


def log(msg: str) -> None:
    """To the flow or task run's log (shown on the console and in the Prefect UI); plain stderr outside a run."""
    try:
        get_run_logger().info(msg)
    except Exception:  # outside a run context
        print(msg, file=sys.stderr, flush=True)
