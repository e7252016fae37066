"""Benchmark: verification of 12,136 responses (1,517 benchmark problems × 8), docs/architecture.md §Targets.

Responses are synthetic but shaped like real samples: some reasoning text, then a boxed answer
that is the gold (written as the gold or reformatted), a wrong value, or missing; answers
repeat within a problem's 8 samples as real models' do. Measured in one run:

  sequential  verify_one() in a loop, no cache (the baseline)
  pool+cache  VerifierPool(2 workers) with its caches: (answer, gold) verdicts in the parent,
              parsed golds in each worker

Target: pool+cache ≥ 2× the sequential loop, identical verdicts.

    python bench/verify.py [--limit N]

Writes bench/results/verify.json (not with --limit) and re-renders the figures (bench/render.py).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_info, render_all, write_json  # noqa: E402

from prl.data.datasets import BENCHMARKS, load_dataset  # noqa: E402
from prl.grading.verifier import VerifierPool, verify_one  # noqa: E402

CODE = ("bench/verify.py", "prl/grading/verifier.py", "prl/data/datasets.py", "prl/data/benchmarks")
"""The code this benchmark measures: its results file records these paths (bench/common.py's write_json),
and ``python bench/render.py --check`` fails once one of them changes after the recorded commit."""

REASONING = ["Let us compute step by step.", "First we simplify the expression.", "We substitute the values.",
             "Therefore, combining the cases,", "Checking the boundary conditions gives"]


def responses_for(gold: str, rng: random.Random, n: int = 8) -> list[str]:
    wrong = [f"{rng.randint(2, 99)}", f"\\frac{{{rng.randint(1, 9)}}}{{{rng.randint(2, 9)}}}", "x + 1"]
    pool = [gold, gold, gold.replace(" ", ""), wrong[0], wrong[1], wrong[2], None]
    picks = [rng.choice(pool) for _ in range(3)]  # a few distinct answers, repeated across the 8 samples
    out = []
    for _ in range(n):
        ans = rng.choice(picks)
        text = " ".join(rng.sample(REASONING, 3))
        out.append(text + (" I cannot finish this." if ans is None else f" The answer is $\\boxed{{{ans}}}$."))
    return out





def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=None, help="problems per benchmark (default: all 1,517)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    pairs = []
    for name in BENCHMARKS:
        problems, _ = load_dataset(name, flag_raw_only=False)
        for p in problems[: args.limit]:
            pairs += [(r, p.gold_normalized) for r in responses_for(p.gold_normalized, rng)]
    print(f"verifying {len(pairs)} responses ({len(pairs) // 8} problems x 8)")

    t0 = time.perf_counter()
    sequential = [verify_one(r, g) for r, g in pairs]
    seq_s = time.perf_counter() - t0
    print(f"  sequential, no cache: {seq_s:.1f} s")

    t0 = time.perf_counter()
    with VerifierPool(args.workers) as pool:
        start_s = time.perf_counter() - t0
        pooled = pool.verify(pairs)
        stats = dict(pool.stats)
    pool_s = time.perf_counter() - t0
    mismatches = [i for i, (a, b) in enumerate(zip(sequential, pooled)) if a.verdict != b.verdict]
    print(f"  pool ({args.workers} workers) + cache: {pool_s:.1f} s (worker start {start_s:.1f} s), "
          f"cache hits {stats['cache_hits']}, killed {stats['killed']}")
    ratio = seq_s / pool_s
    print(f"  speed-up {ratio:.2f}x [target >= 2x: {'met' if ratio >= 2 else 'MISSED'}]; "
          f"verdict mismatches: {len(mismatches)}")
    results = {
        "machine": machine_info(), "responses": len(pairs), "workers": args.workers,
        "sequential_s": seq_s, "pool_cache_s": pool_s, "pool_start_s": start_s, "speedup": ratio,
        "meets_target_2x": ratio >= 2, "verdict_mismatches": len(mismatches),
        "verdicts": dict(Counter(v.verdict for v in sequential)), "pool_stats": stats,
    }
    if args.limit is None:
        write_json("verify", results, code=CODE)
        print("re-rendered " + ", ".join(p.name for p in render_all()))
    return results


if __name__ == "__main__":
    main()
