"""The verifier: every verdict category, hard limits in the pool, pool == sequential (issue 4, WIP)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prl.data import synthetic
from prl.grading.verifier import VerifierPool, verify_one

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "response, gold, verdict",
    [
        ("so \\boxed{4.5\\times10^{33}}", "4.5 \\times 10^{33}", "correct"),  # minerva e-notation, normalised
        ("\\boxed{\\frac{1}{2}}", "0.5", "correct"),
        ("\\boxed{3}", "2", "wrong"),
        ("I am not sure.", "2", "no_answer"),
        ("", "2", "no_answer"),
        ("\\boxed{2}", "", "gold_unparsable"),
        ("\\boxed{2}", "}{", "gold_unparsable"),
        ("\\boxed{__import__('os').system('touch /tmp/prl_pwned')}", "2", "wrong"),
    ],
)
def test_each_verdict(response, gold, verdict):
    v = verify_one(response, gold)
    assert v.verdict == verdict, v
    assert v.score == (1.0 if verdict == "correct" else 0.0)
    assert not Path("/tmp/prl_pwned").exists()


CASES = [("so \\boxed{4.5\\times10^{33}}", "4.5 \\times 10^{33}"), ("\\boxed{\\frac{1}{2}}", "0.5"),
         ("\\boxed{3}", "2"), ("I am not sure.", "2"), ("\\boxed{2}", "2"), ("\\boxed{2}", "}{"), ("\\boxed{2}", "")]


def test_gold_cache_keeps_parsed_golds_and_changes_no_verdict():
    cache: dict = {}
    cached = [verify_one(r, g, gold_cache=cache).verdict for r, g in CASES + CASES]
    assert cached == [verify_one(r, g).verdict for r, g in CASES + CASES]
    assert set(cache) == {"4.5 \\times 10^{33}", "0.5", "2"}  # unparsable golds are not kept
    # The cache is what is consulted: a gold whose kept parse is "3" now accepts 3.
    seeded: dict = {}
    verify_one("\\boxed{3}", "3", gold_cache=seeded)  # parses the gold "3"
    cache["2"] = seeded["3"]
    assert verify_one("\\boxed{3}", "2", gold_cache=cache).verdict == "correct"


def test_gold_queue_keeps_each_worker_on_its_gold_and_all_workers_busy():
    from prl.grading.verifier import _GoldQueue

    pairs = [(f"r{i}", g) for i, g in enumerate("AAABBBC")]
    q = _GoldQueue(list(range(7)), pairs, workers=2)
    order = [(w, pairs[q.pop(w)][1]) for w in (0, 1, 0, 1, 0, 1, 0)]
    assert order == [(0, "A"), (1, "B"), (0, "A"), (1, "B"), (0, "A"), (1, "B"), (0, "C")]
    assert not q
    one_gold = _GoldQueue([0, 1, 2], [("x", "A")] * 3, workers=2)
    assert [one_gold.pop(w) for w in (0, 1, 0)] == [0, 1, 2]  # a lone gold still feeds both workers


# ─── Math-Verify's reported false positives and negatives: our policy for each ─────────────

def test_unequal_sides_do_not_pass_fixed_in_our_layer():
    """docs/architecture.md §Verdicts and Math-Verify records Math-Verify passing ``\\boxed{x = 1 = 2}``
    against 2 (it reads the last side).
    Policy: a boxed equation whose symbol-free sides differ answers nothing: wrong, saying why."""
    from math_verify import parse, verify

    assert verify(parse("\\boxed{2}"), parse("\\boxed{x = 1 = 2}"))  # Math-Verify alone passes it
    for response in ("\\boxed{x = 1 = 2}", "\\boxed{1 = 2}"):
        v = verify_one(response, "2")
        assert v.verdict == "wrong" and "chain of unequal sides" in v.detail
    # equal sides and a variable named with its value still pass
    for response in ("\\boxed{x = 2}", "\\boxed{x = 2 = \\frac{4}{2}}", "\\boxed{2}"):
        assert verify_one(response, "2").verdict == "correct", response
    assert verify_one("\\boxed{x \\le 2}", "x \\le 2").verdict == "correct"


def test_numeric_tolerance_between_exact_numbers_fixed_in_our_layer():
    """Math-Verify #14: ``1/2006!`` equals ``1/2004!`` (numbers compared to 6 decimals). Policy: exact
    rationals must be equal exactly; decimals keep the tolerance, and 50% ≡ 50 stays Math-Verify's reading."""
    from math_verify import parse, verify

    assert verify(parse("\\boxed{\\frac{1}{2004!}}"), parse("\\boxed{\\frac{1}{2006!}}"))  # its false positive
    v = verify_one("\\boxed{\\frac{1}{2006!}}", "\\frac{1}{2004!}")
    assert v.verdict == "wrong" and "issue #14" in v.detail
    assert verify_one("\\boxed{\\frac{1}{2004!}}", "\\frac{1}{2004!}").verdict == "correct"
    assert verify_one("\\boxed{\\frac{2}{2\\cdot 2004!}}", "\\frac{1}{2004!}").verdict == "correct"
    for response, gold in (("\\boxed{0.75}", "\\frac{3}{4}"), ("\\boxed{50\\%}", "50"), ("\\boxed{50\\%}", "\\frac12"),
                           ("\\boxed{2^{10}}", "1024"), ("\\boxed{10^{100000}}", "10^{100000}")):
        assert verify_one(response, gold).verdict == "correct", (response, gold)


