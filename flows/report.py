"""The ``report`` flow: ``prl report`` as a schedulable deployment (text into the flow's log and a
Prefect markdown artifact, and returned)."""

from __future__ import annotations

from prefect import flow, get_run_logger

from prl.evaluation.report import report
from prl.store.db import DEFAULT_STORE, Store


@flow(name="report", log_prints=False)
def report_flow(db: str = DEFAULT_STORE, runs: list[str] | None = None, k: list[int] | None = None) -> str:
    """Scores of ``runs`` (default: every run with samples, none compared); when ``runs`` are named,
    the paired comparison of the second against the first (or a line saying they share no problem)."""
    text = report(Store(db, create=False), runs, k)
    get_run_logger().info("\n" + text)
    try:
        from prefect.artifacts import create_markdown_artifact

        create_markdown_artifact(markdown="```\n" + text + "\n```", key="prl-report", description=f"report of {db}")
    except Exception:  # artifacts need an API; the text is still returned and logged
        pass
    return text
