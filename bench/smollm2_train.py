"""The README's SmolLM2 training commands, run as written, with the dry run's memory plan held against them.

    python bench/smollm2_train.py            # ~15 min on 2 cores: import (cached), dry run, 2 steps + evaluation

Runs, in a scratch directory, what README.md's *Your own model* section shows:

    prl model import --smollm2 --out models/smollm2
    prl train --config configs/train/tiny_prl.yaml --model models/smollm2 --out runs/train/smollm2-prl --dry-run
    prl train --config configs/train/tiny_prl.yaml --model models/smollm2 --out runs/train/smollm2-prl --steps 2

(the dry run with ``--format json``, so its plan can be read), and records in bench/results/smollm2_train.json: whether
each command finished, the wall time, the plan (peak and phases, CPU), what the trainer measured per step and
phase (its peak resident memory, reset at every phase start: ``memory/*_peak_gib`` in ``train_metrics``), the
process tree's peak that ``prl train`` printed, and prediction / measurement.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from common import machine_info, render_all, write_json  # noqa: E402

CODE = ("bench/smollm2_train.py", "prl/training", "prl/models", "prl/generation", "prl/grading", "prl_core",
        "prl/evaluation", "prl/store", "prl_cli/train.py", "prl_cli/model.py", "configs/train/tiny_prl.yaml")
"""The code this benchmark measures: its results file records these paths (bench/common.py's write_json),
and ``python bench/render.py --check`` fails once one of them changes after the recorded commit."""

PRL = [sys.executable, "-m", "prl_cli"]
CONFIG = str(ROOT / "configs" / "train" / "tiny_prl.yaml")


def run(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.perf_counter()
    r = subprocess.run(PRL + args, cwd=cwd, capture_output=True, text=True)
    return r, time.perf_counter() - t0


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="prl-smollm2-"))
    out: dict = {"kind": "smollm2_train", "commands": [], "machine": machine_info()}
    try:
        model = "models/smollm2"
        imp, s_imp = run(["model", "import", "--smollm2", "--out", model], work)
        out["commands"].append({"command": f"prl model import --smollm2 --out {model}", "rc": imp.returncode,
                                "seconds": round(s_imp, 1)})
        if imp.returncode:
            raise SystemExit(imp.stderr[-2000:])
        base = ["train", "--config", CONFIG, "--model", model, "--out", "runs/train/smollm2-prl"]
        dry, s_dry = run(base + ["--dry-run", "--format", "json"], work)
        out["commands"].append({"command": "prl train --config configs/train/tiny_prl.yaml --model models/smollm2 "
                                           "--out runs/train/smollm2-prl --dry-run", "rc": dry.returncode,
                                "seconds": round(s_dry, 1)})
        if dry.returncode:
            raise SystemExit(dry.stderr[-2000:])
        plan = json.loads(dry.stdout)["memory_plan"]
        train, s_train = run(base + ["--steps", "2", "--quiet"], work)
        out["commands"].append({"command": "prl train --config configs/train/tiny_prl.yaml --model models/smollm2 "
                                           "--out runs/train/smollm2-prl --steps 2", "rc": train.returncode,
                                "seconds": round(s_train, 1), "stderr_tail": train.stderr[-1500:]})
        if train.returncode:
            raise SystemExit(train.stderr[-3000:])
        result = json.loads(train.stdout)
        import duckdb

        con = duckdb.connect(str(work / "runs" / "store.duckdb"), read_only=True)
        rows = con.execute("SELECT step, name, value FROM train_metrics WHERE run_id = 'smollm2-prl' AND "
                           "(name LIKE 'memory/%' OR name LIKE 'time/%')").fetchall()
        manifest = json.loads(con.execute("SELECT manifest FROM runs WHERE run_id = 'smollm2-prl'").fetchone()[0])
        con.close()
        steps: dict[int, dict[str, float]] = {}
        for step, name, value in rows:
            steps.setdefault(step, {})[name] = value
        measured = {ph: max(s[f"memory/{ph}_peak_gib"] for s in steps.values()) for ph in ("rollout", "logprobs", "update")}
        peak_phase = max(measured, key=measured.get)
        tree = re.search(r"peak memory ([\d.]+) GiB", train.stderr)
        out.update({
            "plan": {"peak_gib": plan["peak_gib"], "peak_phase": plan["peak_phase"], "phases_gib": plan["phases_gib"],
                     "fits": plan["fits"], "capacity_gib": plan["capacity_gib"]},
            "measured": {"phases_peak_gib": measured, "peak_gib": measured[peak_phase], "peak_phase": peak_phase,
                         "steps": steps, "process_tree_peak_gib": float(tree.group(1)) if tree else None,
                         "memory_record": manifest.get("memory")},
            "ratio": plan["peak_gib"] / measured[peak_phase],
            "phase_ratios": {ph: plan["phases_gib"][ph] / v for ph, v in measured.items()},
            "final_eval": {k: result["final_eval"][k] for k in ("run_id", "samples_added", "average_at_n")},
            "tolerance": 0.20,
        })
        out["within_tolerance"] = abs(out["ratio"] - 1) <= out["tolerance"]
        out["created_at"] = time.strftime("%Y-%m-%d %H:%M:%S")
        path = write_json("smollm2_train", out, code=CODE)
        print(f"plan {plan['peak_gib']:.2f} GiB ({plan['peak_phase']}), measured {measured[peak_phase]:.2f} GiB "
              f"({peak_phase}): ratio {out['ratio']:.3f}; train {s_train / 60:.1f} min; written {path}")
        render_all()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    sys.exit(main())
