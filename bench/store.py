"""Benchmark: the store at 1 M sample rows (docs/architecture.md §Targets: ingest < 10 s, every query < 300 ms).

A generated store shaped like real evaluations: 1,517 benchmark problems × 8 samples per run,
82 runs (~995 k rows, each run also in ``runs``), with realistic response lengths, verdict mix
and relevance scores; the paired query compares two of those runs. Measured in one run:

  ingest     Store.insert_sample_table (primary-key checked, idempotent) of all rows, in 12 chunks
             as an evaluation writes them; baseline: writing the same Arrow table to Parquet
  queries    each named query the reports and dashboard use, through Store.rows (which opens
             and closes a read-only connection per call, as they do); baseline: the same
             connection's `SELECT count(*) FROM samples`

    python bench/store.py [--rows N]

Writes bench/results/<name>.json and re-renders the figures (bench/render.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_info, render_all, write_json  # noqa: E402

from prl.store.db import SAMPLE_COLUMNS, Store, sample_schema  # noqa: E402

CODE = ("bench/store.py", "bench/dashboard.py", "prl/store", "sql/schema.sql", "sql/queries.sql", "dashboard",
        "prl/evaluation/report.py", "prl/evaluation/agreement.py", "prl/studies/report.py", "prl_cli/report.py")
"""The code this benchmark measures: its results file records these paths (bench/common.py's write_json),
and ``python bench/render.py --check`` fails once one of them changes after the recorded commit."""

PROBLEMS = {"math500": 500, "minerva_math": 272, "olympiad_bench": 675, "aime24": 30, "amc23": 40}
N = 8
TARGET_INGEST_S, TARGET_QUERY_MS = 10.0, 300.0


def sample_table(runs: int, seed: int = 0, first_run: int = 0):
    """An Arrow table of ``runs`` × 1,517 problems × 8 samples (run ids from ``run-<first_run>``)."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    ds = np.concatenate([np.full(n, d, dtype=object) for d, n in PROBLEMS.items()])
    pid = np.concatenate([np.array([f"{d}/{i}" for i in range(n)], dtype=object) for d, n in PROBLEMS.items()])
    per_run = len(ds) * N
    rows = runs * per_run
    run_idx = np.repeat(np.arange(runs), per_run)
    prob_idx = np.tile(np.repeat(np.arange(len(ds)), N), runs)
    difficulty = rng.random(len(ds))
    skill = rng.random(runs) * 0.6 + 0.2
    p_correct = np.clip(skill[run_idx] - difficulty[prob_idx] + 0.4, 0.02, 0.98)
    correct = rng.random(rows) < p_correct
    verdict = np.where(correct, "correct", rng.choice(["wrong", "wrong", "wrong", "no_answer", "timeout"], rows))
    answers = rng.integers(0, 40, rows).astype(str)
    lengths = rng.integers(200, 3072, rows)
    bodies = ["Let's think step by step. " * k for k in (4, 12, 30, 60)]
    response = np.array(bodies, dtype=object)[rng.integers(0, 4, rows)] + "\\boxed{" + answers.astype(object) + "}"
    table = pa.table({
        "run_id": pa.array(np.char.add("run-", (run_idx + first_run).astype(str)).astype(object)),
        "dataset": pa.array(ds[prob_idx]), "problem_id": pa.array(pid[prob_idx]),
        "sample_idx": pa.array(np.tile(np.arange(N, dtype=np.int32), rows // N)),
        "response": pa.array(response), "extracted_answer": pa.array(answers.astype(object)),
        "verdict": pa.array(verdict.astype(object)), "score": pa.array(correct.astype(np.float64)),
        "n_tokens": pa.array(lengths.astype(np.int32)), "finish_reason": pa.array(np.where(lengths >= 3071, "length", "stop").astype(object)),
        "verify_ms": pa.array(rng.random(rows) * 10), "relevance": pa.array(rng.random(rows)),
        "answer_only": pa.array(rng.random(rows) < 0.01),
    })
    schema = sample_schema()
    for f in schema:  # columns a benchmark evaluation leaves empty (imports, rescores, the fit index)
        if f.name not in table.column_names:
            table = table.append_column(f, pa.nulls(table.num_rows, f.type))
    return table.select(list(SAMPLE_COLUMNS)).cast(schema)


def main() -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000, help="approximate sample rows (default 1,000,000)")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--name", default="store", help="results name (store_10m for the 10 M run of run_all --full)")
    args = ap.parse_args()
    import pyarrow.parquet as pq

    runs = max(2, round(args.rows / (sum(PROBLEMS.values()) * N)))
    per_batch = 82  # ~1 M rows generated at a time (a 10 M table would not fit in memory as Python strings)
    chunk_rows = 83_000  # rows per insert transaction (~12 per million, as an evaluation's chunks)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "store.duckdb"
        store = Store(db)
        store.execute_many("upsert_run", ({"run_id": f"run-{r}", "kind": "eval", "model": "bench", "status": "finished",
                                           "config": {"n": N}, "manifest": {"seed": r}, "parent_run_id": None,
                                           "train_step": None} for r in range(runs)))
        ingest_s = parquet_s = gen_s = 0.0
        added = n_rows = chunks = 0
        writer = None
        first_chunk = None
        for b, first in enumerate(range(0, runs, per_batch)):
            t0 = time.perf_counter()
            table = sample_table(min(per_batch, runs - first), seed=b, first_run=first)
            gen_s += time.perf_counter() - t0
            n_rows += table.num_rows
            for i in range(0, table.num_rows, chunk_rows):
                part = table.slice(i, chunk_rows)
                first_chunk = part if first_chunk is None else first_chunk
                t0 = time.perf_counter()
                added += store.insert_sample_table(part)
                ingest_s += time.perf_counter() - t0
                chunks += 1
            t0 = time.perf_counter()
            if writer is None:
                writer = pq.ParquetWriter(Path(tmp) / "baseline.parquet", table.schema)
            writer.write_table(table)
            parquet_s += time.perf_counter() - t0
            print(f"  {n_rows:,} rows stored ({ingest_s:.1f} s ingest so far)", flush=True)
        t0 = time.perf_counter()
        writer.close()
        parquet_s += time.perf_counter() - t0
        print(f"generated {n_rows:,} rows ({runs} runs) in {gen_s:.1f} s (not timed)")
        t0 = time.perf_counter()
        again = store.insert_sample_table(first_chunk)
        reingest_s = time.perf_counter() - t0
        size_mb = db.stat().st_size / 2**20
        print(f"ingest {added:,} rows in {ingest_s:.2f} s ({ingest_s / parquet_s:.1f}x a Parquet write of {parquet_s:.2f} s); "
              f"re-ingest of a stored chunk adds {again} rows in {reingest_s:.2f} s; store {size_mb:.0f} MiB")

        with store.read() as con:
            def baseline():
                return con.execute("SELECT count(*) FROM samples").fetchall()
            for _ in range(3):
                baseline()
            base = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                baseline()
                base.append((time.perf_counter() - t) * 1e3)
        base_ms = statistics.median(base)
        queries = {
            "dataset_metrics_for_run": dict(run_id="run-3"),
            "outcomes_for_runs (paired)": dict(run_ids=["run-3", "run-7"]),
            "answers_for_run": dict(run_id="run-3"),
            "verdict_counts_for_runs": dict(run_ids=["run-3"]),
            "suspicious_passes_for_run": dict(run_id="run-3", limit=50),
            "list_runs": {},
            "stored_counts_for_run": dict(run_id="run-3"),
        }
        results_q = {}
        for label, params in queries.items():
            name = label.split(" ")[0]
            store.rows(name, **params)
            times = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                out = store.rows(name, **params)
                times.append((time.perf_counter() - t) * 1e3)
            med, p95 = statistics.median(times), sorted(times)[int(0.95 * (len(times) - 1))]
            results_q[label] = {"median_ms": med, "p95_ms": p95, "rows": len(out), "ratio_to_count": med / base_ms,
                                "meets_target": p95 < TARGET_QUERY_MS}
            print(f"  {label:<30} {med:7.1f} ms (p95 {p95:6.1f}) = {med / base_ms:6.1f}x count(*)  [{len(out)} rows]")
        t = time.perf_counter()
        with store.read():
            pass
        connect_ms = (time.perf_counter() - t) * 1e3

    target_s = TARGET_INGEST_S * max(1.0, n_rows / 1e6)  # 10 s per million rows
    results = {
        "machine": machine_info(), "rows": n_rows, "runs": runs, "repeats": args.repeats, "ingest_s": ingest_s,
        "ingest_chunks": chunks, "target_ingest_s": target_s, "parquet_write_s": parquet_s, "ingest_ratio_to_parquet": ingest_s / parquet_s,
        "reingest_chunk_s": reingest_s, "reingest_added": again, "store_mib": size_mb,
        "meets_ingest_target": ingest_s < target_s, "count_baseline_ms": base_ms,
        "connect_ms": connect_ms, "queries": results_q,
    }
    write_json(args.name, results, code=CODE)
    print("re-rendered " + ", ".join(p.name for p in render_all()))
    return results


if __name__ == "__main__":
    main()
