"""Calibration of the relevance score and the "fits another problem better" rule behind
"suspicious passes" (prl.grading.relevance).

Not a speed benchmark: it measures how well ``relevance(problem, text)`` separates a reference
solution scored against its own problem from the same solution scored against a random other
problem of the same benchmark (the Appendix-C case: right answer, reasoning about something
else). Uses the worked solutions bundled with math500 and olympiad_bench and minerva_math's
solution-text answers.

Second part, the Appendix-C case held to its own kind: each problem that shares its gold answer
with another problem of the same benchmark is given that other problem's reference solution
(a right answer reached by reasoning about something else). The whole suspicious-pass rule
(answer only, relevance < SUSPICIOUS_BELOW, or fits another problem better by FIT_MARGIN) must
flag >= 90% of those swapped cases and <= 3% of the benchmark's own solutions. The margin is
tuned on one half of the problems (seeded split) and the rates are reported, with Wilson 95%
CIs, on the other half.

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

import math  # noqa: E402

from prl.data.datasets import bundled_path, load_dataset  # noqa: E402
from prl.grading.relevance import (FIT_MARGIN, SUSPICIOUS_BELOW, FitIndex, answer_only,  # noqa: E402
                                   is_suspicious_pass, relevance)

CODE = ("bench/relevance.py", "prl/grading/relevance.py", "prl/data/datasets.py", "prl/data/benchmarks")
"""The code this benchmark measures: its results file records these paths (bench/common.py's write_json),
and ``python bench/render.py --check`` fails once one of them changes after the recorded commit."""

SWAP_SETS = ("math500", "olympiad_bench", "minerva_math")
MARGINS = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0)
TARGET_RECALL, TARGET_FALSE = 0.90, 0.03

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


def wilson(k: int, n: int, z: float = 1.96) -> list[float]:
    """Wilson score 95% interval of a proportion k/n."""
    if n == 0:
        return [math.nan, math.nan]
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [max(0.0, centre - half), min(1.0, centre + half)]


def _flagged(index: FitIndex, problem, text: str, margin: float) -> bool:
    """The whole suspicious-pass rule for a correct sample, with the fit margin set to ``margin``."""
    best = index.best_fit(problem.problem_id, text, margin)
    return is_suspicious_pass("correct", relevance(problem.problem, text), answer_only(text), best, problem.problem_id)


def swapped(dataset: str, field: str, seed: int = 0) -> dict:
    """Own solutions and same-gold swapped solutions, flag rates per margin, tuned on half A, reported on half B."""
    rows = [json.loads(line) for line in bundled_path(dataset).read_text(encoding="utf-8").splitlines()]
    problems, _ = load_dataset(dataset)
    texts = [" ".join(r[field]) if isinstance(r.get(field), list) else r.get(field) for r in rows]
    index = FitIndex(problems)
    by_gold: dict[str, list[int]] = {}
    for i, p in enumerate(problems):
        by_gold.setdefault(p.gold_normalized, []).append(i)
    rng = random.Random(seed)
    swaps = {}
    for i, p in enumerate(problems):
        partners = [j for j in by_gold[p.gold_normalized] if j != i and texts[j]]
        if partners:
            swaps[i] = rng.choice(partners)
    order = list(range(len(problems)))
    rng.shuffle(order)
    half_a = set(order[: len(order) // 2])
    rates = {}
    for m in MARGINS:
        own = {i: _flagged(index, problems[i], texts[i], m) for i in range(len(problems)) if texts[i]}
        sw = {i: _flagged(index, problems[i], texts[j], m) for i, j in swaps.items()}
        rates[str(m)] = {h: {"own_flagged": sum(v for i, v in own.items() if (i in half_a) == (h == "a")),
                             "own": sum(1 for i in own if (i in half_a) == (h == "a")),
                             "swapped_flagged": sum(v for i, v in sw.items() if (i in half_a) == (h == "a")),
                             "swapped": sum(1 for i in sw if (i in half_a) == (h == "a"))} for h in ("a", "b")}
    # tuning on half A: the smallest margin whose own-solution flag rate is within the target
    ok = [m for m in MARGINS if rates[str(m)]["a"]["own_flagged"] <= TARGET_FALSE * rates[str(m)]["a"]["own"]]
    tuned = ok[0] if ok else MARGINS[-1]
    b = rates[str(FIT_MARGIN)]["b"] if str(FIT_MARGIN) in rates else None
    out = {"problems": len(problems), "swapped_pairs": len(swaps), "rates": rates, "tuned_margin_half_a": tuned}
    if b is not None:
        out["held_out"] = {
            "margin": FIT_MARGIN,
            "recall": b["swapped_flagged"] / b["swapped"], "recall_ci": wilson(b["swapped_flagged"], b["swapped"]),
            "false_flags": b["own_flagged"] / b["own"], "false_flags_ci": wilson(b["own_flagged"], b["own"]),
            "swapped": b["swapped"], "own": b["own"]}
    # the overlap rule alone (relevance < SUSPICIOUS_BELOW or answer only: best_fit unknown) on the held-out half
    old_sw = sum(is_suspicious_pass("correct", relevance(problems[i].problem, texts[j]), answer_only(texts[j]))
                 for i, j in swaps.items() if i not in half_a)
    old_own = sum(is_suspicious_pass("correct", relevance(problems[i].problem, texts[i]), answer_only(texts[i]))
                  for i in range(len(problems)) if texts[i] and i not in half_a)
    out["held_out_overlap_rule_only"] = {"recall": old_sw / max(1, sum(1 for i in swaps if i not in half_a)),
                                         "false_flags": old_own / max(1, sum(1 for i in range(len(problems))
                                                                             if texts[i] and i not in half_a))}
    return out


def main() -> dict:
    results = {"machine": machine_info(), "threshold": SUSPICIOUS_BELOW,
               "datasets": {d: measure(d, f) for d, f in SOURCES.items()},
               "fit_margin": FIT_MARGIN, "targets": {"recall": TARGET_RECALL, "false_flags": TARGET_FALSE},
               "swapped": {d: swapped(d, SOURCES[d]) for d in SWAP_SETS}}
    write_json("relevance", results, code=CODE)
    for d, r in results["datasets"].items():
        print(d, r)
    for d, r in results["swapped"].items():
        print(d, "held out:", r.get("held_out"), "tuned on half A:", r["tuned_margin_half_a"])
    print("re-rendered " + ", ".join(p.name for p in render_all()))
    return results


if __name__ == "__main__":
    main()
