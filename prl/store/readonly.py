"""Read-only SQL over a store (``prl sql``): the same guard the dashboard's SQL box will use.

The connection is opened ``read_only``, external access (files, network, extensions) is
switched off and the configuration locked before any user text runs, so a query can neither
modify the store nor reach the file system or network. Long queries are interrupted.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import signal
import threading
from pathlib import Path
from typing import Iterator

from prl_core.errors import UserError

_FORBIDDEN = re.compile(r"^\s*(ATTACH|DETACH|COPY|INSTALL|LOAD|EXPORT|IMPORT|SET|RESET|PRAGMA|CALL|CHECKPOINT)\b",
                        re.IGNORECASE)
# Comments, whitespace and opening parentheses before the first keyword (so "/* */ ATTACH …" is seen).
_LEADING = re.compile(r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/|\()*", re.DOTALL)


class QueryRefused(UserError, ValueError):
    """The statement is not a read-only query, or it failed; the message says which."""


def connect_read_only(db: str | Path, lock_timeout_s: float = 30.0):
    """A read-only connection with external access off (waits while a flow's write transaction holds the file)."""
    from prl.store.db import StoreError, connect

    try:
        con = connect(db, read_only=True, lock_timeout_s=lock_timeout_s)
    except StoreError as e:
        raise QueryRefused(str(e)) from None
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def run_query(db: str | Path, sql: str, *, timeout_s: float = 10.0, max_rows: int = 10_000):
    """(columns, rows) of one read-only statement; QueryRefused on anything else."""
    statements = [s for s in sql.split(";") if s.strip()]
    if len(statements) != 1:
        raise QueryRefused("sql: give exactly one statement")
    head = statements[0][_LEADING.match(statements[0]).end():]
    if _FORBIDDEN.match(head):
        raise QueryRefused(f"sql: {head.split()[0].upper()} is not allowed here (read-only queries only)")
    con = connect_read_only(db)
    timer = threading.Timer(timeout_s, con.interrupt)
    timer.start()
    try:
        with interrupted_by_ctrl_c(con):
            cur = con.execute(statements[0])
            if cur.description is None:
                raise QueryRefused("sql: the statement returns no rows (read-only queries only)")
            cols = [d[0] for d in cur.description]
            rows = cur.fetchmany(max_rows)
    except QueryRefused:
        raise
    except Exception as e:  # duckdb errors: read-only violations, disabled access, interrupts
        msg = str(e).splitlines()[0]
        if "INTERRUPT" in msg.upper():
            msg = f"the query ran longer than {timeout_s:g} s and was cut off"
        raise QueryRefused(f"sql: {msg}") from None
    finally:
        timer.cancel()
        con.close()
    return cols, rows


@contextlib.contextmanager
def interrupted_by_ctrl_c(con) -> Iterator[None]:
    """While the block runs, a Ctrl-C (SIGINT) interrupts ``con``'s query first, then does what it did before.

    DuckDB turns the KeyboardInterrupt raised in its signal check into ``RuntimeError: Query interrupted`` after
    cancelling the query's tasks, and waits for the running ones to end; a task of a long scan ends early only
    once the connection's interrupt flag is set (``con.interrupt()``, what the timeout uses). Without it, measured:
    `prl sql` with ``select count(*) from range(1e12)`` stayed in the query after a Ctrl-C, 4 of 6 times, until
    killed. Only in the main thread (where Python runs signal handlers), and only where a Python handler is set."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if not callable(previous):  # SIG_IGN or SIG_DFL: leave them be
        yield
        return

    def handler(signum, frame):
        con.interrupt()
        previous(signum, frame)

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def render(cols, rows, fmt: str = "table") -> str:
    if fmt == "json":
        return json.dumps([dict(zip(cols, r)) for r in rows], default=str, indent=2)
    if fmt == "csv":  # one line per row, no line after the last: print() ends it (as the table and JSON)
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(cols)
        w.writerows(rows)
        return buf.getvalue().removesuffix("\n")
    cells = [[str(c) for c in cols]] + [["" if v is None else str(v) for v in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines) + f"\n({len(rows)} row{'s' if len(rows) != 1 else ''})"
