"""``prl sql``."""

from __future__ import annotations

import argparse
import sys


def _cmd_sql(args: argparse.Namespace) -> int:
    from prl.store.readonly import QueryRefused, render, run_query

    try:
        cols, rows = run_query(args.db, args.query, timeout_s=args.timeout)
    except QueryRefused as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
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
    p.add_argument("query", help='e.g. "select dataset, avg(score) from samples group by 1"')
    p.add_argument("--db", required=True, help="store file (.duckdb)")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds before the query is cut off (default 10)")
    p.set_defaults(func=_cmd_sql)
