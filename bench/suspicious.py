"""Suspicious passes on real models' correct responses: how often the detector (prl.grading.relevance,
the store's ``suspicious_passes`` view) lists a right answer whose reasoning is in fact about its own
problem, and whether it still catches the Appendix-C case in real long-form text.

Not a speed benchmark. The outside generation files of tests/data/external/ (sources in its README:
lighteval details of Saturn-1.5B on AIME 2024 and of DeepSeek-R1-Distill-Qwen-7B and Saturn-7B on
MATH-500, an R1-distill JSON on AMC, an R1-Zero JSONL on MATH-500) are imported with ``prl import``'s
code (``prl.imports.run.run_import``) into a temporary store and verified by our verifier. Then:

* **flag rate**: the correct samples the ``suspicious_passes`` view lists, per file, with the rules
  that list each (``prl.grading.relevance.flagged_by``);
* **how many were real**: every listed case was read by a person, and the reading is data,
  ``bench/suspicious_readings.csv`` (set, problem, sample, judgement — one of
  ``prl.grading.relevance.JUDGEMENTS`` —, why). A listed case without a reading makes the script exit 1
  (read it and add a row); readings of cases no longer listed (read under an earlier rule) are
  counted as such;
* **swapped recall on real text**: each correct response given to another problem of its benchmark
  (seeded random choice), the Appendix-C case built from real long-form reasoning: the share the same
  rules list.

    python bench/suspicious.py

Writes bench/results/suspicious.json and re-renders the figures (bench/render.py); the swapped-solution
recall on the benchmarks' own reference solutions is bench/relevance.py's, shown beside it.
"""

from __future__ import annotations

import csv
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_info, render_all, write_json  # noqa: E402
from external import EXT, SETS as EXTERNAL_SETS, published  # noqa: E402

from prl.grading.relevance import (FIT_MARGIN, JUDGEMENTS, RULE_NAMES, answer_only, fit_index,  # noqa: E402
                                   flagged_by, relevance)
from prl.imports.run import ImportConfig, run_import  # noqa: E402
from prl.store.db import Store  # noqa: E402

CODE = ("bench/suspicious.py", "bench/suspicious_readings.csv", "bench/external.py", "prl/grading/relevance.py",
        "prl/grading/verifier.py", "prl/imports/run.py", "sql/schema.sql", "tests/data/external")
"""The code and data this benchmark measures: its results file records these paths (bench/common.py's write_json),
and ``python bench/render.py --check`` fails once one of them changes after the recorded commit."""

READINGS = Path(__file__).resolve().parent / "suspicious_readings.csv"
READING_FIELDS = ("set", "problem_id", "sample_idx", "judgement", "why")
LONG_CHARS = 2000
"""A correct response of at least this many characters counts as long-form reasoning."""
VERIFY_TIMEOUT_S = 30
"""Math-Verify's timeout here (the default is 5 s, killed at 15 s): a loaded machine must not turn a long right
answer into a ``timeout`` verdict and so change the set of correct responses measured."""

SETS = {
    **{name: {k: spec[k] for k in ("what", "files", "dataset", "format", "fields")} | {"reported": published(name)}
       for name, spec in EXTERNAL_SETS.items()},
    "lighteval-deepseek-r1-distill-qwen-7b": {
        "what": "DeepSeek-R1-Distill-Qwen-7B on MATH-500, lighteval details",
        "files": sorted((EXT / "lighteval-deepseek-r1-distill-qwen-7b").glob("details_*.parquet")),
        "dataset": "math500", "format": "lighteval", "fields": None, "reported": None},
    "lighteval-saturn-7b": {
        "what": "Saturn-7B on MATH-500, lighteval details",
        "files": sorted((EXT / "lighteval-saturn-7b").glob("details_*.parquet")),
        "dataset": "math500", "format": "lighteval", "fields": None, "reported": None},
}


def load_readings(path: Path = READINGS) -> dict[tuple[str, str, int], dict]:
    """{(set, problem_id, sample_idx): reading}; a malformed row is an error naming the file, line and field."""
    out: dict[tuple[str, str, int], dict] = {}
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) != READING_FIELDS:
            raise SystemExit(f"{path}: line 1: the header must be {','.join(READING_FIELDS)}")
        for line, row in enumerate(reader, start=2):
            if row["judgement"] not in JUDGEMENTS:
                raise SystemExit(f"{path}: line {line}: judgement: {row['judgement']!r} is not one of "
                                 f"{', '.join(JUDGEMENTS)}")
            if not row["sample_idx"].isdigit():
                raise SystemExit(f"{path}: line {line}: sample_idx: {row['sample_idx']!r} is not a number")
            if not (row["why"] or "").strip():
                raise SystemExit(f"{path}: line {line}: why: empty (say what the response does)")
            key = (row["set"], row["problem_id"], int(row["sample_idx"]))
            if key in out:
                raise SystemExit(f"{path}: line {line}: {key} is read twice")
            out[key] = row
    return out


def swapped_recall(correct: list[dict], dataset: str, seed: int = 0) -> dict:
    """Each correct response scored against a random other problem of its benchmark, by the same rules."""
    index = fit_index(dataset)
    rng = random.Random(seed)
    ids = index.ids
    flagged = 0
    for s in correct:
        other = index.problem(rng.choice([x for x in ids if x != s["problem_id"]]))
        rules = flagged_by("correct", relevance(other.problem, s["response"]), answer_only(s["response"]),
                           index.best_fit(other.problem_id, s["response"]), other.problem_id)
        flagged += bool(rules)
    return {"swapped": len(correct), "flagged": flagged, "recall": flagged / len(correct) if correct else None}