def test_markdown_bold_answers_are_read_math_verify_76():
    """Math-Verify #76 (``**73**``, answers in markdown bold): this version reads them; policy: correct,
    and the answer shown is the number, not the markup."""
    for response in ("The answer is **73**", "So the final answer is **73**."):
        v = verify_one(response, "73")
        assert (v.verdict, v.extracted) == ("correct", "73"), response


def test_dfrac_and_tfrac_golds_equal_frac_math_verify_70():
    """Math-Verify #70 (``\\dfrac`` golds): with this version every spelling of a fraction matches."""
    for response, gold in (("\\boxed{\\frac{3}{4}}", "\\dfrac{3}{4}"), ("\\boxed{\\dfrac34}", "\\frac{3}{4}"),
                           ("\\boxed{\\tfrac{3}{4}}", "\\dfrac{3}{4}"), ("\\boxed{0.75}", "\\dfrac{3}{4}")):
        assert verify_one(response, gold).verdict == "correct", (response, gold)
    assert verify_one("\\boxed{\\dfrac{3}{5}}", "\\dfrac{3}{4}").verdict == "wrong"


def test_the_generic_gold_normalisation_applies_without_a_dataset(capsys):
    """e-notation golds are normalised for every data set: prl verify needs no --dataset for it."""
    import json

    from prl_cli.main import main

    assert main(["verify", "--gold", "4.5e33", "--response", "\\boxed{4.5\\times10^{33}}"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "correct" and out["gold_normalized"] == "4.5 \\times 10^{33}"
    from prl.data.datasets import normalize_gold

    for dataset in ("math500", "aime24", "my_file", "olympiad_bench"):
        assert normalize_gold(dataset, "$4.5e33$" if dataset != "olympiad_bench" else ["$4.5e33$"]) == "4.5 \\times 10^{33}"


def test_fractional_timeouts_are_refused():
    with pytest.raises(ValueError, match="^timeout_s"):
        verify_one("\\boxed{1}", "1", timeout_s=0.5)


def test_pool_matches_sequential_and_caches():
    records = synthetic.generate("test", 30)
    pairs = []
    for r in records:
        pairs += [(r["solution"], r["answer"]), (f"\\boxed{{{int(r['answer']) + 1}}}", r["answer"]),
                  ("no idea", r["answer"]), (r["solution"], r["answer"])]  # repeats, as real samples have
    sequential = [verify_one(resp, gold).verdict for resp, gold in pairs]
    with VerifierPool(2) as pool:
        pooled = [v.verdict for v in pool.verify(pairs)]
        assert pool.stats["cache_hits"] >= 30
    assert pooled == sequential
    assert sequential.count("correct") == 60 and sequential.count("no_answer") == 30


def test_poisoned_responses_cost_only_their_own_verdict():
    nested = "\\boxed{" + "{" * 10000 + "1" + "}" * 10000 + "}"
    pairs = [("\\boxed{2}", "2"), ("\\boxed{9^{9^{9^9}}}", "2"), (nested, "1"), ("\\boxed{5}", "2")]
    t0 = time.monotonic()
    with VerifierPool(2, wall_s=3) as pool:
        out = pool.verify(pairs)
    assert time.monotonic() - t0 < 30
    assert out[0].verdict == "correct" and out[3].verdict == "wrong"
    assert out[1].verdict in ("timeout", "wrong", "error") and out[2].verdict in ("timeout", "wrong", "error", "correct")


def test_verify_cli_explains_a_verdict():
    r = subprocess.run([sys.executable, "-m", "prl_cli", "verify", "--dataset", "minerva_math",
                        "--gold", "The mass is $\\boxed{4.5e33}$ g", "--response", "It is \\boxed{4.5\\times10^{33}}"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["verdict"] == "correct" and out["gold_normalized"] == "4.5 \\times 10^{33}"
    assert out["extracted_answer"] == "4.5\\times10^{33}"


def test_an_answer_tag_without_a_box_is_the_answer():
    """A real R1-Zero response (tests/data/external/jsonl-qwen2.5-math-1.5b-r1zero, MATH-500
    test/algebra/435, gold 25) writes 5 in its reasoning and <answer>25</answer>: Math-Verify alone reads 5."""
    import json
    from pathlib import Path

    from math_verify import parse, verify

    path = Path(__file__).parent / "data" / "external" / "jsonl-qwen2.5-math-1.5b-r1zero" / "results.jsonl"
    row = next(r for r in map(json.loads, path.read_text().splitlines()) if "ceil" in r["prompt"] and "sqrt{20}" in r["prompt"])
    response = row["response"]
    assert "<answer>25</answer>" in response and "\\boxed" not in response
    assert not verify(parse("\\boxed{25}"), parse(response))  # the false negative Math-Verify alone gives
    v = verify_one(response, "25")
    assert (v.verdict, v.extracted) == ("correct", "25")
    # a tag whose content is no answer is no answer, whatever numbers the reasoning has
    assert verify_one("so x = 0.35625 </think> <answer> Yes, the answer is correct. </answer>", ".35625").verdict == "no_answer"
    assert verify_one("\\boxed{3} then <answer>4</answer>", "3").verdict == "correct"  # a box wins over a tag
