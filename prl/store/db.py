"""The DuckDB store (docs/architecture.md §The store). Schema and named queries live in ``sql/``; this module loads
them by name and binds parameters — Python never builds SQL text.

Concurrency. DuckDB lets one process at a time hold a store file open for writing, and a
read-only process cannot open it while a writer holds it (nor a writer while readers do). So
**no process keeps the file open**: every write is one short transaction on a connection
opened for it (an evaluation writes one chunk of samples at a time, tens of milliseconds), and
every read opens a read-only connection for one query and closes it. When the file is busy, the
open is retried with jittered back-off for up to ``lock_timeout_s``; only a process that holds
the file longer than that (another tool keeping it open) makes it fail, with
:class:`StoreLocked` naming the holder. Dashboards and ``prl sql`` therefore see fresh data on
every query while flows write.

Whoever waits goes next. Readers may share the file, so a steady stream of them (eight
dashboard clients) would leave a writer almost no moment when the file is free; and a writer
writing chunk after chunk leaves a reader the same. So a process that finds the file busy takes
an exclusive ``flock`` on ``<store>.write-intent`` (a turnstile next to the store) while it
waits, and everyone passes the turnstile (a shared ``flock``, released at once) before opening
the file. Processes already inside finish, newcomers of either kind queue behind the waiter,
and the waiter gets the next free moment. A waiting writer keeps the turnstile through its
transaction; a waiting reader lets go once it is in, so the readers behind it share the file
with it. The kernel drops the lock when a process dies, so a killed process never leaves it held.

Writes are idempotent: ``ON CONFLICT DO NOTHING`` on each relation's key, so re-running an
evaluation never duplicates a sample, and a chunk is either wholly stored or not at all.
``:memory:`` stores (tests) keep one connection instead.
"""

from __future__ import annotations

from prl_core.errors import UserError
import fcntl
import json
import os
import random
import re
from importlib import resources
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from prl.fault_points import fault_point

_NAME = re.compile(r"^--\s*name:\s*([A-Za-z_][A-Za-z0-9_]*)\s*$", re.MULTILINE)
_LOCK_HOLDER = re.compile(r"Conflicting lock is held in (.*?)(?: See also|$)")

# Column order of the samples relation, as the bulk insert binds it.
SAMPLE_COLUMNS = ("run_id", "dataset", "problem_id", "sample_idx", "response", "extracted_answer", "verdict",
                  "score", "n_tokens", "finish_reason", "verify_ms", "relevance", "answer_only", "verdict_detail",
                  "source_label", "source_answer", "source_gold", "source_ref", "best_fit")
OPTIONAL_SAMPLE_COLUMNS = ("verdict_detail", "source_label", "source_answer", "source_gold", "source_ref", "best_fit")
"""Columns a row may leave out (NULL): shard files written before they existed, runs made here (no source)."""


def sample_schema():
    """The Arrow schema of sample rows (bulk inserts and Parquet shards)."""
    import pyarrow as pa

    types = {"sample_idx": pa.int32(), "score": pa.float64(), "n_tokens": pa.int32(), "verify_ms": pa.float64(),
             "relevance": pa.float64(), "answer_only": pa.bool_(), "source_label": pa.float64()}
    return pa.schema([(c, types.get(c, pa.string())) for c in SAMPLE_COLUMNS])


def samples_table(rows: list[dict[str, Any]]):
    """Sample rows (dicts keyed by :data:`SAMPLE_COLUMNS`; ``relevance``/``answer_only`` optional) → Arrow table."""
    import pyarrow as pa

    schema = sample_schema()
    return pa.table({f.name: pa.array([r.get(f.name) for r in rows], f.type) for f in schema}, schema=schema)


ROW_COLUMNS = {
    "train_metrics": {"run_id": "string", "step": "int32", "name": "string", "value": "float64"},
    "prl_segments": {"run_id": "string", "step": "int32", "rollout_idx": "int32", "segment_idx": "int32",
                     "start_tok": "int32", "end_tok": "int32", "kl_to_go": "float64", "rho": "float64"},
    "train_rollouts": {"run_id": "string", "step": "int32", "rollout_idx": "int32", "problem": "string",
                       "gold": "string", "response": "string", "reward": "float64", "tokens": "string"},
    "train_alerts": {"run_id": "string", "step": "int32", "monitor": "string", "metric": "string", "value": "float64",
                     "threshold": "float64", "message": "string", "action": "string"},
}
"""The training tables :meth:`Store.insert_rows` writes in bulk: each column's Arrow type (JSON columns as text)."""


