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


def test_the_project_keeps_the_antlr4_runtime_math_verify_needs():
    """verl's environment pulls omegaconf's antlr4-python3-runtime 4.9.3, which would silently swap the
    LaTeX parser latex2sympy2_extended generates for 4.13.2; the project's environment keeps 4.13.2 and
    parses LaTeX with it."""
    assert importlib.metadata.version("antlr4-python3-runtime") == "4.13.2"
    from math_verify import parse

    import sympy

    parsed = parse(r"$\frac{1}{2} + \sqrt{4}$")
    assert parsed and sympy.simplify(parsed[0] - sympy.Rational(5, 2)) == 0
