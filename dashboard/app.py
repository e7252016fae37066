"""The PRL dashboard: ``prl dashboard --db PATH`` (or ``streamlit run dashboard/app.py -- --db PATH``)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # streamlit runs this file as a script
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from dashboard.data import DB_ENV, db_path  # noqa: E402


def _db_from_argv() -> None:
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--db", default=None)
    args, _ = ap.parse_known_args(sys.argv[1:])
    if args.db:
        os.environ[DB_ENV] = args.db


_db_from_argv()
st.set_page_config(page_title="PRL results", layout="wide")
PAGES = Path(__file__).parent / "pages"
nav = st.navigation([
    st.Page(PAGES / "runs.py", title="Runs", icon=":material/list:", default=True),
    st.Page(PAGES / "scores.py", title="Scores", icon=":material/bar_chart:"),
    st.Page(PAGES / "compare.py", title="Compare", icon=":material/compare_arrows:"),
    st.Page(PAGES / "problem.py", title="Problem", icon=":material/search:"),
    st.Page(PAGES / "failures.py", title="Failures", icon=":material/warning:"),
    st.Page(PAGES / "agreement.py", title="Agreement", icon=":material/rule:"),
    st.Page(PAGES / "training.py", title="Training", icon=":material/show_chart:"),
    st.Page(PAGES / "study.py", title="Study", icon=":material/grid_view:"),
    st.Page(PAGES / "sql.py", title="SQL", icon=":material/storage:"),
])
st.sidebar.caption(f"store: {db_path()}")
nav.run()