class StoreError(UserError, RuntimeError):
    """The store cannot be used as asked; the message says why and what to do."""


class StoreLocked(StoreError):
    """Another process held the store file for longer than the lock timeout."""


def sql_dir() -> Path:
    """The folder of the store's SQL files: ``sql/`` of a checkout, or the installed package data ``prl.sql``
    (pyproject.toml maps ``sql/`` to it)."""
    here = Path(__file__).resolve().parents[2] / "sql"
    if (here / "schema.sql").is_file():
        return here
    installed = Path(str(resources.files("prl.sql")))
    if not (installed / "schema.sql").is_file():
        raise FileNotFoundError(f"{here}: the store's SQL files are missing; reinstall the package")
    return installed


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


def _is_lock_error(e: Exception) -> bool:
    return "lock" in str(e).lower() and ("conflicting" in str(e).lower() or "could not set" in str(e).lower())


STORE_FILE = "store.duckdb"
"""The store's file name inside a run directory."""
DEFAULT_STORE = f"runs/{STORE_FILE}"
"""The store file every command uses unless told otherwise (``--db``)."""


def store_path(out_dir: str | Path, db: str | None = None) -> str:
    """The store of a job that owns an output directory (the demo, a study): ``db`` when given, else
    ``OUT_DIR/store.duckdb``."""
    return db or str(Path(out_dir) / STORE_FILE)


def _locked_out(path: str, lock_timeout_s: float, holder: str = "") -> StoreLocked:
    return StoreLocked(
        f"{path}: the store was held by another process for more than {lock_timeout_s:g} s"
        f"{' (' + holder + ')' if holder else ''}; close the program holding it "
        "open (flows and the dashboard only open it per transaction)")


def _intent_path(path: str) -> str:
    return path + ".write-intent"


def _flock(fd: int, op: int, deadline: float, path: str, lock_timeout_s: float) -> None:
    """``flock(fd, op)``, polling with back-off until ``deadline`` (then :class:`StoreLocked`)."""
    delay = 0.002
    while True:
        try:
            fcntl.flock(fd, op | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise _locked_out(path, lock_timeout_s, "another process waited at its turnstile") from None
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.05)


@contextmanager
def write_intent(path: str | Path, lock_timeout_s: float = 30.0) -> Iterator[None]:
    """Hold the store's turnstile exclusively: newcomers wait until the block exits (see the module doc)."""
    path = str(path)
    fd = os.open(_intent_path(path), os.O_RDONLY | os.O_CREAT, 0o644)  # flock needs no write access
    try:
        _flock(fd, fcntl.LOCK_EX, time.monotonic() + lock_timeout_s, path, lock_timeout_s)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def _pass_turnstile(path: str, deadline: float, lock_timeout_s: float) -> None:
    """Wait while another process holds the turnstile (no turnstile file yet: nothing to wait for)."""
    try:
        fd = os.open(_intent_path(path), os.O_RDONLY)
    except OSError:
        return
    try:
        _flock(fd, fcntl.LOCK_SH, deadline, path, lock_timeout_s)
    finally:
        os.close(fd)


def connect(path: str | Path, *, read_only: bool, lock_timeout_s: float = 30.0, queue: ExitStack | None = None,
            turnstile: bool = True):
    """A DuckDB connection to ``path``, waiting in turn while another process holds the file.

    The open first passes the turnstile; if the file is busy, the caller takes the turnstile
    (:func:`write_intent`) and retries until the file is free or ``lock_timeout_s`` has passed
    (:class:`StoreLocked`). The turnstile is released once the connection is open, unless
    ``queue`` is given: then it stays held until that stack closes (``Store.write`` holds it
    through its transaction). ``lock_timeout_s=0`` tries once and never queues. ``turnstile=False``
    skips the turnstile (plain retries with back-off): only for the A/B measurement in bench/load.py."""
    import duckdb

    path = str(path)
    if path != ":memory:" and read_only and not Path(path).exists():
        raise StoreError(f"{path}: no such store (create one with `prl eval --db {path} …`)")
    fair = turnstile and path != ":memory:"
    deadline = time.monotonic() + lock_timeout_s
    delay = 0.005
    queued = False
    with ExitStack() as waiting:
        if fair:
            _pass_turnstile(path, deadline, lock_timeout_s)
        while True:
            try:
                con = duckdb.connect(path, read_only=read_only)
                if queue is not None:
                    queue.enter_context(waiting.pop_all())
                return con
            except duckdb.IOException as e:
                if not _is_lock_error(e):
                    raise StoreError(f"{path}: cannot open the store: {str(e).splitlines()[0]}") from None
                if time.monotonic() >= deadline:
                    holder = _LOCK_HOLDER.search(str(e))
                    raise _locked_out(path, lock_timeout_s, holder.group(1).strip() if holder else "") from None
                if fair and not queued:  # first time busy: queue at the turnstile
                    queued = True
                    try:
                        waiting.enter_context(write_intent(path, max(0.0, deadline - time.monotonic())))
                    except OSError:  # no turnstile can be made here (a read-only folder): just retry
                        pass
                    continue
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 0.25)


