"""bench/external.py's classification of outside samples against a person's reading
(bench/external_review.json), on real rows of tests/data/external/: each grader's verdict is checked
against the reading's truth, so a false pass or a false fail can be ours as well as theirs.

Each outcome occurs here on a real sample, scored by the real verifier; the truth comes from the
review, which the code under test did not write.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from prl.data.datasets import normalize_gold
from prl.grading.verifier import verify_one

ROOT = Path(__file__).resolve().parents[1]
MATH500 = "qwen2.5-math-1.5b-r1zero"
AMC = "amc-deepseek-r1-distill-qwen-1.5b"


@pytest.fixture(scope="module")
def external():
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("bench_external", ROOT / "bench" / "external.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def source_rows(external):
    """The outside rows as make_input.py reads them (response, gold, the source's label), by source reference."""
    spec = importlib.util.spec_from_file_location("make_input", ROOT / "bench" / "peers" / "lighteval" / "make_input.py")
    mi = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mi)
    ext = ROOT / "tests" / "data" / "external"
    rows = mi.amc_rows(ext / "amc-json-deepseek-r1-distill-qwen-1.5b") + mi.math500_rows(ext / "jsonl-qwen2.5-math-1.5b-r1zero")
    return {external.ref_key(r["ref"]): r for r in rows}


def _scored(row: dict, folder: str, dataset: str) -> dict:
    """One sample as bench/external.py reads it from the store (agreement_with_source), scored by our verifier now."""
    gold = normalize_gold(dataset, row["gold"])
    v = verify_one(row["response"], gold)
    return {"problem_id": row["id"], "sample_idx": 0, "gold": gold, "response": row["response"], "verdict": v.verdict,
            "extracted_answer": v.extracted, "verdict_detail": v.detail, "source_label": row["label"],
            "source_ref": str(ROOT / "tests" / "data" / "external" / folder / row["ref"].replace(": ", ":"))}


# source row → the outcomes the reading gives each grader that is wrong (None: that grader is right)
CASES = {
    (MATH500, "results.jsonl:375"): {"ours": "false_pass"},  # algebra/1303: "… the cube root of 64 is 4", read as 4
    (MATH500, "results.jsonl:177"): {"ours": "false_pass", "lighteval": "false_pass"},  # number_theory/598: 0.00006768
    (MATH500, "results.jsonl:4"): {"ours": "false_fail", "theirs": "false_fail"},  # "9 … divisors of 196", read as 196
    (MATH500, "results.jsonl:406"): {"ours": "false_fail", "theirs": "false_fail", "lighteval": "false_fail"},
    (MATH500, "results.jsonl:56"): {"theirs": "false_fail"},  # strict match: "Hence, the degree of $f$ is 3."
    (MATH500, "results.jsonl:186"): {"theirs": "false_fail"},  # format gate: \boxed{1}, no <answer> tag
    (MATH500, "results.jsonl:204"): {"lighteval": "false_pass"},  # <answer>11</answer>; the remainder is 12
    (MATH500, "results.jsonl:470"): {"lighteval": "false_fail"},  # <answer>25</answer>; lighteval reads the 5 before it
    (AMC, "amc_output.json:item 52"): {"theirs": "false_pass"},  # amc23/10: \boxed{\dfrac{1}{7}}, gold 1
}


def test_each_outcome_occurs_and_can_blame_us(external, source_rows):
    """Our false pass, our false fail, their false pass and fail (format gate, strict match) and
    lighteval's false pass and fail each occur on a real sample, read against the review's truth."""
    review, lighteval = external.load_review(), external.lighteval_verdicts()
    folders = {MATH500: ("jsonl-qwen2.5-math-1.5b-r1zero", "math500"), AMC: ("amc-json-deepseek-r1-distill-qwen-1.5b", "amc23")}
    seen = {g: set() for g in external.GRADERS}
    for (name, ref), expected in CASES.items():
        row = _scored(source_rows[ref], *folders[name])
        result = external.classify(name, [row], lighteval, review)
        assert not result["unreviewed"] and not result["inconsistent"], (ref, result)
        (read,) = result["read"]
        assert read["outcomes"] == expected, (ref, read["outcomes"], read["note"])
        for g, o in expected.items():
            seen[g].add(o)
        if expected.get("theirs") == "false_fail":
            assert read["their_mechanism"] == {"results.jsonl:56": "strict_match"}.get(ref, "format_gate"), ref
    assert seen == {"ours": {"false_pass", "false_fail"}, "theirs": {"false_pass", "false_fail"},
                    "lighteval": {"false_pass", "false_fail"}}


def test_a_disagreement_nobody_read_fails_the_bench(external, source_rows):
    """A sample that needs reading and has no review entry is `unreviewed`, and the bench reports it."""
    row = _scored(source_rows["results.jsonl:375"], "jsonl-qwen2.5-math-1.5b-r1zero", "math500")
    result = external.classify(MATH500, [row], external.lighteval_verdicts(), {})
    assert [d["source_ref"] for d in result["unreviewed"]] == ["results.jsonl:375"] and not result["read"]
    assert all(v == 0 for c in result["counts"].values() for v in c.values())
    problems = external.problems({"sets": {MATH500: {**result, "timeouts_or_errors": []}}})
    assert len(problems) == 1 and "needs reading" in problems[0] and "results.jsonl:375" in problems[0]


def test_every_review_entry_agrees_with_itself(external):
    """Each entry's final answer, boxed and verified against the gold, gives its truth (no final answer: wrong);
    a transcription that contradicts its truth is caught (the check is not vacuous)."""
    review = external.load_review()
    assert len(review) >= 126 and {e["truth"] for e in review.values()} == {"correct", "wrong"}
    bad = [key for key, e in review.items() if not external.consistent(e, e["gold"])]
    assert bad == []
    entry = review[(MATH500, "results.jsonl:375")]
    assert entry["final_answer"] is None and entry["truth"] == "wrong"
    assert not external.consistent({**entry, "truth": "correct"}, entry["gold"])
    assert not external.consistent({"final_answer": "196", "truth": "correct"}, "9")
