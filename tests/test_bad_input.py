"""Bad input: a clear ValueError that names the offending argument."""

from __future__ import annotations

import math

import pytest
import torch

from prl_core import fill_segments, group_advantages, ppo_clip_loss, prl_advantages, step_boundaries, suffix_sums

B, T = 4, 6


def good():
    return dict(
        rewards=torch.tensor([1.0, 0.0, 1.0, 0.0]),
        group_ids=torch.tensor([0, 0, 1, 1]),
        logp_old=torch.randn(B, T),
        logp_ref=torch.randn(B, T),
        mask=torch.ones(B, T, dtype=torch.bool),
    )


@pytest.mark.parametrize(
    "change, pattern",
    [
        (dict(rewards=torch.tensor([1.0, float("nan"), 0.0, 0.0])), r"^rewards: contains NaN"),
        (dict(rewards=torch.tensor([1.0, math.inf, 0.0, 0.0])), r"^rewards: contains inf"),
        (dict(rewards=torch.ones(4, 1)), r"^rewards: expected shape \(B,\)"),
        (dict(rewards=torch.tensor([1, 0, 1, 0])), r"^rewards: expected a floating-point tensor"),
        (dict(rewards=[1.0, 0.0, 1.0, 0.0]), r"^rewards: expected a torch.Tensor"),
        (dict(group_ids=torch.tensor([0, 0, 1])), r"^group_ids: expected shape \(4,\)"),
        (dict(group_ids=torch.tensor([0.0, 0.0, 1.0, 1.0])), r"^group_ids: expected an integer tensor"),
        (dict(mask=torch.ones(B, T)), r"^mask: expected a torch.bool mask, got dtype torch.float32"),
        (dict(mask=torch.ones(B, T, dtype=torch.long)), r"^mask: expected a torch.bool mask"),
        (dict(mask=torch.ones(B, T + 1, dtype=torch.bool)), r"^logp_old: expected shape \(4, 7\)"),
        (dict(mask=torch.ones(B + 1, T, dtype=torch.bool)), r"^mask: expected 4 rows"),
        (dict(logp_ref=torch.randn(B, T - 1)), r"^logp_ref: expected shape \(4, 6\)"),
        (dict(logp_old=torch.randint(0, 3, (B, T))), r"^logp_old: expected a floating-point tensor"),
    ],
)
def test_prl_advantages_bad_input(change, pattern):
    with pytest.raises(ValueError, match=pattern):
        prl_advantages(**{**good(), **change}, eta=10.0)


def test_nan_inside_the_response_is_named_but_nan_in_padding_is_ignored():
    args = good()
    args["logp_old"][2, 3] = float("nan")
    with pytest.raises(ValueError, match=r"^logp_old: non-finite value nan at response token \(row 2, column 3\)"):
        prl_advantages(**args, eta=10.0)
    args["mask"][2, 3:] = False
    out = prl_advantages(**args, eta=10.0)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("eta", [0, -1.0, float("nan"), "100", None, True])
def test_bad_eta(eta):
    with pytest.raises(ValueError, match="^eta:"):
        prl_advantages(**good(), eta=eta)


def test_bad_order_and_boundaries():
    with pytest.raises(ValueError, match="^order: expected one of"):
        prl_advantages(**good(), eta=1.0, order="backwards")
    g = good()
    with pytest.raises(ValueError, match="^boundaries: expected a torch.bool mask"):
        prl_advantages(**g, eta=1.0, boundaries=torch.ones(B, T))
    bnd = torch.zeros(B, T, dtype=torch.bool)
    bnd[:, 2] = True
    with pytest.raises(ValueError, match=r"^boundaries: row 0 has no boundary at its last response token"):
        prl_advantages(**g, eta=1.0, boundaries=bnd)
    g["mask"][1, 4:] = False
    bnd = step_boundaries(torch.ones(B, T, dtype=torch.bool), "token")
    with pytest.raises(ValueError, match="^boundaries: marks positions outside mask"):
        prl_advantages(**g, eta=1.0, boundaries=bnd)
    with pytest.raises(ValueError, match="^split: unknown split"):
        step_boundaries(g["mask"], "sentences")


def test_other_functions_name_their_arguments():
    with pytest.raises(ValueError, match="^mask: expected a torch.bool mask"):
        suffix_sums(torch.randn(2, 3), torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"^values: expected shape \(2, 4\) \(as mask\)"):
        suffix_sums(torch.randn(2, 3), torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="^rewards: contains NaN"):
        group_advantages(torch.tensor([float("nan")]), torch.tensor([0]))
    with pytest.raises(ValueError, match=r"^logp_old: expected shape \(2, 3\)"):
        ppo_clip_loss(torch.randn(2, 3), torch.randn(3, 2), torch.randn(2, 3), torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"^clip_low: must be in \(0, 1\)"):
        ppo_clip_loss(torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 3), torch.ones(2, 3, dtype=torch.bool), clip_low=1.5)
    with pytest.raises(ValueError, match="^agg: expected one of"):
        ppo_clip_loss(torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 3), torch.ones(2, 3, dtype=torch.bool), agg="sum")
    with pytest.raises(ValueError, match="^boundaries: expected a torch.bool mask"):
        fill_segments(torch.randn(2, 3), torch.ones(2, 3), torch.ones(2, 3, dtype=torch.bool))


def test_fixed_fast_path_ignores_nan_padding_and_names_nan_in_the_response():
    g = good()
    g["mask"][:, 4:] = False  # right-padded rows: the fixed:N fast path
    g["logp_old"][:, 4:] = float("nan")
    g["logp_ref"][1, 5] = float("-inf")
    out = prl_advantages(**g, eta=10.0, boundaries="fixed:2")
    assert torch.isfinite(out).all() and (out[:, 4:] == 0).all()
    torch.testing.assert_close(out, prl_advantages(**g, eta=10.0, boundaries=step_boundaries(g["mask"], "fixed:2")))
    g["logp_ref"][3, 1] = float("inf")
    with pytest.raises(ValueError, match=r"^logp_ref: non-finite value inf at response token \(row 3, column 1\)"):
        prl_advantages(**g, eta=10.0, boundaries="fixed:2")
