"""``prl sql``."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from prl.options import add_config_arguments, option


@dataclass
class SqlOptions:
    """`prl sql`."""

    query: str = option(flag="positional")
    """The statement, e.g. "select dataset, avg(score) from samples group by 1"."""
    db: str = option()
    """Store file (.duckdb)."""
    format: str = option("table", choices=("table", "csv", "json"))
    """Output format."""
    timeout: float = 10.0
    """Seconds before the query is cut off."""


def _cmd_sql(args: argparse.Namespace) -> int:
    from prl.store.readonly import render, run_query

    cols, rows = run_query(args.db, args.query, timeout_s=args.timeout)  # QueryRefused: main's one error line
    print(render(cols, rows, args.format))
    return 0


def register(sub) -> None:
    """Add ``sql`` to the ``prl`` command's subparsers."""
    p = sub.add_parser(
        "sql",
        help="run one read-only SQL query on a store",
        description="Run one SELECT (or WITH/DESCRIBE/SHOW) statement on a DuckDB store opened read-only, with "
        "external access (files, network, extensions) off and the configuration locked. Writes, ATTACH, COPY, "
        "INSTALL/LOAD and SET are refused; queries longer than --timeout are cut off. Example: prl sql --db "
        "runs/demo/store.duckdb \"select run_id, dataset, average_at_n from dataset_metrics\"",
    )
    add_config_arguments(p, SqlOptions)
    p.set_defaults(func=_cmd_sql)
