"""Published numbers, reproduced sample by sample: the three outside generation sets of
tests/data/external/ (sources in its README) imported with ``prl import``, scored by our verifier,
compared with each source's own per-row labels and the accuracy its authors published.

The target is not to match their number but to explain every difference, and either side can be
the one that is wrong. Three graders score each sample: ours, the source's own label ("theirs") and
lighteval 0.8.1's extractive_match (run once on the same responses by bench/peers.py and committed
as tests/data/peers/lighteval_verdicts.json). A sample is **read by a person** when

    ours ≠ theirs                        a disagreement with the source
    ours ≠ lighteval                     a disagreement the source's label does not show (both of us may
                                         be wrong where the source's grader is strict, as on MATH-500)
    our layer overrode Math-Verify       the unequal-sides or exact-number rule turned a pass into `wrong`

and bench/external_review.json holds what the reading found: the response's final answer for this
problem, and whether it is the gold (``truth``), with a note where it is not plain. Each grader's
verdict is then checked against that truth, which the code under test did not produce:

    our_false_pass    ours correct, the final answer is not the gold
    our_false_fail    ours wrong, the final answer is the gold
    their_false_pass / their_false_fail, lighteval_false_pass / lighteval_false_fail   the same for them;
                      a false fail of theirs on MATH-500 is also named by its mechanism, from the source
                      row: format_gate (format_reward 0: no "</think> <answer>…</answer>") or strict_match
                      (format passed, the tag's whole content is not the gold string)

Zero is a count like any other. The bench fails (exit 1) when a sample that needs reading has no
entry in the review (``unreviewed``), or when an entry contradicts itself: its final answer, boxed
and verified against the gold, does not give its truth (``inconsistent``: a misread transcription), or
when a sample got ``timeout`` or ``error`` (the wall-clock kill fires on a loaded machine: such a verdict
says nothing about the answer; rerun).
Samples all three graders agree on, with no rule of ours involved, are not read.

    python bench/external.py

Writes bench/results/external.json and re-renders the figures (bench/render.py).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import machine_info, render_all, write_json  # noqa: E402

from prl.evaluation.agreement import agreement  # noqa: E402
from prl.grading.verifier import verify_one  # noqa: E402
from prl.imports.formats import label_correct  # noqa: E402
from prl.imports.run import ImportConfig, run_import  # noqa: E402
from prl.store.db import Store  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

CODE = ("bench/external.py", "prl/imports", "prl/grading", "prl/evaluation/agreement.py", "prl/data/datasets.py",
        "prl/data/benchmarks", "prl/store", "sql/schema.sql", "sql/queries.sql", "tests/data/external")
"""The code this benchmark measures: its results file records these paths (bench/common.py's write_json),
and ``python bench/render.py --check`` fails once one of them changes after the recorded commit."""
EXT = ROOT / "tests" / "data" / "external"
REVIEW = HERE / "external_review.json"
LIGHTEVAL = ROOT / "tests" / "data" / "peers" / "lighteval_verdicts.json"

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

GRADERS = ("ours", "theirs", "lighteval")
OUTCOMES = ("false_pass", "false_fail")
OUR_RULES = ("chain of unequal sides", "numeric tolerance equated")  # verdict_detail of false_pass() in the verifier


def published(name: str) -> float | None:
    how, path = SETS[name]["published"]
    if path is None:
        return None  # in the source's own results file, read by the importer
    data = json.loads(path.read_text())
    return data["ACC"] if "ACC" in data else data["aggregate_metrics"]["answer_reward"]


def ref_key(ref: str) -> str:
    """A source row reference without its folder: ``results.jsonl:4``, ``amc_output.json:item 52``, ``details_….parquet:row 3``."""
    head, _, tail = ref.rpartition(":")
    return f"{Path(head).name}:{tail.strip()}"


def _source_row(ref: str) -> dict | None:
    """The source file's own row behind a sample (JSONL line / JSON array item), for the mechanism of their verdict."""
    path, _, where = ref.rpartition(":")
    if where.strip().isdigit():  # FILE:LINE
        return json.loads(Path(path).read_text().splitlines()[int(where) - 1])
    if where.strip().startswith("item "):
        return json.loads(Path(path).read_text())[int(where.split()[-1]) - 1]
    return None


def their_mechanism(ref: str) -> str | None:
    """Why the source's grader scored 0, where its row says: the R1-Zero file's format_reward."""
    row = _source_row(ref) or {}
    metrics = row.get("metrics") if isinstance(row.get("metrics"), dict) else {}
    return {0.0: "format_gate", 1.0: "strict_match"}.get(metrics.get("format_reward"))


def lighteval_verdicts() -> dict[str, bool]:
    """lighteval 0.8.1's verdict on each outside response, by source row reference (``ref_key``)."""
    spec = importlib.util.spec_from_file_location("make_input", HERE / "peers" / "lighteval" / "make_input.py")
    mi = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mi)
    rows = (mi.aime_rows(EXT / "lighteval-saturn-1.5b") + mi.amc_rows(EXT / "amc-json-deepseek-r1-distill-qwen-1.5b")
            + mi.math500_rows(EXT / "jsonl-qwen2.5-math-1.5b-r1zero"))
    doc = json.loads(LIGHTEVAL.read_text())
    return {ref_key(r["ref"]): doc["lighteval"][r["id"]] == 1 for r in rows}


