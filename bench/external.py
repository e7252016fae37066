"""Published numbers, reproduced sample by sample: the three outside generation sets of
tests/data/external/ (sources in its README) imported with ``prl import``, scored by our verifier,
compared with each source's own per-row labels and the accuracy its authors published.

The target is not to match their number but to explain every difference. Each disagreeing
sample gets a cause, decided by the rules below from the sample and the source file itself:

    format_gate        theirs 0, ours correct: their grader scores 0 unless the answer sits in
                       "</think> <answer>…</answer>" (the file's own format_reward is 0)
    their_strict_match theirs 0, ours correct, format passed: their grader compares the tag's whole
                       content with the gold, so a sentence or an equation that ends on the right
                       value ("Hence, the degree of $f$ is 3.", "3/24 = 1/8") or another spelling of
                       it ("0.35625" for ".35625", "30^{\circ}") fails
    their_false_pass   theirs 1, ours wrong: the response's declared final answer (its last
                       \\boxed{} or <answer> tag) is not the gold
    our_false_negative theirs 1, ours wrong, and the response's final answer does verify against
                       the gold once read as the source reads it (our verifier wrong)
    unexplained        anything else (the bench fails if there is one)

    python bench/external.py

Writes bench/results/external.json and re-renders the figures (bench/render.py).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_info, render_all, write_json  # noqa: E402

from prl.evaluation.agreement import agreement  # noqa: E402
from prl.grading.verifier import verify_one  # noqa: E402
from prl.imports.run import ImportConfig, run_import  # noqa: E402
from prl.store.db import Store  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

CODE = ("bench/external.py", "prl/imports", "prl/grading", "prl/evaluation/agreement.py", "prl/data/datasets.py",
        "prl/data/benchmarks", "prl/store", "sql/schema.sql", "sql/queries.sql", "tests/data/external")
"""The code this benchmark measures: its results file records these paths (bench/common.py's write_json),
and ``python bench/render.py --check`` fails once one of them changes after the recorded commit."""
EXT = ROOT / "tests" / "data" / "external"

SETS = {
    "lighteval-saturn-1.5b": {
        "what": "Saturn-1.5B on AIME 2024, lighteval details (extractive_match)",
        "files": sorted((EXT / "lighteval-saturn-1.5b").glob("details_*.parquet")), "dataset": "aime24",
        "format": "lighteval", "fields": None, "published": ("the results JSON: extractive_match", None)},
    "amc-deepseek-r1-distill-qwen-1.5b": {
        "what": "DeepSeek-R1-Distill-Qwen-1.5B on AMC 2022+2023, a JSON list with per-row `correct`",
        "files": [EXT / "amc-json-deepseek-r1-distill-qwen-1.5b" / "amc_output.json"], "dataset": "amc23",
        "format": "json", "fields": "problem=question,response=generated_output,label=correct,gold=expected_expected_answer",
        "published": ("amc_metrics.json: ACC over all 83 rows", EXT / "amc-json-deepseek-r1-distill-qwen-1.5b" / "amc_metrics.json")},
    "qwen2.5-math-1.5b-r1zero": {
        "what": "Qwen2.5-Math-1.5B on MATH-500 with the R1-Zero prompt, JSONL with a format-gated grader",
        "files": [EXT / "jsonl-qwen2.5-math-1.5b-r1zero" / "results.jsonl"], "dataset": "math500", "format": "json",
        "fields": "problem=prompt,response=response,label=metrics.answer_reward,gold=ground_truth",
        "published": ("summary.jsonl: aggregate answer_reward", EXT / "jsonl-qwen2.5-math-1.5b-r1zero" / "summary.jsonl")},
}


def published(name: str) -> float | None:
    how, path = SETS[name]["published"]
    if path is None:
        return None  # in the source's own results file, read by the importer
    data = json.loads(path.read_text())
    return data["ACC"] if "ACC" in data else data["aggregate_metrics"]["answer_reward"]


def _source_row(ref: str) -> dict | None:
    """The source file's own row behind a sample (JSONL line / JSON array item), for the rules."""
    path, _, where = ref.rpartition(":") if ":" in ref else (ref, "", "")
    if where.strip().isdigit():  # FILE:LINE
        return json.loads(Path(path).read_text().splitlines()[int(where) - 1])
    if " item " in ref:
        file, _, item = ref.rpartition(": item ")
        return json.loads(Path(file).read_text())[int(item) - 1]
    return None


def cause(d: dict) -> str:
    row = _source_row(d["source_ref"] or "") or {}
    metrics = row.get("metrics") if isinstance(row.get("metrics"), dict) else {}
    if d["other_verdict"] == "wrong" and d["verdict"] == "correct":
        if metrics.get("format_reward") == 0.0:
            return "format_gate"
        if metrics.get("format_reward") == 1.0:
            return "their_strict_match"
        return "unexplained"
    if d["other_verdict"] == "correct" and d["verdict"] != "correct":
        final = d["extracted_answer"]
        if final is not None and verify_one("\\boxed{" + final + "}", d["gold"]).verdict != "correct":
            return "their_false_pass"
        return "our_false_negative"
    return "unexplained"


def measure(name: str, db: Path) -> dict:
    spec = SETS[name]
    run_id = name
    summary = run_import(ImportConfig(files=tuple(map(str, spec["files"])), dataset=spec["dataset"], db=str(db),
                                      run_id=run_id, format=spec["format"], fields=spec["fields"],
                                      reported_accuracy=published(name)), progress=False, log=lambda *_: None)
    res = agreement(Store(str(db), create=False), run_id)
    dis = []
    for d in res["disagreements"]:
        dis.append({"problem_id": d["problem_id"], "sample_idx": d["sample_idx"], "ours": d["verdict"],
                    "ours_answer": d["extracted_answer"], "theirs": d["other_verdict"], "theirs_answer": d["other_answer"],
                    "gold": d["gold"], "their_gold": (d.get("other_gold") or "")[:200], "source_ref":
                    Path(d["source_ref"].split(":")[0]).name + ":" + d["source_ref"].rsplit(":", 1)[-1].strip(),
                    "cause": cause(d), "response_tail": d["response"][-300:]})
    causes: dict[str, int] = {}
    for d in dis:
        causes[d["cause"]] = causes.get(d["cause"], 0) + 1
    return {"what": spec["what"], "dataset": spec["dataset"], "rows": summary["rows"],
            "rows_matched": summary["rows_matched"], "rows_unmatched": summary["rows_unmatched"],
            "samples": res["samples"], "ours_accuracy": res["ours_accuracy"], "theirs_accuracy": res["theirs_accuracy"],
            "published_accuracy": summary["reported_accuracy"], "published_how": spec["published"][0],
            "table": res["table"], "kappa": res["kappa"], "causes": causes, "disagreements": dis}


def main() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "external.duckdb"
        results = {"machine": machine_info(), "sets": {name: measure(name, db) for name in SETS}}
    write_json("external", results, code=CODE)
    for name, r in results["sets"].items():
        print(f"{name}: ours {r['ours_accuracy']:.4f} theirs {r['theirs_accuracy']:.4f} published "
              f"{r['published_accuracy']} table {r['table']} causes {r['causes']}")
    print("re-rendered " + ", ".join(p.name for p in render_all()))
    unexplained = sum(r["causes"].get("unexplained", 0) for r in results["sets"].values())
    if unexplained:
        print(f"{unexplained} disagreement(s) unexplained", file=sys.stderr)
    return results


if __name__ == "__main__":
    sys.exit(1 if sum(r["causes"].get("unexplained", 0) for r in main()["sets"].values()) else 0)
