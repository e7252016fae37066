"""Benchmark: every dashboard page on a store with ~1 M samples (issue 6: each renders in < 1 s).

The store is generated as in ``bench/store.py`` (82 evaluation runs × 1,517 problems × 8 samples,
plus the problems table and a training run with 500 steps of metrics). Each page is rendered by
Streamlit's AppTest with its data cache cleared first (a cold render: every query runs), median of
``--repeats``. Baseline in the same run: rendering a page that only writes a title.

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
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from common import machine_info, render_all, write_json  # noqa: E402
from store import N, PROBLEMS, sample_table  # noqa: E402

CODE = ("bench/dashboard.py", "bench/store.py", "dashboard", "prl/store", "sql/schema.sql", "sql/queries.sql",
        "prl/evaluation/report.py", "prl/evaluation/agreement.py", "prl/studies/report.py", "prl/studies/charts.py",
        "prl/data/paper.py", "prl/data/paper_tables.csv", "prl/grading/verifier.py", "prl/grading/relevance.py",
        "prl_core/metrics.py")
"""The code this benchmark measures: its results file records these paths (bench/common.py's write_json),
and ``python bench/render.py --check`` fails once one of them changes after the recorded commit."""

PAGES = ["runs", "scores", "compare", "problem", "failures", "training", "sql"]
TARGET_S = 1.0


def build_store(path: Path, rows: int) -> int:
    from prl.data.datasets import Problem
    from prl.store.db import Store

    runs = max(2, round(rows / (sum(PROBLEMS.values()) * N)))
    table = sample_table(runs)
    s = Store(path)
    s.insert_problems([Problem(d, f"{d}/{i}", f"Problem {i} of {d}", str(i), str(i), {})
                       for d, n in PROBLEMS.items() for i in range(n)])
    s.execute_many("upsert_run", ({"run_id": f"run-{r}", "kind": "eval", "model": "bench", "status": "finished",
                                   "config": {"n": N, "datasets": list(PROBLEMS)}, "manifest": {"sampling": {"n": N}},
                                   "parent_run_id": None, "train_step": None} for r in range(runs)))
    chunk = -(-table.num_rows // 12)
    for i in range(0, table.num_rows, chunk):
        s.insert_sample_table(table.slice(i, chunk))
    s.execute("upsert_run", run_id="train", kind="train", model="bench", status="finished",
              config={"algorithm": {"estimator": "prl", "eta": 20}}, manifest={}, parent_run_id=None, train_step=500)
    names = ["reward/mean", "kl/ref", "actor/entropy", "actor/clipfrac", "response/length", "prl/rho_mean",
             "prl/rho_std", "time/step", "reward/accuracy"]
    with s.write() as con:
        import pyarrow as pa

        t = pa.table({"run_id": ["train"] * (500 * len(names)),
                      "step": [st for st in range(1, 501) for _ in names],
                      "name": names * 500, "value": [0.5] * (500 * len(names))})
        con.register("m", t)
        con.execute("INSERT INTO train_metrics SELECT * FROM m")
    return table.num_rows


def main() -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "store.duckdb"
        t0 = time.perf_counter()
        rows = build_store(db, args.rows)
        print(f"store with {rows:,} samples built in {time.perf_counter() - t0:.1f} s")
        os.environ["PRL_DB"] = str(db)
        baseline_page = Path(tmp) / "baseline.py"
        baseline_page.write_text("import streamlit as st\nst.title('baseline')\n")

        def render(path: Path) -> float:
            st.cache_data.clear()
            s = time.perf_counter()
            at = AppTest.from_file(str(path), default_timeout=120).run()
            elapsed = time.perf_counter() - s
            if at.exception:
                raise RuntimeError(f"{path.name}: {at.exception[0].value}")
            return elapsed

        def median(path: Path) -> float:
            render(path)  # warm-up (imports)
            return statistics.median(render(path) for _ in range(args.repeats))

        base_s = median(baseline_page)
        results = {}
        for page in PAGES:
            s = median(HERE.parent / "dashboard" / "pages" / f"{page}.py")
            results[page] = {"median_s": s, "ratio_to_baseline": s / base_s, "meets_target": s < TARGET_S}
            print(f"  {page:<10} {s:6.3f} s  ({s / base_s:5.1f}x an empty page)  "
                  f"[target < 1 s: {'met' if s < TARGET_S else 'MISSED'}]")
    out = {"machine": machine_info(), "rows": rows, "repeats": args.repeats, "baseline_s": base_s, "pages": results}
    write_json("dashboard", out, code=CODE)
    print("re-rendered " + ", ".join(p.name for p in render_all()))
    return out


if __name__ == "__main__":
    main()