def measure(name: str, spec: dict, db: Path, readings: dict) -> dict:
    if not spec["files"]:
        return {"what": spec["what"], "dataset": spec["dataset"], "absent": True}
    run_import(ImportConfig(files=tuple(map(str, spec["files"])), dataset=spec["dataset"], db=str(db), run_id=name,
                            format=spec["format"], fields=spec["fields"], reported_accuracy=spec["reported"],
                            verify_timeout_s=VERIFY_TIMEOUT_S),
               progress=False, log=lambda *_: None)
    store = Store(str(db), create=False)
    samples = store.records("samples_with_gold_for_run", run_id=name)
    correct = [s for s in samples if s["verdict"] == "correct"]
    lengths = {(s["problem_id"], s["sample_idx"]): len(s["response"]) for s in correct}
    listed = []
    for r in store.records("suspicious_passes_for_run", run_id=name, limit=10**9):
        rules = flagged_by("correct", r["relevance"], r["answer_only"], r["best_fit"], r["problem_id"])
        reading = readings.get((name, r["problem_id"], r["sample_idx"]))
        listed.append({"problem_id": r["problem_id"], "sample_idx": r["sample_idx"], "flagged_by": list(rules),
                       "best_fit": r["best_fit"], "relevance": r["relevance"],
                       "chars": lengths[(r["problem_id"], r["sample_idx"])],
                       "judgement": reading["judgement"] if reading else None, "why": reading["why"] if reading else None})
    shown = {(c["problem_id"], c["sample_idx"]) for c in listed}
    earlier = [{"problem_id": k[1], "sample_idx": k[2], "judgement": v["judgement"], "why": v["why"]}
               for k, v in readings.items() if k[0] == name and (k[1], k[2]) not in shown]
    long_keys = {k for k, n in lengths.items() if n >= LONG_CHARS}
    return {
        "what": spec["what"], "dataset": spec["dataset"], "files": [p.name for p in spec["files"]],
        "samples": len(samples), "correct": len(correct),
        "not_verified": sum(s["verdict"] in ("timeout", "error") for s in samples),
        "median_chars": statistics.median(lengths.values()) if lengths else None, "long_form": len(long_keys),
        "listed": listed, "listed_long_form": sum((c["problem_id"], c["sample_idx"]) in long_keys for c in listed),
        "by_rule": {rule: sum(rule in c["flagged_by"] for c in listed) for rule in RULE_NAMES},
        "confirmed": sum(c["judgement"] == "confirmed" for c in listed),
        "not_suspicious": sum(c["judgement"] == "not_suspicious" for c in listed),
        "unread": [f"{c['problem_id']} sample {c['sample_idx']}" for c in listed if c["judgement"] is None],
        "read_earlier_not_listed_now": earlier,
        "swapped_real": swapped_recall(correct, spec["dataset"]),
    }


def totals(sets: dict) -> dict:
    present = [x for x in sets.values() if not x.get("absent")]
    out = {k: sum(x[k] for x in present) for k in ("correct", "long_form", "listed_long_form", "confirmed",
                                                    "not_suspicious")}
    out["listed"] = sum(len(x["listed"]) for x in present)
    out["listed_long_form_false"] = sum(c["judgement"] == "not_suspicious" and c["chars"] >= LONG_CHARS
                                        for x in present for c in x["listed"])
    out["swapped"] = sum(x["swapped_real"]["swapped"] for x in present)
    out["swapped_flagged"] = sum(x["swapped_real"]["flagged"] for x in present)
    out["read_earlier_not_listed_now"] = sum(len(x["read_earlier_not_listed_now"]) for x in present)
    out["read_earlier_false"] = sum(e["judgement"] == "not_suspicious" for x in present
                                    for e in x["read_earlier_not_listed_now"])
    return out


def main() -> dict:
    readings = load_readings()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "suspicious.duckdb"
        sets = {name: measure(name, spec, db, readings) for name, spec in SETS.items()}
    results = {"machine": machine_info(), "fit_margin": FIT_MARGIN, "long_chars": LONG_CHARS,
               "verify_timeout_s": VERIFY_TIMEOUT_S,
               "readings": READINGS.name, "sets": sets, "totals": totals(sets)}
    write_json("suspicious", results, code=CODE)
    for name, x in sets.items():
        if x.get("absent"):
            print(f"{name}: file absent")
            continue
        print(f"{name}: {len(x['listed'])} of {x['correct']} correct listed ({x['by_rule']}), "
              f"{x['confirmed']} confirmed, {x['not_suspicious']} not suspicious, unread {x['unread']}; "
              f"swapped real {x['swapped_real']['flagged']}/{x['swapped_real']['swapped']}")
    print("totals", results["totals"])
    print("re-rendered " + ", ".join(p.name for p in render_all()))
    unread = [u for x in sets.values() for u in x.get("unread", [])]
    if unread:
        print(f"{len(unread)} listed case(s) without a reading in {READINGS}: read each and add a row", file=sys.stderr)
    return results


if __name__ == "__main__":
    sys.exit(1 if any(x.get("unread") for x in main()["sets"].values()) else 0)
