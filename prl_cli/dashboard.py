"""``prl dashboard``."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

from prl.options import add_config_arguments
from prl.store.db import DEFAULT_STORE

from prl_cli.common import Verbosity, check_store


@dataclass
class DashboardOptions:
    """`prl dashboard`."""

    db: str = DEFAULT_STORE
    """Store file."""
    host: str = "127.0.0.1"
    """Address to bind (default 127.0.0.1: this machine only)."""
    port: int = 8501
    """Port."""


def _cmd_dashboard(args: argparse.Namespace) -> int:
    from pathlib import Path

    app = Path(__file__).resolve().parents[1] / "dashboard" / "app.py"
    check_store(args.db, write=False)
    if not Path(args.db).exists():
        print(f"note: {args.db} does not exist yet; the app will say so until a flow creates it", file=sys.stderr)
    if args.host not in ("127.0.0.1", "localhost"):
        print(f"warning: serving on {args.host}: anyone who can reach this address can read the store", file=sys.stderr)
    cmd = [sys.executable, "-m", "streamlit", "run", str(app), "--server.address", args.host, "--server.port",
           str(args.port), "--server.headless", "true", "--browser.gatherUsageStats", "false", "--", "--db", args.db]
    print(f"dashboard for {args.db}: http://{args.host}:{args.port}", file=sys.stderr)
    sys.stderr.flush()
    os.execv(sys.executable, cmd)  # become the server: signals (Ctrl-C, kill) reach it directly


def register(sub) -> None:
    """Add ``dashboard`` to the ``prl`` command's subparsers."""
    p = sub.add_parser(
        "dashboard",
        help="browse, compare and inspect the store in a web app (Streamlit, localhost)",
        description="Start the Streamlit dashboard over a store: Runs (with manifests and the paper's reference "
        "rows), Scores (average@n, pass@k with CIs, micro/macro, pass@k curves), Compare (paired deltas, problems "
        "gained/lost), Problem (every sample of a problem, text shown as text), Failures (verdict categories, "
        "suspicious passes), Training (metric curves, eval points, segments shaded by rho) and a read-only SQL box. "
        "It reads the store per query, so it shows fresh data while flows write. Bound to 127.0.0.1 unless --host "
        "says otherwise. example: prl dashboard --db runs/store.duckdb",
    )
    add_config_arguments(p, DashboardOptions)
    add_config_arguments(p, Verbosity)
    p.set_defaults(func=_cmd_dashboard)
