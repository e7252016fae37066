"""Calibration of the relevance score behind "suspicious passes" (prl.grading.relevance).

Not a speed benchmark: it measures how well ``relevance(problem, text)`` separates a reference
solution scored against its own problem from the same solution scored against a random other
problem of the same benchmark (the Appendix-C case: right answer, reasoning about something
else). Uses the worked solutions bundled with math500 and olympiad_bench and minerva_math's
solution-text answers.

    python bench/relevance.py

Writes bench/results/relevance.json and re-renders the figures (bench/render.py).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_info, render_all, write_json  # noqa: E402

from prl.data.datasets import bundled_path  # noqa: E402
from prl.grading.relevance import SUSPICIOUS_BELOW, relevance  # noqa: E402

SOURCES = {"math500": "solution", "minerva_math": "answer", "olympiad_bench": "solution"}
THRESHOLDS = (0.1, SUSPICIOUS_BELOW, 0.25)


def measure(dataset: str, field: str, seed: int = 0) -> dict:
    rows = [json.loads(line) for line in bundled_path(dataset).read_text(encoding="utf-8").splitlines()]
    rng = random.Random(seed)
    own, other = [], []
    for i, row in enumerate(rows):
        text = row.get(field)
        text = " ".join(text) if isinstance(text, list) else text
        if not text:
            continue
        j = rng.randrange(len(rows) - 1)
        j = j + 1 if j >= i else j  # a different problem
        a, b = relevance(row["problem"], text), relevance(rows[j]["problem"], text)
        if a is not None and b is not None:
            own.append(a)
            other.append(b)
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    return {
        "pairs": len(own), "median_own": med(own), "median_other": med(other),
        "below": {str(t): {"own": sum(x < t for x in own) / len(own), "other": sum(x < t for x in other) / len(other)}
                  for t in THRESHOLDS},
    }


def main() -> dict:
    results = {"machine": machine_info(), "threshold": SUSPICIOUS_BELOW,
               "datasets": {d: measure(d, f) for d, f in SOURCES.items()}}
    write_json("relevance", results)
    for d, r in results["datasets"].items():
        print(d, r)
    print("re-rendered " + ", ".join(p.name for p in render_all()))
    return results


if __name__ == "__main__":
    main()
