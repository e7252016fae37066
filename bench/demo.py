"""The main job at its default budget, recorded: `prl demo` from nothing to a populated store.

    python bench/demo.py                 # ~10-35 min on 2 cores (machines differ ~3x)
    python bench/demo.py --out runs/demo-bench --keep

Runs `prl demo` in a fresh output directory, checks what the demo is built to show (every row of
the budget stored; PRL's held-out synthetic average above the warm start's, mostly by showing its
working more often), copies the demo's own result file (OUT/demo_result.json: commit, machine,
phase times, held-out averages with CIs, paired comparisons) to bench/results/demo.json and
re-renders the figures of README.md and bench/RESULTS.md from it. The CI suite runs the same
command at its --small budget (tests/test_demo.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from common import render_all  # noqa: E402

DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE")


def check(result: dict) -> list[str]:
    """What the demo must show; an empty list when it does."""
    problems = []
    paired = result["paired"].get("demo-eval-prl vs demo-eval-warm_start")
    if paired is None or not paired["diff"] > 0:
        problems.append(f"PRL is not above the warm start on the held-out set: {paired}")
    held = result["held_out"]
    if (held["prl"]["working_share"] or 0) < (held["warm_start"]["working_share"] or 0) + 0.10:
        problems.append("PRL does not show its working clearly more often than the warm start")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="output directory (default: a temporary one, removed after)")
    ap.add_argument("--keep", action="store_true", help="keep the output directory")
    args = ap.parse_args()
    base = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="prl-demo-bench-"))
    out = base / "demo"
    if out.exists():
        raise SystemExit(f"{out} exists: the bench records a demo from nothing; choose another --out")
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS}
    env.setdefault("PREFECT_HOME", str(base / "prefect-home"))
    r = subprocess.run([sys.executable, "-m", "prl_cli", "demo", "--out", str(out), "--quiet"], cwd=ROOT,
                       env=env, text=True)
    if r.returncode != 0:
        raise SystemExit(f"prl demo failed (exit {r.returncode}); its output is above")
    result = json.loads((out / "demo_result.json").read_text())
    failed = check(result)
    result["checks"] = {"passed": not failed, "problems": failed}
    (HERE / "results" / "demo.json").write_text(json.dumps(result, indent=2) + "\n")
    render_all()
    print(f"[demo] {result['seconds']:.0f} s; checks {'passed' if not failed else 'FAILED: ' + '; '.join(failed)}; "
          "bench/results/demo.json written", file=sys.stderr)
    if not args.keep and not args.out:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
