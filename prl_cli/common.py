"""What every ``prl`` command shares: the output switches, the checks of ``--db``, and running a Prefect flow."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from prl.options import include_fields, option
from prl.store.db import STORE_FILE, StoreError


@dataclass
class Verbosity:
    """``--verbose``, which every command takes, before or after its name (docs/architecture.md §The command
    line: the same words in every command)."""

    verbose: bool = option(False, short="-v")
    """Show library warnings and engine messages (vLLM, torch, transformers, DeepSpeed, Prefect) on the console too; by default they go to the run's log file."""


@dataclass
@include_fields(Verbosity)
class OutputOptions:
    """The output switches of every command that shows progress bars or status lines: ``--quiet`` and
    ``--verbose``."""

    quiet: bool = option(False, short="-q", was=("--no-progress",))
    """No progress bars or status lines: the console shows the result, warnings and errors only (the run's log file keeps the rest)."""


def show_progress(args) -> bool:
    """Progress bars: unless ``--quiet``, and only on a terminal (in a log file or a pipe a bar's redraws are
    lines of ``\\r`` noise)."""
    return not getattr(args, "quiet", False) and sys.stderr.isatty()


def status_printer(args) -> Callable[[str], None]:
    """Where a command's status lines go: stderr, or nowhere with ``--quiet``."""
    if getattr(args, "quiet", False):
        return lambda message: None
    return lambda message: print(message, file=sys.stderr, flush=True)


FORMATS = ("table", "csv", "json")
"""``--format`` of every command that prints tables (``prl sql``, ``prl report``): rendered by
``prl.store.readonly.render`` where the output is one table."""


def print_json(result: Any) -> None:
    print(json.dumps(result, indent=2, default=str))


# ─── --db ─────────────────────────────────────────────────────────────────────────────────────────

DATA_SUFFIXES = (".parquet", ".jsonl", ".json", ".csv", ".tsv", ".eval", ".yaml", ".yml", ".txt", ".md")
"""Suffixes of the files a user may hand ``--db`` by mistake (the data a command reads, not the store it writes)."""

_DUCKDB_MAGIC = b"DUCK"  # bytes 8-12 of every DuckDB database file


def check_store(db: str | Path, *, write: bool) -> str:
    """``--db`` names a DuckDB store (one line each, before anything starts): not a data file's name (DuckDB would
    open a ``.parquet`` as an in-memory database, or write a store under that name), not an existing file of
    another kind, and, for a command that writes (``write``), in a folder that exists or can be created."""
    path = Path(db)
    if path.suffix.lower() in DATA_SUFFIXES:
        raise StoreError(f"--db {db}: a store is a DuckDB file (e.g. runs/store.duckdb), not a {path.suffix} file; "
                         "data files are read by --dataset (prl eval) or prl import")
    if path.is_dir():
        raise StoreError(f"--db {db}: a folder; name the store file in it, e.g. {path / STORE_FILE}")
    if path.exists():
        try:
            with path.open("rb") as f:
                head = f.read(12)
        except OSError as e:
            raise StoreError(f"--db {db}: cannot be read ({e.strerror})") from None
        if head[8:12] != _DUCKDB_MAGIC:
            raise StoreError(f"--db {db}: not a DuckDB store (the file exists and is something else); "
                             "name a new file or an existing store")
        return str(db)
    if write:
        folder = path.resolve().parent
        existing = next(p for p in (folder, *folder.parents) if p.exists())
        if not existing.is_dir():
            raise StoreError(f"--db {db}: its folder {folder} cannot be created ({existing} is a file)")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise StoreError(f"--db {db}: its folder {folder} cannot be created ({existing} is not writable)")
    return str(db)


# ─── flows ────────────────────────────────────────────────────────────────────────────────────────

def start_prefect_api() -> None:
    """Start Prefect's temporary API server (when no ``PREFECT_API_URL`` names a server) shielded from the
    terminal's Ctrl-C (:func:`prl.signals.sigint_blocked`): Prefect starts it on first use otherwise, in the
    command's process group, and a Ctrl-C killed it under the running flow, which then retried its reports
    for minutes. Prefect reuses this one server (one per process) and stops it at exit."""
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE

    from prl.signals import sigint_blocked

    if PREFECT_API_URL.value() or not PREFECT_SERVER_ALLOW_EPHEMERAL_MODE.value():
        return
    with sigint_blocked():
        SubprocessASGIServer().start()


def run_flow(log_file: str | Path, run: Callable[[], Any], *, args=None, show: Callable[[Any], None] = print_json,
             next_hint: Callable[[Any], str] | None = None) -> int:
    """Run a flow (``run``) as every command that runs one does: library messages to the run's log file
    (``prl.log_routing.log_to``), Prefect's API server shielded from Ctrl-C (:func:`start_prefect_api`), library
    chatter printed to stdout moved to stderr while it runs (stdout carries the result), the result shown on
    stdout (JSON by default), then the command to run next on stderr (not with ``--quiet``, ``args``'s).
    The environment Prefect needs is set once for every command by ``prl_cli.main.main``."""
    from prl import log_routing

    quiet = bool(getattr(args, "quiet", False))
    log_routing.log_to(Path(log_file), announce=not quiet)
    with contextlib.redirect_stdout(sys.stderr):
        start_prefect_api()
        result = run()
    show(result)
    if next_hint is not None and not quiet:
        print(f"next: {next_hint(result)}", file=sys.stderr)
    return 0
