"""Benchmark: every dashboard page on a store with ~1 M samples (issue 6: each renders in < 1 s).

The pages are the dashboard's navigation (``dashboard/app.py``, read by bench/dashboard_pages.py:
every page there, none left out). The store is bench/store.py's (82 evaluation runs × 1,517
problems × 8 samples, five of them a training run's evaluations; that training run with 500 steps
of metrics, rollouts and segments; an imported run with its source's labels; a study of two cells
× three seeds). Each page is rendered by Streamlit's AppTest with its data cache cleared first (a
cold render: every query runs), median of ``--repeats`` after one warm-up; the named queries each
page ran are recorded with it. Baseline in the same run: rendering a page that only writes a title.

    python bench/dashboard.py [--rows N] [--repeats 5]

Writes bench/results/dashboard.json and re-renders the figures (bench/render.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The repository root first: this file must not shadow the `dashboard` package it measures.
sys.path[:] = [str(HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != HERE] + [str(HERE)]
from common import machine_info, render_all, write_json  # noqa: E402
from store import build_store  # noqa: E402,F401  (bench/load.py and tests/test_load.py build theirs here)

CODE = ("bench/dashboard.py", "bench/dashboard_pages.py", "bench/store.py", "dashboard", "prl/store", "sql/schema.sql",
        "sql/queries.sql", "prl/evaluation/report.py", "prl/evaluation/agreement.py", "prl/studies/report.py",
        "prl/studies/charts.py", "prl/data/paper.py", "prl/data/paper_tables.csv", "prl/grading/verifier.py",
        "prl/grading/relevance.py", "prl_core/metrics.py")
"""The code this benchmark measures: its results file records these paths (bench/common.py's write_json),
and ``python bench/render.py --check`` fails once one of them changes after the recorded commit."""

TARGET_S = 1.0


def main() -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    import dashboard_pages as dp

    pages = dp.pages()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "store.duckdb"
        t0 = time.perf_counter()
        rows = build_store(db, args.rows)
        print(f"store with {rows:,} samples built in {time.perf_counter() - t0:.1f} s; {len(pages)} pages "
              f"({', '.join(p.title for p in pages)})")
        os.environ["PRL_DB"] = str(db)
        baseline_page = dp.Page("baseline", Path(tmp) / "baseline.py")
        baseline_page.path.write_text("import streamlit as st\nst.title('baseline')\n")

        def median(page: dp.Page) -> float:
            dp.render_page(page)  # warm-up (imports)
            return statistics.median(dp.render_page(page) for _ in range(args.repeats))

        base_s = median(baseline_page)
        results = {}
        for page in pages:
            with dp.recording() as rec:
                dp.render_page(page)
            s = median(page)
            queries = list(dict.fromkeys(c.name if c.kind == "query" else "SQL box" for c in rec.queries()))
            results[page.title] = {"file": str(page.path.relative_to(HERE.parent)), "median_s": s,
                                   "ratio_to_baseline": s / base_s, "meets_target": s < TARGET_S, "queries": queries}
            print(f"  {page.title:<10} {s:6.3f} s  ({s / base_s:5.1f}x an empty page)  "
                  f"[target < 1 s: {'met' if s < TARGET_S else 'MISSED'}]  {', '.join(queries)}")
    out = {"machine": machine_info(), "rows": rows, "repeats": args.repeats, "baseline_s": base_s, "pages": results}
    write_json("dashboard", out, code=CODE)
    print("re-rendered " + ", ".join(p.name for p in render_all()))
    return out


if __name__ == "__main__":
    main()
