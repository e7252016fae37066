"""Write the input of bench/peers/lighteval/verify.py: the three outside generation sets of
shared/data/external/ (sources in its README) as one JSON-lines file, one response per row.

    .venv/bin/python bench/peers/lighteval/make_input.py OUT.jsonl [--external DIR]

    --external DIR  the folder with lighteval-saturn-1.5b/, amc-json-deepseek-r1-distill-qwen-1.5b/ and
                    jsonl-qwen2.5-math-1.5b-r1zero/ (default: tests/data/external, the copies committed with their sources).

Rows: {"id", "response", "gold", "source", "label", "ref"} (+ "gold_solution" on MATH-500 rows), 613 in all:

    aime24/<i>   30, lighteval details Parquet: response = predictions[0], gold = gold[0] (the data set's answer),
                 label = metrics.extractive_match (lighteval's own score, the provenance check of verify.py),
                 source_extracted = specifics.{extracted_predictions, extracted_golds} (what lighteval extracted).
    amc/<i>      83, the JSON list: response = generated_output, gold = expected_expected_answer (a JSON number;
                 written as an integer when it is one, 142.0 -> "142"), label = correct (true/false -> 1/0).
    math500/<i>  500, the JSONL: response, label = metrics.answer_reward (a grader that scores 0 unless the answer
                 sits in <answer> tags). The file's ground_truth is the full reference solution; gold is the
                 short answer of the bundled prl/data/benchmarks/math500.jsonl row with that same solution
                 (checked: the same row also has the problem text of the prompt), gold_solution the full text.

<i> is the row's 0-based position in its file. Read as prl/imports/formats.py reads these files (bench/external.py
gives the field mapping), with pyarrow for the Parquet; the repository's own venv has it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_EXTERNAL = ROOT / "tests" / "data" / "external"  # the repo's copies of ../shared/data/external (sources in its README)
MATH500 = ROOT / "prl" / "data" / "benchmarks" / "math500.jsonl"


def _label(value) -> int | None:
    if value is None:
        return None
    return int(float(value) > 0.5)


def _gold_number(value) -> str:
    if isinstance(value, bool):
        raise ValueError(f"gold {value!r} is not a number")
    if isinstance(value, (int, float)):
        return str(int(value)) if float(value).is_integer() else repr(float(value))
    return str(value)


def aime_rows(folder: Path) -> list[dict]:
    import pyarrow.parquet as pq

    (path,) = sorted(folder.glob("details_*.parquet"))
    rows = []
    for i, r in enumerate(pq.read_table(path).to_pylist()):
        preds, gold = r["predictions"], r["gold"]
        assert len(preds) == 1 and len(gold) == 1, f"{path}: row {i + 1}: expected one prediction and one gold"
        spec = r.get("specifics") or {}
        rows.append({"id": f"aime24/{i}", "response": preds[0], "gold": gold[0], "source": "aime24",
                     "label": _label(r["metrics"]["extractive_match"]), "ref": f"{path.name}: row {i + 1}",
                     "source_extracted": {"predictions": spec.get("extracted_predictions"),
                                          "golds": spec.get("extracted_golds")}})
    return rows


def amc_rows(folder: Path) -> list[dict]:
    path = folder / "amc_output.json"
    rows = []
    for i, r in enumerate(json.loads(path.read_text(encoding="utf-8"))):
        assert isinstance(r["correct"], bool), f"{path}: item {i + 1}: correct is not a JSON boolean"
        rows.append({"id": f"amc/{i}", "response": r["generated_output"], "gold": _gold_number(r["expected_expected_answer"]),
                     "source": "amc", "label": int(r["correct"]), "ref": f"{path.name}: item {i + 1}"})
    return rows


_PROMPT_PROBLEM = re.compile(r"\nUser: (.*)\nAssistant: <think>\s*\Z", re.S)  # the R1-Zero prompt of that file


def math500_rows(folder: Path) -> list[dict]:
    path = folder / "results.jsonl"
    bundled = [json.loads(line) for line in MATH500.read_text(encoding="utf-8").splitlines() if line.strip()]
    by_solution = {b["solution"]: b for b in bundled}
    assert len(by_solution) == len(bundled), f"{MATH500}: solutions are not unique"
    rows = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        r = json.loads(line)
        b = by_solution.get(r["ground_truth"])
        if b is None:
            raise SystemExit(f"{path}:{i + 1}: ground_truth matches no solution in {MATH500}")
        m = _PROMPT_PROBLEM.search(r["prompt"])
        if m is None or m.group(1) != b["problem"]:
            raise SystemExit(f"{path}:{i + 1}: the prompt's problem is not that of the row with this solution")
        rows.append({"id": f"math500/{len(rows)}", "response": r["response"], "gold": b["answer"], "source": "math500",
                     "label": _label(r["metrics"]["answer_reward"]), "ref": f"{path.name}:{i + 1}",
                     "gold_solution": r["ground_truth"], "unique_id": b["unique_id"]})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--external", type=Path, default=DEFAULT_EXTERNAL)
    args = ap.parse_args(argv)
    ext = args.external
    rows = (aime_rows(ext / "lighteval-saturn-1.5b") + amc_rows(ext / "amc-json-deepseek-r1-distill-qwen-1.5b")
            + math500_rows(ext / "jsonl-qwen2.5-math-1.5b-r1zero"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    counts = {}
    for row in rows:
        counts[row["source"]] = counts.get(row["source"], 0) + 1
    print(f"wrote {args.out}: {len(rows)} rows {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
