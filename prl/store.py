"""The DuckDB store (DESIGN §4): schema and named queries live in ``sql/``; this module only
loads them by name and binds parameters. Writes are idempotent (``ON CONFLICT DO NOTHING``
on each relation's key), so re-running an evaluation never duplicates a sample.

(Issue 4, in progress: the concurrent-reader design — short write transactions or Parquet
shards — and the read-only SQL entry point come with the evaluation flow.)
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable

_NAME = re.compile(r"^--\s*name:\s*([A-Za-z_][A-Za-z0-9_]*)\s*$", re.MULTILINE)


def sql_dir() -> Path:
    """``sql/`` of the source tree (the package is installed editable, as the README does)."""
    here = Path(__file__).resolve().parents[1] / "sql"
    if not here.is_dir():
        raise FileNotFoundError(f"{here}: the store's SQL files are missing; install the project editable "
                                "(scripts/install.sh) from a checkout")
    return here


def load_queries(path: str | Path | None = None) -> dict[str, str]:
    """``-- name: x`` blocks of a .sql file → {name: statement}. Duplicate names are an error."""
    text = Path(path or sql_dir() / "queries.sql").read_text(encoding="utf-8")
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        if name in queries:
            raise ValueError(f"{path or 'queries.sql'}: query {name!r} is defined twice")
        statement = "\n".join(l for l in body.strip().splitlines() if not l.lstrip().startswith("--")).strip()
        queries[name] = statement.rstrip(";")
    return queries


class Store:
    """A read-write connection to a store file (or ``:memory:``), schema applied."""

    def __init__(self, path: str | Path = ":memory:"):
        import duckdb

        self.path = str(path)
        self.con = duckdb.connect(self.path)
        self.con.execute((sql_dir() / "schema.sql").read_text(encoding="utf-8"))
        self.q = load_queries()

    def run(self, name: str, **params: Any):
        if name not in self.q:
            raise KeyError(f"query {name!r} is not in sql/queries.sql")
        return self.con.execute(self.q[name], {k: _bind(v) for k, v in params.items()})

    def rows(self, name: str, **params: Any) -> list[tuple]:
        return self.run(name, **params).fetchall()

    def insert_samples(self, rows: Iterable[dict[str, Any]]) -> int:
        """Insert sample rows in one transaction; rows already stored are skipped. Returns rows added."""
        rows = list(rows)
        before = self.con.execute("SELECT count(*) FROM samples").fetchone()[0]
        self.con.execute("BEGIN TRANSACTION")
        try:
            for r in rows:
                self.run("insert_sample", **r)
            self.con.execute("COMMIT")
        except Exception:
            self.con.execute("ROLLBACK")
            raise
        return self.con.execute("SELECT count(*) FROM samples").fetchone()[0] - before

    def close(self) -> None:
        self.con.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _bind(value: Any) -> Any:
    return json.dumps(value) if isinstance(value, (dict, list)) else value