def load_review(path: Path = REVIEW) -> dict[tuple[str, str], dict]:
    """The reading of each sample that needed one: (set, source row reference) → {final_answer, truth, note, …}."""
    doc = json.loads(path.read_text())
    out = {}
    for i, e in enumerate(doc["rows"], 1):
        if e.get("truth") not in ("correct", "wrong"):
            raise SystemExit(f"{path}: rows[{i}] ({e.get('set')} {e.get('ref')}): truth must be 'correct' or 'wrong', "
                             f"got {e.get('truth')!r}")
        key = (e["set"], e["ref"])
        if key in out:
            raise SystemExit(f"{path}: rows[{i}]: {key} is reviewed twice")
        out[key] = e
    return out


def outcome(says_correct: bool | None, truth: str) -> str | None:
    """A grader's verdict against the truth of the reading: ``false_pass``, ``false_fail`` or None (right, or no verdict)."""
    if says_correct is None:
        return None
    if says_correct and truth == "wrong":
        return "false_pass"
    if not says_correct and truth == "correct":
        return "false_fail"
    return None


def consistent(entry: dict, gold: str) -> bool:
    """Whether a review entry agrees with itself: no final answer means wrong; a final answer, boxed and
    verified against the gold, gives the entry's truth (a check on the transcription, not the truth)."""
    if entry.get("final_answer") is None:
        return entry["truth"] == "wrong"
    return (verify_one("\\boxed{" + entry["final_answer"] + "}", gold).verdict == "correct") == (entry["truth"] == "correct")


def classify(name: str, rows: list[dict], lighteval: dict[str, bool], review: dict[tuple[str, str], dict]) -> dict:
    """Every sample of set ``name`` that needs reading, each grader's verdict against the reading's truth, and the counts."""
    counts = {g: dict.fromkeys(OUTCOMES, 0) for g in GRADERS}
    mechanisms: dict[str, int] = {}
    read, unreviewed, inconsistent, used = [], [], [], set()
    for r in rows:
        ref = ref_key(r["source_ref"] or "")
        says = {"ours": r["verdict"] == "correct", "theirs": bool(label_correct(r["source_label"])),
                "lighteval": lighteval.get(ref)}
        why = [w for w, hit in (("ours ≠ theirs", says["ours"] != says["theirs"]),
                                ("ours ≠ lighteval", says["lighteval"] is not None and says["ours"] != says["lighteval"]),
                                ("our rule overrode Math-Verify", any(s in (r["verdict_detail"] or "") for s in OUR_RULES)))
               if hit]
        if not why:
            continue
        entry = review.get((name, ref))
        base = {"problem_id": r["problem_id"], "sample_idx": r["sample_idx"], "source_ref": ref, "gold": r["gold"],
                "ours": r["verdict"], "ours_answer": r["extracted_answer"], "ours_detail": r["verdict_detail"] or "",
                "theirs": "correct" if says["theirs"] else "wrong",
                "lighteval": None if says["lighteval"] is None else "correct" if says["lighteval"] else "wrong",
                "why_read": why, "response_tail": r["response"][-300:]}
        if entry is None:
            unreviewed.append(base)
            continue
        used.add(ref)
        if not consistent(entry, r["gold"]):
            inconsistent.append({**base, "final_answer": entry.get("final_answer"), "truth": entry["truth"]})
        found = {g: outcome(says[g], entry["truth"]) for g in GRADERS}
        for g, o in found.items():
            if o:
                counts[g][o] += 1
        mechanism = their_mechanism(r["source_ref"] or "") if found["theirs"] == "false_fail" else None
        if mechanism:
            mechanisms[mechanism] = mechanisms.get(mechanism, 0) + 1
        read.append({**base, "final_answer": entry.get("final_answer"), "truth": entry["truth"],
                     "note": entry.get("note", ""), "outcomes": {g: o for g, o in found.items() if o},
                     "their_mechanism": mechanism})
    unused = sorted(ref for s, ref in review if s == name and ref not in used)
    return {"read": read, "counts": counts, "their_false_fail_by_mechanism": mechanisms,
            "unreviewed": unreviewed, "inconsistent": inconsistent, "review_unused": unused}


