"""The estimator registry: one signature, each entry equal to its definition."""

from __future__ import annotations

import math

import pytest
import torch

from prl_core import ESTIMATORS, AlgorithmConfig, compute_advantages, get_estimator, group_advantages, prl_advantages, step_boundaries


@pytest.fixture
def batch():
    gen = torch.Generator().manual_seed(3)
    B, T = 10, 7
    mask = torch.arange(T) < torch.randint(1, T + 1, (B,), generator=gen)[:, None]
    return dict(
        rewards=torch.tensor([1.0, 0, 0, 1, 1, 0, 0, 0, 0, 1], dtype=torch.float64),
        group_ids=torch.arange(B) // 5,
        logp_old=torch.randn(B, T, generator=gen, dtype=torch.float64),
        logp_ref=torch.randn(B, T, generator=gen, dtype=torch.float64),
        mask=mask,
    )


def test_registry_names_and_losses():
    assert list(ESTIMATORS) == ["grpo", "dr_grpo", "prl", "frpo", "grpo_fused_kl", "raft"]
    assert get_estimator("raft").loss == "sft" and get_estimator("prl").loss == "ppo"
    assert get_estimator("frpo").loss == "ppo" and get_estimator("frpo").step_value == "start"
    assert get_estimator("prl").step_value == "end" and get_estimator("grpo").step_value is None
    assert "v2" in get_estimator("frpo").source and "v1" in get_estimator("prl").source
    for e in ESTIMATORS.values():  # every entry says what it is and where it comes from
        assert e.summary and e.source, e.name
    with pytest.raises(ValueError, match="estimator: unknown 'foo'"):
        get_estimator("foo")


def test_each_estimator_matches_its_definition(batch):
    m = batch["mask"]
    grpo = compute_advantages(AlgorithmConfig(estimator="grpo"), **batch)
    torch.testing.assert_close(grpo, group_advantages(batch["rewards"], batch["group_ids"])[:, None] * m)
    dr = compute_advantages(AlgorithmConfig(estimator="dr_grpo"), **batch)
    torch.testing.assert_close(dr, group_advantages(batch["rewards"], batch["group_ids"], normalize_std=False)[:, None] * m)
    cfg = AlgorithmConfig(eta=3.0, step_split="fixed:2")
    bnd = step_boundaries(m, cfg.step_split)
    prl = compute_advantages(cfg, boundaries=bnd, **batch)
    torch.testing.assert_close(prl, prl_advantages(batch["rewards"], batch["group_ids"], batch["logp_old"],
                                                   batch["logp_ref"], m, eta=3.0, boundaries=bnd))
    raft = compute_advantages(AlgorithmConfig(estimator="raft"), **batch)
    torch.testing.assert_close(raft, (batch["rewards"] >= 1.0).double()[:, None] * m)
    inf = compute_advantages(AlgorithmConfig(eta=math.inf), **batch)
    assert torch.equal(inf, grpo)


def test_boundaries_refused_for_estimators_without_steps(batch):
    with pytest.raises(ValueError, match="boundaries: the 'grpo' estimator does not use step boundaries"):
        compute_advantages(AlgorithmConfig(estimator="grpo"), boundaries=batch["mask"], **batch)


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "raft", "prl"])
def test_every_estimator_validates_its_batch(batch, name):
    cfg = AlgorithmConfig(estimator=name, eta=10.0) if name == "prl" else AlgorithmConfig(estimator=name)
    with pytest.raises(ValueError, match="^mask: expected a torch.bool mask"):
        compute_advantages(cfg, **{**batch, "mask": batch["mask"].float()})
    with pytest.raises(ValueError, match=r"^logp_old: expected shape \(10, 7\)"):
        compute_advantages(cfg, **{**batch, "logp_old": batch["logp_old"][:, :5]})
    with pytest.raises(ValueError, match="^mask: expected 9 rows"):
        compute_advantages(cfg, **{**batch, "rewards": batch["rewards"][:9]})
