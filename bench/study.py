"""The embedded study, recorded: `prl study --config configs/study/embedded.yaml` from nothing; and the study of
paper v2's claims (`configs/study/frpo_v2.yaml`: FRPO against GRPO, loss-side KL k1/k3, fused KL, step PRL).

    python bench/study.py                   # ~50 min on 2 cores (machines differ ~3x); not part of CI
    python bench/study.py --out runs/study-bench --keep
    python bench/study.py --config configs/study/frpo_v2.yaml      # → bench/results/study_frpo_v2.json

Runs the study in a fresh output directory (the config's out_dir and store are redirected there),
then writes bench/results/study.json: the study's own report (per-cell average@n and pass@k with CIs
across seeds and problems, each cell against GRPO seed by seed, the eta sweep, the config check),
the wall time, and the machine; and re-renders README.md and bench/RESULTS.md from it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from common import machine_info, render_all, write_json  # noqa: E402

CODE = ("bench/study.py", "prl/studies", "flows", "prl/training", "prl/evaluation", "prl/generation", "prl/grading",
        "prl_core", "prl/store", "prl_cli/study.py", "configs/study/embedded.yaml")
"""The code this benchmark measures: its results file records these paths (bench/common.py's write_json),
and ``python bench/render.py --check`` fails once one of them changes after the recorded commit."""

V2_CODE = ("bench/study.py", "prl/studies", "flows", "prl/training", "prl/evaluation", "prl/generation", "prl/grading",
           "prl_core", "prl/store", "prl_cli/study.py", "configs/study/frpo_v2.yaml")
"""The same for the v2 study (``bench/results/study_frpo_v2.json``)."""

RESULTS = {"embedded": "study", "frpo_v2": "study_frpo_v2"}
"""Study id → results file name (``study_frpo_v2`` measures V2_CODE, every other CODE)."""

DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE")


def phases(db: Path, study_id: str) -> dict[str, float]:
    """Seconds of the study's phases from the store's own timestamps: registration → first training run
    (the warm start), and first training run → last job finished (the 15 jobs, each job's mean)."""
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        start, first, last, jobs = con.execute(
            "SELECT (SELECT created_at FROM studies WHERE study_id = $s), min(r.created_at), max(c.finished_at), "
            "count(*) FROM study_cells c JOIN runs r ON r.run_id = c.train_run_id WHERE c.study_id = $s",
            {"s": study_id}).fetchone()
    finally:
        con.close()
    jobs_s = (last - first).total_seconds()
    return {"warm_start": round((first - start).total_seconds(), 1), "jobs": round(jobs_s, 1),
            "per_job": round(jobs_s / max(1, jobs), 1)}


def record(config: str, out: Path, study_id: str, seconds: float | None, machine: dict) -> None:
    """bench/results/study.json from the finished study in ``out`` (its report file and store)."""
    report = json.loads((out / "study_report.json").read_text())
    report.pop("curves", None)  # per-step rows: in the study's store, not in the results file
    ph = phases(out / "store.duckdb", study_id)
    total = seconds if seconds is not None else ph["warm_start"] + ph["jobs"]
    name = RESULTS.get(study_id, f"study_{study_id}")
    payload = {"config": str(Path(config).resolve().relative_to(ROOT)), "seconds": round(total, 1), "phases": ph,
               "machine": machine, "commit": report.get("manifest", {}).get("git", {}).get("commit"), "report": report}
    if study_id == "frpo_v2":  # each results file names its declared code literally (tests/test_figures.py reads it)
        write_json(name, payload, code=V2_CODE)
    else:
        write_json(name, payload, code=CODE)
    render_all()
    print(f"[study] {total / 60:.1f} min; bench/results/{name}.json written", file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(ROOT / "configs" / "study" / "embedded.yaml"))
    ap.add_argument("--out", default=None, help="output directory (default: a temporary one, removed after)")
    ap.add_argument("--keep", action="store_true", help="keep the output directory")
    ap.add_argument("--record-only", action="store_true",
                    help="do not run: record bench/results/study.json from the finished study in --out (its store "
                         "and report; the wall time from the store's timestamps)")
    args = ap.parse_args()
    base = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="prl-study-bench-"))
    doc = yaml.safe_load(Path(args.config).read_text())
    out = base / doc["study"]["id"]
    if args.record_only:
        record(args.config, out, doc["study"]["id"], None, machine_info())
        return 0
    if out.exists():
        raise SystemExit(f"{out} exists: the bench records a study from nothing; choose another --out")
    doc["study"]["out_dir"], doc["study"]["db"] = str(out), None
    base.mkdir(parents=True, exist_ok=True)
    config = base / Path(args.config).name
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS}
    env.setdefault("PREFECT_HOME", str(base / "prefect-home"))
    machine = machine_info()
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "prl_cli", "study", "--config", str(config), "--quiet"],
                       cwd=ROOT, env=env, text=True)
    seconds = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"prl study failed (exit {r.returncode}); its output is above")
    record(args.config, out, doc["study"]["id"], seconds, machine)
    if not args.keep and not args.out:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
