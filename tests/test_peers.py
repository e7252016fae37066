"""Peers' outputs, produced once by the peers themselves and committed with their provenance
(bench/peers.py), checked against the project's code in CI without installing the peers; and the
project's environment kept free of what the peers would change in it."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from pathlib import Path

import pytest
import torch

from prl_core.config import AlgorithmConfig
from prl_core.estimators import compute_advantages

FIXTURE = Path(__file__).parent / "data" / "peers" / "verl_grpo_small.json"


def test_prl_core_matches_verls_own_grpo_outputs():
    """verl 0.9.1's compute_grpo_outcome_advantage (loop and vectorised, with and without the std) on a
    committed batch; prl_core's GRPO, Dr.GRPO and PRL at eta = inf give the same advantages."""
    doc = json.loads(FIXTURE.read_text())
    assert doc["provenance"]["verl"] == "0.9.1"
    scores, index = torch.tensor(doc["scores"]), torch.tensor(doc["index"])
    mask = torch.arange(doc["L"]).unsqueeze(0) < torch.tensor(doc["lengths"]).unsqueeze(1)
    zeros = torch.zeros(mask.shape)

    def ours(**cfg):
        return compute_advantages(AlgorithmConfig(**cfg), scores, index, zeros, zeros, mask)

    verl = {k: torch.tensor(v) for k, v in doc["verl"].items()}
    assert verl["grpo_loop"].abs().sum() > 0  # a batch with mixed groups: something to compare
    torch.testing.assert_close(ours(estimator="grpo"), verl["grpo_loop"], rtol=0, atol=1e-5)
    torch.testing.assert_close(ours(estimator="grpo"), verl["grpo_vectorized"], rtol=0, atol=1e-5)
    torch.testing.assert_close(ours(estimator="dr_grpo"), verl["dr_grpo_loop"], rtol=0, atol=1e-5)
    torch.testing.assert_close(ours(estimator="prl", eta="inf", step_split="token"), verl["grpo_loop"], rtol=0,
                               atol=1e-5)


TRL_FIXTURE = Path(__file__).parent / "data" / "peers" / "trl_grpo_advantages.json"


def test_prl_core_matches_trls_own_grpo_advantages():
    """TRL 1.16's GRPOTrainer advantages of one real generation batch (80 completions of the tiny model, its
    rewards and groups as TRL formed them); prl_core's GRPO with TRL's eps (std + 1e-4) gives the same."""
    doc = json.loads(TRL_FIXTURE.read_text())
    assert doc["provenance"]["trl"] == "1.16.0" and doc["eps"] == 1e-4
    rewards, groups = torch.tensor(doc["rewards"]), torch.tensor(doc["group_index"])
    trl = torch.tensor(doc["advantages"])
    assert len(rewards) == len(groups) == len(trl) == 80 and trl.abs().sum() > 0  # mixed groups: something to compare
    mask = torch.ones(len(rewards), 1, dtype=torch.bool)
    zeros = torch.zeros(mask.shape)
    ours = compute_advantages(AlgorithmConfig(estimator="grpo", eps=doc["eps"]), rewards, groups, zeros, zeros, mask)
    torch.testing.assert_close(ours[:, 0], trl, rtol=0, atol=1e-5)


LIGHTEVAL_FIXTURE = Path(__file__).parent / "data" / "peers" / "lighteval_verdicts.json"
EXTERNAL = Path(__file__).parent / "data" / "external"


