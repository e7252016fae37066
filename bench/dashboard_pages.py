"""What the dashboard and ``prl report`` run, taken from their code (bench/dashboard.py, bench/store.py, bench/load.py).

* :func:`pages`: every page of the dashboard's navigation, read from ``dashboard/app.py`` (its
  ``st.Page(PAGES / "<file>", title=…)`` calls), checked against the files in ``dashboard/pages/``.
* :func:`recording`: while it is open, every named query the store runs (``Store.rows/records/df``), every
  SQL text the SQL box runs (``prl.store.readonly.run_query``) and every ``dashboard.data`` call the pages
  make is recorded with its arguments.
* :func:`trace_pages` renders each page once (Streamlit's AppTest, data cache cleared) under a recording;
  :func:`trace_report` runs ``prl report`` (a paired comparison, an agreement, a study) the same way.
* :func:`referenced_queries`: the named read queries the dashboard's and the report's modules name in their
  source, so that one their default views do not run is still measured (and said to be).

This module imports the ``dashboard`` package: bench/ must come after the repository root on ``sys.path``
(bench/dashboard.py would shadow it).
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "dashboard" / "app.py"
PAGES_DIR = ROOT / "dashboard" / "pages"

REPORT_MODULES = ("prl/evaluation/report.py", "prl/evaluation/agreement.py", "prl/studies/report.py",
                  "prl_cli/report.py")
"""The modules ``prl report`` runs its queries from (with dashboard/, what :func:`referenced_queries` reads)."""


@dataclass(frozen=True)
class Page:
    title: str
    path: Path

    @property
    def name(self) -> str:
        return self.path.stem


def pages() -> list[Page]:
    """The dashboard's pages in navigation order, from ``dashboard/app.py``'s ``st.Page(PAGES / FILE, title=…)``.

    Fails when a navigation entry names a missing file or a file of ``dashboard/pages/`` is not in the
    navigation (a page the benchmarks would silently leave out)."""
    out = []
    for node in ast.walk(ast.parse(APP.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "Page" and node.args):
            continue
        arg = node.args[0]
        if not (isinstance(arg, ast.BinOp) and isinstance(arg.right, ast.Constant)):
            raise ValueError(f"{APP}: st.Page({ast.unparse(arg)}) is not PAGES / \"<file>\"; update bench/dashboard_pages.py")
        title = next((k.value.value for k in node.keywords if k.arg == "title" and isinstance(k.value, ast.Constant)),
                     None)
        out.append(Page(title or Path(arg.right.value).stem, PAGES_DIR / arg.right.value))
    missing = [p.path.name for p in out if not p.path.exists()]
    unlisted = sorted({p.name for p in PAGES_DIR.glob("*.py")} - {p.path.name for p in out})
    if not out or missing or unlisted:
        raise ValueError(f"{APP}: the navigation lists {len(out)} pages; files missing: {missing or 'none'}; "
                         f"page files not in it: {unlisted or 'none'}")
    return out


# ─── recording ─────────────────────────────────────────────────────────────────────────────

@dataclass
class Call:
    """One recorded call: ``kind`` "query" (a named query: ``name``, ``params``), "sql" (``name`` is the SQL
    text) or "data" (a ``dashboard.data`` function: ``name``, ``args``, ``params`` its keyword arguments);
    ``by``: the page or report command that made it."""

    kind: str
    name: str
    params: dict[str, Any]
    by: str
    args: tuple = ()


class Recorder:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.by = "?"

    def queries(self) -> list[Call]:
        return [c for c in self.calls if c.kind in ("query", "sql")]

    def data_calls(self) -> list[Call]:
        return [c for c in self.calls if c.kind == "data"]


@contextlib.contextmanager
def recording() -> Iterator[Recorder]:
    """Record every named query, SQL-box query and ``dashboard.data`` call made while open (see the module doc)."""
    from dashboard import data
    from prl.store import readonly
    from prl.store.db import Store

    rec = Recorder()
    saved: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, attr: str, make) -> None:
        original = getattr(owner, attr)
        saved.append((owner, attr, original))
        setattr(owner, attr, make(original))

    def store_method(original):
        def wrapper(self, name, **params):
            rec.calls.append(Call("query", name, dict(params), rec.by))
            return original(self, name, **params)
        return wrapper

    for method in ("rows", "records", "df"):
        patch(Store, method, store_method)

    def run_query(original):
        def wrapper(db, sql, *a, **kw):
            rec.calls.append(Call("sql", sql, dict(kw), rec.by, (db, *a)))
            return original(db, sql, *a, **kw)
        return wrapper

    patch(readonly, "run_query", run_query)

    def data_fn(name):
        def make(original):
            def wrapper(*args, **kwargs):
                rec.calls.append(Call("data", name, dict(kwargs), rec.by, args))
                return original(*args, **kwargs)
            wrapper.__name__ = name
            return wrapper
        return make

    for name in [n for n, v in vars(data).items() if callable(v) and getattr(v, "__module__", "") == data.__name__
                 and not n.startswith("_") and n not in ("db_path", "open_store", "store_version")]:
        patch(data, name, data_fn(name))
    try:
        yield rec
    finally:
        for owner, attr, original in reversed(saved):
            setattr(owner, attr, original)


def render_page(page: Page, timeout_s: float = 600.0) -> float:
    """Seconds to render ``page`` cold (Streamlit's data cache cleared first) with AppTest; a page that raises fails."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    st.cache_data.clear()
    t0 = time.perf_counter()
    at = AppTest.from_file(str(page.path), default_timeout=timeout_s).run()
    elapsed = time.perf_counter() - t0
    if at.exception:
        raise RuntimeError(f"{page.path.name}: {at.exception[0].value}")
    return elapsed


def trace_pages(db: str | Path) -> Recorder:
    """Render every page once on the store ``db`` (``PRL_DB``) under a recording; each call is tagged with its page."""
    import os

    from dashboard.data import DB_ENV

    os.environ[DB_ENV] = str(db)
    with recording() as rec:
        for page in pages():
            rec.by = f"page {page.title}"
            render_page(page)
    return rec


def trace_report(db: str | Path, runs: tuple[str, str], agreement: str, study: str, out: Path) -> Recorder:
    """Run ``prl report`` in this process under a recording: ``--runs A,B --k 1,8`` (two runs' scores and their
    paired comparison), ``--agreement RUN`` (an imported run against its source's labels), ``--agreement B
    --against A`` (two runs' verdicts, as a rescore against its original) and ``--study ID`` (the study report,
    written under ``out``). Each call is tagged with its command."""
    from prl_cli.main import main

    a, b = runs
    commands = {f"prl report --run {a},{b} --k 1,8": ["--run", f"{a},{b}", "--k", "1,8"],
                f"prl report --agreement {agreement}": ["--agreement", agreement],
                f"prl report --agreement {b} --against {a}": ["--agreement", b, "--against", a],
                f"prl report --study {study}": ["--study", study, "--out", str(out)]}
    with recording() as rec:
        for label, args in commands.items():
            rec.by = label
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                rc = main(["report", "--db", str(db), *args])
            if rc:
                raise RuntimeError(f"{label} exited {rc}")
    return rec


_NAMED = re.compile(r"""\.(?:rows|records|df)\(\s*["']([A-Za-z_][A-Za-z0-9_]*)["']""")


def referenced_queries() -> dict[str, list[str]]:
    """{named read query: ["file:line", …]} for every ``.rows/.records/.df("name", …)`` in dashboard/ and the
    report's modules (:data:`REPORT_MODULES`)."""
    files = sorted((ROOT / "dashboard").rglob("*.py")) + [ROOT / m for m in REPORT_MODULES]
    out: dict[str, list[str]] = {}
    for f in files:
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            for name in _NAMED.findall(line):
                out.setdefault(name, []).append(f"{f.relative_to(ROOT)}:{i}")
    return out
