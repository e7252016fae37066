"""``prl sql``."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from prl.options import add_config_arguments, option
from prl.store.db import DEFAULT_STORE

from prl_cli.common import FORMATS, Verbosity, check_store


@dataclass
class SqlOptions:
    """`prl sql`."""

    query: str = option(flag="positional")
    """The statement, e.g. "select dataset, avg(score) from samples group by 1"."""
    db: str = DEFAULT_STORE
    """Store file."""
    format: str = option("table", choices=FORMATS)
    """Output: an aligned table, CSV (a header row, then one line per row) or JSON (a list of objects)."""
    timeout_s: float = option(10.0, was=("--timeout",))
    """Seconds before the query is cut off."""


def _cmd_sql(args: argparse.Namespace) -> int:
    from prl.store.readonly import render, run_query

    check_store(args.db, write=False)
    cols, rows = run_query(args.db, args.query, timeout_s=args.timeout_s)  # QueryRefused: main's one error line
    print(render(cols, rows, args.format))
    return 0


def register(sub) -> None:
    """Add ``sql`` to the ``prl`` command's subparsers."""
    p = sub.add_parser(
        "sql",
        help="run one read-only SQL query on a store",
        description="Run one SELECT (or WITH/DESCRIBE/SHOW) statement on a DuckDB store opened read-only, with "
        "external access (files, network, extensions) off and the configuration locked. Writes, ATTACH, COPY, "
        "INSTALL/LOAD and SET are refused; queries longer than --timeout-s are cut off. Example: prl sql --db "
        "runs/demo/store.duckdb \"select run_id, dataset, average_at_n from dataset_metrics\"",
    )
    add_config_arguments(p, SqlOptions)
    add_config_arguments(p, Verbosity)
    p.set_defaults(func=_cmd_sql)