def measure(name: str, db: Path, lighteval: dict[str, bool], review: dict) -> dict:
    spec = SETS[name]
    summary = run_import(ImportConfig(files=tuple(map(str, spec["files"])), dataset=spec["dataset"], db=str(db),
                                      run_id=name, format=spec["format"], fields=spec["fields"],
                                      reported_accuracy=published(name)), progress=False, log=lambda *_: None)
    store = Store(str(db), create=False)
    res = agreement(store, name)
    rows = [r for r in store.records("agreement_with_source", run_id=name) if r["source_label"] is not None]
    return {"what": spec["what"], "dataset": spec["dataset"], "rows": summary["rows"],
            "rows_matched": summary["rows_matched"], "rows_unmatched": summary["rows_unmatched"],
            "samples": res["samples"], "ours_accuracy": res["ours_accuracy"], "theirs_accuracy": res["theirs_accuracy"],
            "lighteval_accuracy": sum(lighteval[ref_key(r["source_ref"])] for r in rows) / len(rows),
            "published_accuracy": summary["reported_accuracy"], "published_how": spec["published"][0],
            "table": res["table"], "kappa": res["kappa"],
            "timeouts_or_errors": [{"source_ref": ref_key(r["source_ref"]), "problem_id": r["problem_id"],
                                    "verdict": r["verdict"], "detail": r["verdict_detail"]}
                                   for r in rows if r["verdict"] in ("timeout", "error")],
            **classify(name, rows, lighteval, review)}


def problems(results: dict) -> list[str]:
    """What makes the bench fail: samples needing a reading that have none, review entries that contradict themselves."""
    out = []
    for name, r in results["sets"].items():
        out += [f"{name} {d['source_ref']} ({d['problem_id']}): {d['verdict']} ({d['detail']}): a verdict of the machine's "
                "load, not of the verifier; rerun on a quieter machine" for d in r["timeouts_or_errors"]]
        out += [f"{name} {d['source_ref']} ({d['problem_id']}): needs reading ({', '.join(d['why_read'])}), "
                f"not in {REVIEW.name}" for d in r["unreviewed"]]
        out += [f"{name} {d['source_ref']} ({d['problem_id']}): the review's final answer {d['final_answer']!r} does "
                f"not verify as {d['truth']} against the gold {d['gold']!r}" for d in r["inconsistent"]]
    return out


def main() -> dict:
    lighteval, review = lighteval_verdicts(), load_review()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "external.duckdb"
        results = {"machine": machine_info(), "review": str(REVIEW.relative_to(ROOT)),
                   "lighteval_verdicts": str(LIGHTEVAL.relative_to(ROOT)),
                   "sets": {name: measure(name, db, lighteval, review) for name in SETS}}
    write_json("external", results, code=CODE)
    for name, r in results["sets"].items():
        print(f"{name}: ours {r['ours_accuracy']:.4f} theirs {r['theirs_accuracy']:.4f} lighteval "
              f"{r['lighteval_accuracy']:.4f} published {r['published_accuracy']} table {r['table']}; read "
              f"{len(r['read'])}: {r['counts']} their false fails by mechanism {r['their_false_fail_by_mechanism']}")
    print("re-rendered " + ", ".join(p.name for p in render_all()))
    for p in problems(results):
        print(p, file=sys.stderr)
    return results


if __name__ == "__main__":
    sys.exit(1 if problems(main()) else 0)