class Store:
    """A store file (or ``:memory:``) with the schema applied; connections are opened per transaction."""

    def __init__(self, path: str | Path = ":memory:", *, lock_timeout_s: float = 30.0, create: bool = True,
                 turnstile: bool = True):
        self.path = str(path)
        self.lock_timeout_s = lock_timeout_s
        self.turnstile = turnstile
        self.q = load_queries()
        self._mem = None
        if self.path == ":memory:":
            import duckdb

            self._mem = duckdb.connect(":memory:")
            self._mem.execute(_schema_sql())
            return
        if not create:
            if not Path(self.path).exists():
                raise StoreError(f"{self.path}: no such store (create one with `prl eval --db {self.path} …`)")
            return
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        with self.write() as con:
            con.execute(_schema_sql())

    # ---- connections ---------------------------------------------------------------------------

    @contextmanager
    def write(self) -> Iterator[Any]:
        """One write transaction: committed on exit, rolled back (nothing stored) on an exception.

        A writer that had to wait holds the turnstile until after the close, so readers arriving
        meanwhile wait for it instead of keeping the file busy."""
        if self._mem is not None:
            yield from self._transaction(self._mem)
            return
        with ExitStack() as queue:
            con = connect(self.path, read_only=False, lock_timeout_s=self.lock_timeout_s, queue=queue,
                          turnstile=self.turnstile)
            try:
                yield from self._transaction(con)
            finally:
                con.close()

    @staticmethod
    def _transaction(con) -> Iterator[Any]:
        con.execute("BEGIN TRANSACTION")
        try:
            yield con
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise

    @contextmanager
    def read(self) -> Iterator[Any]:
        """A read-only connection for a few queries (closed on exit so writers are not blocked)."""
        if self._mem is not None:
            yield self._mem
            return
        con = connect(self.path, read_only=True, lock_timeout_s=self.lock_timeout_s, turnstile=self.turnstile)
        try:
            yield con
        finally:
            con.close()

    # ---- named queries -----------------------------------------------------------------------

    def _sql(self, name: str) -> str:
        if name not in self.q:
            raise KeyError(f"query {name!r} is not in sql/queries.sql")
        return self.q[name]

    def rows(self, name: str, **params: Any) -> list[tuple]:
        """Rows of a named read query."""
        with self.read() as con:
            return con.execute(self._sql(name), _binds(params)).fetchall()

    def records(self, name: str, **params: Any) -> list[dict[str, Any]]:
        """Rows of a named read query as named records ({column: value})."""
        with self.read() as con:
            cur = con.execute(self._sql(name), _binds(params))
            cols = [d[0] for d in cur.description]
            return [dict(zip(cols, r)) for r in cur.fetchall()]

    def df(self, name: str, **params: Any):
        """A named read query as a pandas DataFrame."""
        with self.read() as con:
            return con.execute(self._sql(name), _binds(params)).df()

    def execute(self, name: str, **params: Any) -> None:
        """Run one named write statement in its own transaction."""
        with self.write() as con:
            con.execute(self._sql(name), _binds(params))

    def execute_many(self, name: str, param_rows: Iterable[dict[str, Any]]) -> None:
        """Run a named write statement once per parameter set, all in one transaction."""
        with self.write() as con:
            for params in param_rows:
                con.execute(self._sql(name), _binds(params))

    # ---- bulk writes -------------------------------------------------------------------------

    def insert_samples(self, rows: Iterable[dict[str, Any]]) -> int:
        """Insert sample rows in one transaction; rows already stored are skipped. Returns rows added.

        Rows are dicts keyed by :data:`SAMPLE_COLUMNS` (``relevance``/``answer_only`` may be
        missing). They go in as one Arrow table, so a million rows take seconds.
        """
        rows = list(rows)
        if not rows:
            return 0
        return self.insert_sample_table(samples_table(rows))

    def insert_sample_table(self, table) -> int:
        """Insert an Arrow table with :data:`SAMPLE_COLUMNS` (idempotent, one transaction)."""
        with self.write() as con:
            before = con.execute(self._sql("count_samples")).fetchall()[0][0]
            con.register("incoming_samples", table)
            try:
                con.execute(self._sql("insert_incoming_samples"))
            finally:
                try:
                    con.unregister("incoming_samples")
                except Exception:  # an aborted transaction refuses it; the original error is what matters
                    pass
            added = con.execute(self._sql("count_samples")).fetchall()[0][0] - before
            fault_point("store/insert_samples", lambda: table.column("run_id")[0].as_py() if len(table) else None)
            return added

    def insert_rows(self, table: str, rows: Iterable[dict[str, Any]], con=None) -> None:
        """Insert rows into one of :data:`ROW_COLUMNS`' tables as one Arrow table (rows already stored are skipped), in
        ``con``'s transaction when given, else in one of their own. A training step's ~150 metric, segment and
        rollout rows took 0.29 s as one INSERT each and ~0.1 s this way (bench/peers.py, the RL step)."""
        import pyarrow as pa

        rows = list(rows)
        if not rows:
            return
        columns = ROW_COLUMNS[table]
        schema = pa.schema([(c, getattr(pa, t)()) for c, t in columns.items()])
        arrow = pa.table({c: pa.array([_bind(r.get(c)) for r in rows], schema.field(c).type) for c in columns},
                         schema=schema)
        if con is None:
            with self.write() as con:
                self._insert_arrow(con, table, arrow)
        else:
            self._insert_arrow(con, table, arrow)

    def _insert_arrow(self, con, table: str, arrow) -> None:
        con.register("incoming_rows", arrow)
        try:
            con.execute(self._sql(f"insert_incoming_{table}"))
        finally:
            try:
                con.unregister("incoming_rows")
            except Exception:  # an aborted transaction refuses it; the original error is what matters
                pass

    def insert_problems(self, problems: Iterable[Any]) -> None:
        """Insert :class:`prl.data.datasets.Problem` rows (existing ones are kept as they are)."""
        self.execute_many("insert_problem", (
            {"dataset": p.dataset, "problem_id": p.problem_id, "problem": p.problem, "gold": p.gold_raw,
             "gold_normalized": p.gold_normalized, "meta": p.meta} for p in problems))

    def set_judgement(self, run_id: str, dataset: str, problem_id: str, sample_idx: int, judgement: str | None,
                      *, flagged_by: str | None = None, note: str | None = None) -> None:
        """Record a researcher's judgement of one suspicious pass (``judgement`` one of the ``judgements`` table's
        CHECK values, ``prl.grading.relevance.JUDGEMENTS``), or withdraw it (``judgement=None``). The dashboard's
        one write: a single short transaction through :meth:`write` (the store's lock and turnstile), which
        first brings an older store's schema up to date (idempotent) and checks the sample is listed by the
        ``suspicious_passes`` view; the samples are never touched. ``flagged_by``: the rules that listed it."""
        import duckdb

        key = {"run_id": run_id, "dataset": dataset, "problem_id": problem_id, "sample_idx": int(sample_idx)}
        where = f"{run_id} {problem_id} sample {sample_idx}"
        with self.write() as con:
            con.execute(_schema_sql())
            if not con.execute(self._sql("suspicious_pass_exists"), key).fetchall()[0][0]:
                raise StoreError(f"{self.path}: {where} is not a suspicious pass in this store; only listed samples "
                                 "are judged")
            if judgement is None:
                con.execute(self._sql("clear_judgement"), key)
                return
            try:
                con.execute(self._sql("set_judgement"), {**key, "judgement": judgement, "flagged_by": flagged_by,
                                                         "note": note})
            except duckdb.ConstraintException:
                raise StoreError(f"{self.path}: judgement of {where}: {judgement!r} is not one the judgements table "
                                 "takes (sql/schema.sql)") from None

    def close(self) -> None:
        if self._mem is not None:
            self._mem.close()
            self._mem = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _schema_sql() -> str:
    return (sql_dir() / "schema.sql").read_text(encoding="utf-8")


def _binds(params: dict[str, Any]) -> dict[str, Any]:
    return {k: _bind(v) for k, v in params.items()}


def _bind(value: Any) -> Any:
    return json.dumps(value, default=str) if isinstance(value, (dict, list)) else value
