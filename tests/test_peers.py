"""Peers' outputs, produced once by the peers themselves and committed with their provenance
(bench/peers.py), checked against the project's code in CI without installing the peers; and the
project's environment kept free of what the peers would change in it."""

from __future__ import annotations

import importlib.metadata
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


def test_the_project_keeps_the_antlr4_runtime_math_verify_needs():
    """verl's environment pulls omegaconf's antlr4-python3-runtime 4.9.3, which would silently swap the
    LaTeX parser latex2sympy2_extended generates for 4.13.2; the project's environment keeps 4.13.2 and
    parses LaTeX with it."""
    assert importlib.metadata.version("antlr4-python3-runtime") == "4.13.2"
    from math_verify import parse

    import sympy

    parsed = parse(r"$\frac{1}{2} + \sqrt{4}$")
    assert parsed and sympy.simplify(parsed[0] - sympy.Rational(5, 2)) == 0
