"""Benchmark: the store at 1 M sample rows (docs/architecture.md §Targets: ingest < 10 s, every query < 300 ms).

A generated store shaped like real use: 1,517 benchmark problems × 8 samples per evaluation run, 82
runs (~995 k rows, each run also in ``runs``; ``--rows 10000000``: 820), with realistic response
lengths, verdict mix and relevance scores; the first five runs are a training run's evaluations
during training. Beside them (:func:`add_context`, not in the ingest timing): that training run
(500 steps of metrics, four inspected rollouts with their tokens and segments per step, as the
trainer stores them), an imported run with its source's own labels (what the Agreement page and
``prl report --agreement`` read), and a study of two cells × three seeds, each a training run of 200
such steps evaluated by one of the evaluation runs. Measured in one run:

  ingest     Store.insert_sample_table (primary-key checked, idempotent) of the evaluation rows, in
             chunks of 83,000 as an evaluation writes them; baseline: writing the same Arrow table to
             Parquet
  queries    every query the dashboard and ``prl report`` run, taken from their code: each of the
             dashboard's pages is rendered once (Streamlit's AppTest) and ``prl report`` run three
             ways (--runs A,B, --agreement, --study) with the store's query methods recorded
             (bench/dashboard_pages.py); each named query they ran, with the arguments of its first
             call, and the SQL box's schema query, then timed through Store.rows (which opens and
             closes a read-only connection per call, as they do). A named query that their modules
             name but that no default view ran is timed too, with arguments of the same names from
             the recorded calls, and marked so. Baseline: the same connection's `SELECT count(*)
             FROM samples`

    python bench/store.py [--rows N] [--repeats 15] [--name store]

Writes bench/results/<name>.json and re-renders the figures (bench/render.py).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The repository root first: bench/dashboard.py must not shadow the `dashboard` package.
sys.path[:] = [str(HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != HERE] + [str(HERE)]
from common import machine_info, render_all, write_json  # noqa: E402

from prl.store.db import SAMPLE_COLUMNS, Store, sample_schema  # noqa: E402

CODE = ("bench/store.py", "bench/dashboard_pages.py", "prl/store", "sql/schema.sql", "sql/queries.sql", "dashboard",
        "prl/evaluation/report.py", "prl/evaluation/agreement.py", "prl/studies/report.py", "prl_cli/report.py")
"""The code this benchmark measures: its results file records these paths (bench/common.py's write_json),
and ``python bench/render.py --check`` fails once one of them changes after the recorded commit."""

PROBLEMS = {"math500": 500, "minerva_math": 272, "olympiad_bench": 675, "aime24": 30, "amc23": 40}
N = 8
TARGET_INGEST_S, TARGET_QUERY_MS = 10.0, 300.0

TRAIN_RUN = "train"
"""The training run (metrics, rollouts, segments); the first :data:`TRAIN_EVALS` evaluation runs are its evaluations."""
TRAIN_STEPS, TRAIN_EVALS, INSPECTED = 500, 5, 4
METRICS = ("reward/mean", "reward/accuracy", "actor/kl_ref", "actor/entropy", "actor/clipfrac", "response/length",
           "prl/rho_mean", "prl/rho_std", "time/step")
IMPORT_RUN = "import-0"
"""An imported run (another tool's generations of every problem × 8) with the source's own per-row labels."""
STUDY = "bench-study"
STUDY_CELLS, STUDY_SEEDS, STUDY_STEPS = ("grpo", "prl"), (0, 1, 2), 200


def sample_table(runs: int, seed: int = 0, first_run: int = 0, run_prefix: str = "run-", source_labels: bool = False):
    """An Arrow table of ``runs`` × 1,517 problems × 8 samples (run ids from ``<run_prefix><first_run>``);
    ``source_labels``: with an imported run's columns (the source's label, answer, gold and file row)."""
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
        "run_id": pa.array(np.char.add(run_prefix, (run_idx + first_run).astype(str)).astype(object)),
        "dataset": pa.array(ds[prob_idx]), "problem_id": pa.array(pid[prob_idx]),
        "sample_idx": pa.array(np.tile(np.arange(N, dtype=np.int32), rows // N)),
        "response": pa.array(response), "extracted_answer": pa.array(answers.astype(object)),
        "verdict": pa.array(verdict.astype(object)), "score": pa.array(correct.astype(np.float64)),
        "n_tokens": pa.array(lengths.astype(np.int32)), "finish_reason": pa.array(np.where(lengths >= 3071, "length", "stop").astype(object)),
        "verify_ms": pa.array(rng.random(rows) * 10), "relevance": pa.array(rng.random(rows)),
        "answer_only": pa.array(rng.random(rows) < 0.01),
    })
    if source_labels:  # the source's grader agrees with ours on ~90% of the rows
        agree = rng.random(rows) < 0.9
        table = table.append_column("source_label", pa.array(np.where(agree, correct, ~correct).astype(np.float64)))
        table = table.append_column("source_answer", pa.array(answers.astype(object)))
        table = table.append_column("source_gold", pa.array(pid[prob_idx]))
        table = table.append_column("source_ref", pa.array(np.char.add("generations.jsonl:", np.arange(1, rows + 1)
                                                                       .astype(str)).astype(object)))
    schema = sample_schema()
    for f in schema:  # columns a benchmark evaluation leaves empty (imports, rescores, the fit index)
        if f.name not in table.column_names:
            table = table.append_column(f, pa.nulls(table.num_rows, f.type))
    return table.select(list(SAMPLE_COLUMNS)).cast(schema)


def eval_runs(runs: int) -> list[dict]:
    """The ``runs`` rows of ``runs`` evaluation runs: the first :data:`TRAIN_EVALS` evaluate the training run."""
    out = []
    for r in range(runs):
        child = r < TRAIN_EVALS
        out.append({"run_id": f"run-{r}", "kind": "eval", "model": "bench", "status": "finished",
                    "config": {"n": N, "datasets": list(PROBLEMS)}, "manifest": {"seed": r, "sampling": {"n": N}},
                    "parent_run_id": TRAIN_RUN if child else None,
                    "train_step": (r + 1) * TRAIN_STEPS // TRAIN_EVALS if child else None})
    return out


def _training_rows(store: Store, run_id: str, steps: int, rng) -> None:
    """What the trainer stores for ``steps`` steps of ``run_id``: every metric of every step, and :data:`INSPECTED`
    rollouts a step with their token texts and the segments of each, in one transaction."""
    tokens = ["Step", " 1", ":", " 3", " +", " 4", " =", " 7", "\n\n"] * 12 + ["\\boxed{", "7", "}"]
    cuts = [i for i, t in enumerate(tokens) if t == "\n\n"] + [len(tokens) - 1]
    with store.write() as con:
        store.insert_rows("train_metrics", [{"run_id": run_id, "step": st, "name": name, "value": float(v)}
                                            for st in range(1, steps + 1)
                                            for name, v in zip(METRICS, rng.random(len(METRICS)))], con)
        store.insert_rows("train_rollouts", [{"run_id": run_id, "step": st, "rollout_idx": i,
                                              "problem": f"Problem {i} of step {st}", "gold": "7",
                                              "response": "".join(tokens), "reward": float(i % 2), "tokens": tokens}
                                             for st in range(1, steps + 1) for i in range(INSPECTED)], con)
        store.insert_rows("prl_segments", [{"run_id": run_id, "step": st, "rollout_idx": i, "segment_idx": j,
                                            "start_tok": 0 if j == 0 else cuts[j - 1] + 1, "end_tok": end,
                                            "kl_to_go": 0.1 * (len(cuts) - j), "rho": 0.5 - 0.05 * j}
                                           for st in range(1, steps + 1) for i in range(INSPECTED)
                                           for j, end in enumerate(cuts)], con)


def add_context(store: Store, runs: int, seed: int = 0) -> int:
    """What the pages other than the evaluations' read (see the module doc); returns the sample rows it added."""
    import numpy as np

    from prl.data.datasets import Problem

    rng = np.random.default_rng(seed)
    store.insert_problems([Problem(d, f"{d}/{i}", f"Problem {i} of {d}: compute {i} + {i}.", str(2 * i), str(2 * i), {})
                           for d, n in PROBLEMS.items() for i in range(n)])
    # a study: cells × seeds, each a training run evaluated by one of the evaluation runs
    cells = [{"name": c, "varied": ["algorithm.estimator"] + (["algorithm.eta"] if c == "prl" else [])}
             for c in STUDY_CELLS]
    store.execute("upsert_study", study_id=STUDY, status="finished", manifest={},
                  config={"study": {"id": STUDY, "seeds": list(STUDY_SEEDS), "baseline": STUDY_CELLS[0]}, "cells": cells})
    for k, (cell, sd) in enumerate((c, s) for c in STUDY_CELLS for s in STUDY_SEEDS):
        train, ev = f"{STUDY}.{cell}.s{sd}", f"run-{(TRAIN_EVALS + k) % runs}"
        store.execute("upsert_run", run_id=train, kind="train", model="bench", status="finished",
                      config={"algorithm": {"estimator": cell, "eta": 20.0 if cell == "prl" else None},
                              "train": {"seed": sd}}, manifest={}, parent_run_id=None, train_step=STUDY_STEPS)
        store.execute("upsert_study_cell", study_id=STUDY, cell=cell, seed=sd, train_run_id=train, eval_run_id=None,
                      varied=cells[STUDY_CELLS.index(cell)]["varied"], status="running")
        store.execute("finish_study_cell", study_id=STUDY, cell=cell, seed=sd, eval_run_id=ev)
        _training_rows(store, train, STUDY_STEPS, rng)
    # the training run the first evaluations belong to (the latest training run: the Training page's default)
    store.execute("upsert_run", run_id=TRAIN_RUN, kind="train", model="bench", status="finished",
                  config={"algorithm": {"estimator": "prl", "eta": 20, "step_split": "text:\n\n"}}, manifest={},
                  parent_run_id=None, train_step=TRAIN_STEPS)
    _training_rows(store, TRAIN_RUN, TRAIN_STEPS, rng)
    # an imported run with the source's own labels
    store.execute("upsert_run", run_id=IMPORT_RUN, kind="imported", model="another tool", status="finished",
                  config={"n": N, "datasets": list(PROBLEMS)}, manifest={"reported_accuracy": 0.5, "unmatched": []},
                  parent_run_id=None, train_step=None)
    return store.insert_sample_table(sample_table(1, seed=seed + 1000, run_prefix="import-", source_labels=True))


def build_store(path: Path, rows: int) -> int:
    """The benchmark store (see the module doc) at ``path`` with ~``rows`` evaluation samples, untimed; returns its
    sample rows. bench/dashboard.py and bench/load.py measure on it."""
    runs = max(TRAIN_EVALS + len(STUDY_CELLS) * len(STUDY_SEEDS), round(rows / (sum(PROBLEMS.values()) * N)))
    s = Store(path)
    s.execute_many("upsert_run", eval_runs(runs))
    n = 0
    for first in range(0, runs, 82):  # ~1 M rows generated at a time
        table = sample_table(min(82, runs - first), seed=first // 82, first_run=first)
        for i in range(0, table.num_rows, 83_000):
            n += s.insert_sample_table(table.slice(i, 83_000))
    return n + add_context(s, runs)


def _binds(sql: str) -> list[str]:
    return list(dict.fromkeys(re.findall(r"\$([A-Za-z_][A-Za-z0-9_]*)", sql)))


def _shown(params: dict) -> dict:
    """Parameters as the results file records them (a long list of run ids by its length and ends)."""
    return {k: (v if not isinstance(v, list) or len(v) <= 4 else f"{len(v)} values: {v[0]} … {v[-1]}")
            for k, v in params.items()}


def _one_listed_sample(store: Store) -> dict:
    """The key of the first sample the ``suspicious_passes`` view lists (what the Failures page's case view opens when
    a researcher picks a case), or else of the first stored sample."""
    keys = ("run_id", "dataset", "problem_id", "sample_idx")
    with store.read() as con:
        row = (con.execute(f"SELECT {', '.join(keys)} FROM suspicious_passes ORDER BY ALL LIMIT 1").fetchone()
               or con.execute(f"SELECT {', '.join(keys)} FROM samples ORDER BY ALL LIMIT 1").fetchone())
    return dict(zip(keys, row)) if row else {}


def dashboard_and_report_queries(db: Path, work: Path) -> tuple[dict, dict]:
    """({label: {"kind", "name", "params", "by", "referenced_at"}}, the page list) of every query the dashboard's pages
    and ``prl report`` run on the store ``db`` (bench/dashboard_pages.py), in the order first run."""
    import dashboard_pages as dp

    pages = dp.pages()
    recs = [dp.trace_pages(db)]
    store = Store(db, create=False)
    compare = [r["run_id"] for r in store.records("list_runs") if r["samples"] and r["kind"] == "eval"][-2:]
    recs.append(dp.trace_report(db, (compare[0], compare[1]), IMPORT_RUN, STUDY, work))
    from prl.store.db import load_queries, sql_dir

    examples = {" ".join(q.split()): name for name, q in load_queries(sql_dir() / "examples.sql").items()}
    out: dict[str, dict] = {}
    for rec in recs:
        for c in rec.queries():
            text = " ".join(c.name.split())
            label = c.name if c.kind == "query" else (f"SQL box: {examples[text]} (sql/examples.sql)" if text in examples
                                                      else f"SQL box: {text[:40]} …")
            entry = out.setdefault(label, {"kind": c.kind, "name": c.name, "params": c.params, "by": []})
            if c.by not in entry["by"]:
                entry["by"].append(c.by)
    referenced = dp.referenced_queries()
    known = {k: v for e in out.values() for k, v in e["params"].items()}  # argument values by name, as recorded
    for name, where in referenced.items():
        sql = store.q.get(name, "")
        if name in out or not sql.lstrip().upper().startswith(("SELECT", "WITH")):
            continue
        params = dict(known)
        if "sample_idx" in _binds(sql) and "sample_idx" not in known:
            params.update(_one_listed_sample(store))  # a query about one sample (the case view): a listed one
        if "names" in _binds(sql) and "names" not in known:  # a study's claims: the run metrics they may name
            from prl.studies.config import CLAIM_METRICS

            params["names"] = list(CLAIM_METRICS)
        missing = [b for b in _binds(sql) if b not in params]
        if missing:
            raise SystemExit(f"query {name!r} ({', '.join(where)}) takes {missing}, which no recorded call passed")
        out[name] = {"kind": "query", "name": name, "params": {b: params[b] for b in _binds(sql)},
                     "by": ["not run by a default view; named at " + ", ".join(where)]}
    for label, e in out.items():
        if e["kind"] == "query":
            e["referenced_at"] = referenced.get(e["name"], [])
    return out, {"pages": [p.title for p in pages]}


def main() -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000, help="approximate sample rows (default 1,000,000)")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--name", default="store", help="results name (store_10m for the 10 M run of run_all --full)")
    args = ap.parse_args()
    import pyarrow.parquet as pq

    from prl.store.readonly import run_query

    runs = max(TRAIN_EVALS + len(STUDY_CELLS) * len(STUDY_SEEDS), round(args.rows / (sum(PROBLEMS.values()) * N)))
    per_batch = 82  # ~1 M rows generated at a time (a 10 M table would not fit in memory as Python strings)
    chunk_rows = 83_000  # rows per insert transaction (~12 per million, as an evaluation's chunks)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "store.duckdb"
        store = Store(db)
        store.execute_many("upsert_run", eval_runs(runs))
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
        context_rows = add_context(store, runs)
        size_mb = db.stat().st_size / 2**20
        print(f"ingest {added:,} rows in {ingest_s:.2f} s ({ingest_s / parquet_s:.1f}x a Parquet write of {parquet_s:.2f} s); "
              f"re-ingest of a stored chunk adds {again} rows in {reingest_s:.2f} s; + {context_rows:,} rows of an "
              f"imported run, a training run and a study; store {size_mb:.0f} MiB")

        t0 = time.perf_counter()
        queries, nav = dashboard_and_report_queries(db, Path(tmp) / "report")
        print(f"{len(queries)} queries recorded from {len(nav['pages'])} pages and prl report in "
              f"{time.perf_counter() - t0:.0f} s")

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
        results_q = {}
        for label, q in queries.items():
            if q["kind"] == "query":
                def call(q=q):
                    return store.rows(q["name"], **q["params"])
            else:
                def call(q=q):
                    return run_query(str(db), q["name"])[1]
            call()
            times = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                out = call()
                times.append((time.perf_counter() - t) * 1e3)
            med, p95 = statistics.median(times), sorted(times)[int(0.95 * (len(times) - 1))]
            results_q[label] = {"median_ms": med, "p95_ms": p95, "rows": len(out), "ratio_to_count": med / base_ms,
                                "meets_target": p95 < TARGET_QUERY_MS, "run_by": q["by"],
                                "params": _shown(q["params"]), "referenced_at": q.get("referenced_at", [])}
            print(f"  {label:<34} {med:7.1f} ms (p95 {p95:6.1f}) = {med / base_ms:6.1f}x count(*)  [{len(out)} rows]"
                  f"  {'; '.join(q['by'])[:80]}")
        t = time.perf_counter()
        with store.read():
            pass
        connect_ms = (time.perf_counter() - t) * 1e3

    target_s = TARGET_INGEST_S * max(1.0, n_rows / 1e6)  # 10 s per million rows
    results = {
        "machine": machine_info(), "rows": n_rows, "runs": runs, "context_rows": context_rows, "repeats": args.repeats,
        "ingest_s": ingest_s, "ingest_chunks": chunks, "target_ingest_s": target_s, "parquet_write_s": parquet_s,
        "ingest_ratio_to_parquet": ingest_s / parquet_s, "reingest_chunk_s": reingest_s, "reingest_added": again,
        "store_mib": size_mb, "meets_ingest_target": ingest_s < target_s, "count_baseline_ms": base_ms,
        "connect_ms": connect_ms, "dashboard_pages": nav["pages"], "queries": results_q,
    }
    write_json(args.name, results, code=CODE)
    print("re-rendered " + ", ".join(p.name for p in render_all()))
    return results


if __name__ == "__main__":
    main()