def _make_input():
    spec = importlib.util.spec_from_file_location("make_input", Path(__file__).parents[1] / "bench" / "peers" /
                                                  "lighteval" / "make_input.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_our_verifier_gives_lightevals_verdicts_where_both_read_the_boxed_answer():
    """lighteval 0.8.1's extractive_match, run once on the real outside responses and committed: on the 113
    AIME24 and AMC responses (no answer tags: both graders read the final boxed answer, the golds are
    integers) our verifier gives the same verdict on every row; and lighteval's verdicts are the Saturn
    file's own labels on its 30 rows (the right metric and release)."""
    from prl.data.datasets import normalize_gold
    from prl.grading.verifier import verify_one

    doc = json.loads(LIGHTEVAL_FIXTURE.read_text())
    assert doc["provenance"]["lighteval"] == "0.8.1"
    mi = _make_input()
    rows = mi.aime_rows(EXTERNAL / "lighteval-saturn-1.5b") + mi.amc_rows(EXTERNAL / "amc-json-deepseek-r1-distill-qwen-1.5b")
    assert len(rows) == 113
    dataset = {"aime24": "aime24", "amc": "amc23"}
    ours = {r["id"]: int(verify_one(r["response"], normalize_gold(dataset[r["source"]], r["gold"])).verdict == "correct")
            for r in rows}
    assert ours == {r["id"]: doc["lighteval"][r["id"]] for r in rows}
    assert 0 < sum(ours.values()) < len(ours)  # both verdicts occur: the comparison can fail
    aime = [r["id"] for r in rows if r["source"] == "aime24"]
    assert {i: doc["lighteval"][i] for i in aime} == {i: doc["file_labels"][i] for i in aime}


# Where our verifier and lighteval disagree on the 500 MATH-500 responses of the R1-Zero file (answers in
# <answer> tags, golds from the bundled math500), pinned by make_input.py's id: (ours, lighteval), 1 = correct.
# Each row is read in bench/external_review.json; who is wrong there, by that reading:
MATH500_DISAGREEMENTS = {
    "math500/3": (0, 1),    # number_theory/572 "there are 9 … divisors of 196": we read 196, our false fail
    "math500/8": (1, 0),    # algebra/2036 "… is 3√13 units": lighteval reads the points, its false fail
    "math500/56": (1, 0),   # algebra/769 "… finally, N = 11": lighteval reads S = N^2, its false fail
    "math500/58": (1, 0),   # algebra/722 "… 99^2+99+1 is 9901": lighteval reads 99^2, its false fail
    "math500/90": (0, 1),   # prealgebra/1761 "multiply 3/2, the reciprocal of 2/3": we read 2/3, our false fail
    "math500/203": (0, 1),  # intermediate_algebra/1555 <answer>11</answer>, gold 12: lighteval's false pass
    "math500/218": (1, 0),  # algebra/864 "… the midpoint is (−1, 6)": lighteval's false fail
    "math500/268": (1, 0),  # number_theory/466 a muddled sentence ending on 1: lighteval reads 9, its false fail
    "math500/363": (1, 0),  # algebra/251 "… Therefore, x = 2.": lighteval's false fail
    "math500/374": (1, 0),  # algebra/1303 "√64 is 8, and ∛64 is 4", asked their difference: our false pass
    "math500/395": (0, 1),  # algebra/114 <answer> <insert the answer here> </answer>: lighteval's false pass
    "math500/469": (1, 0),  # algebra/435 <answer>25</answer>: lighteval reads the 5 before it, its false fail
}


def test_our_verifier_and_lighteval_disagree_on_math500_exactly_where_pinned():
    """The MATH-500 rows the test above leaves out (answer tags: we read the tag, lighteval the whole
    response), pinned: our verifier and lighteval 0.8.1 disagree on exactly these 12 of 500, in these
    directions, every one is read by a person in bench/external_review.json, and bench/results/peers.json
    (the figures RESULTS shows) records these and no others. (An earlier run counted 16 with the verifier
    of its day: math500/207 ``C(8, 2) = 28`` left with the named-value fix, 31, 178, 191, 199 and 346 with
    the unequal-sides rule examining only the clause of the tag Math-Verify read, and 218 and 363,
    sentences that fix passes and lighteval fails, joined.)"""
    from prl.data.datasets import normalize_gold
    from prl.grading.verifier import verify_one

    doc = json.loads(LIGHTEVAL_FIXTURE.read_text())
    rows = _make_input().math500_rows(EXTERNAL / "jsonl-qwen2.5-math-1.5b-r1zero")
    assert len(rows) == 500
    ours = {r["id"]: int(verify_one(r["response"], normalize_gold("math500", r["gold"])).verdict == "correct") for r in rows}
    disagree = {i: (ours[i], doc["lighteval"][i]) for i in ours if ours[i] != doc["lighteval"][i]}
    assert disagree == MATH500_DISAGREEMENTS
    review = json.loads((Path(__file__).parents[1] / "bench" / "external_review.json").read_text())
    reviewed = {e["ref"] for e in review["rows"] if e["set"] == "qwen2.5-math-1.5b-r1zero"}
    assert {f"results.jsonl:{int(i.split('/')[1]) + 1}" for i in disagree} <= reviewed
    recorded = json.loads((Path(__file__).parents[1] / "bench" / "results" / "peers.json").read_text())
    recorded = recorded["verification"]["agreement"]["math500"]
    assert {d["id"]: (d["ours"], d["lighteval"]) for d in recorded["disagree"]} == MATH500_DISAGREEMENTS
    assert (recorded["ours_correct"], recorded["lighteval_correct"], recorded["agree"]) == (
        sum(ours.values()), sum(doc["lighteval"][i] for i in ours), 500 - len(MATH500_DISAGREEMENTS))


def test_the_project_keeps_the_antlr4_runtime_math_verify_needs():
    """verl's environment pulls omegaconf's antlr4-python3-runtime 4.9.3, which would silently swap the
    LaTeX parser latex2sympy2_extended generates for 4.13.2; the project's environment keeps 4.13.2 and
    parses LaTeX with it."""
    assert importlib.metadata.version("antlr4-python3-runtime") == "4.13.2"
    from math_verify import parse

    import sympy

    parsed = parse(r"$\frac{1}{2} + \sqrt{4}$")
    assert parsed and sympy.simplify(parsed[0] - sympy.Rational(5, 2)) == 0
