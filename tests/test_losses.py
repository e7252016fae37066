"""PPO-clip, SFT, entropy and KL helpers against per-token loops; gradient flow."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import loops
from prl_core import kl_penalty, ppo_clip_loss, sft_loss, token_entropy
from strategies import batches


@given(
    batches(),
    st.sampled_from(["token-mean", "seq-mean-token-mean"]),
    st.sampled_from([(0.2, 0.2), (0.2, 0.28), (0.1, 0.5)]),
    st.sampled_from([3.0, None, 1.5]),
)
def test_ppo_clip_loss_matches_loop(batch, agg, clip, dual):
    mask = batch["mask"]
    B, T = mask.shape
    gen = torch.Generator().manual_seed(B * 31 + T)
    logp_old = batch["ref"]
    logp = logp_old + 0.5 * torch.randn(B, T, generator=gen, dtype=torch.float64)
    adv = torch.randn(B, T, generator=gen, dtype=torch.float64)
    loss, metrics = ppo_clip_loss(logp, logp_old, adv, mask, clip_low=clip[0], clip_high=clip[1], dual_clip=dual, agg=agg)

    per_tok = [[loops.ppo_token_loss(logp[b, t].item(), logp_old[b, t].item(), adv[b, t].item(), clip[0], clip[1], dual)
                for t in range(T)] for b in range(B)]
    cells = [(b, t) for b in range(B) for t in range(T) if mask[b, t]]
    if agg == "token-mean":
        want = sum(per_tok[b][t] for b, t in cells) / max(len(cells), 1)
    else:
        rows = [[per_tok[b][t] for t in range(T) if mask[b, t]] for b in range(B)]
        rows = [sum(r) / len(r) for r in rows if r]
        want = sum(rows) / max(len(rows), 1)
    assert loss.item() == pytest.approx(want, rel=1e-9, abs=1e-12)

    clipped = 0
    for b, t in cells:
        r = math.exp(logp[b, t].item() - logp_old[b, t].item())
        a = adv[b, t].item()
        clipped += (-a * min(max(r, 1 - clip[0]), 1 + clip[1])) > (-a * r)
    assert metrics["actor/clipfrac"].item() == pytest.approx(clipped / max(len(cells), 1))
    kl = [math.exp(logp[b, t] - logp_old[b, t]) - 1 - (logp[b, t] - logp_old[b, t]).item() for b, t in cells]
    assert metrics["actor/approx_kl"].item() == pytest.approx(sum(kl) / max(len(cells), 1), abs=1e-12)
    assert metrics["actor/approx_kl"].item() >= 0


def test_gradients_flow_to_policy_logprobs_only():
    logp = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    logp_old = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    adv = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[2, 2:] = False
    loss, metrics = ppo_clip_loss(logp, logp_old, adv, mask)
    loss.backward()
    assert logp.grad is not None and logp.grad.abs().sum() > 0
    assert logp_old.grad is None and adv.grad is None
    assert torch.all(logp.grad[2, 2:] == 0)  # padding gets no gradient
    assert all(not v.requires_grad for v in metrics.values())


def test_unclipped_gradient_is_policy_gradient():
    # at w = 1 the clip is inactive: d loss / d logp_t = -A_t / N
    logp = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]], dtype=torch.float64)
    mask = torch.ones(2, 3, dtype=torch.bool)
    loss, m = ppo_clip_loss(logp, logp.detach().clone(), adv, mask)
    loss.backward()
    torch.testing.assert_close(logp.grad, -adv / 6)
    assert m["actor/clipfrac"].item() == 0.0


def test_dual_clip_caps_negative_advantage_loss():
    logp = torch.tensor([[math.log(10.0)]], dtype=torch.float64)  # w = 10
    adv = torch.tensor([[-1.0]], dtype=torch.float64)
    loss, m = ppo_clip_loss(logp, torch.zeros(1, 1, dtype=torch.float64), adv, torch.ones(1, 1, dtype=torch.bool))
    assert loss.item() == pytest.approx(3.0)  # min(10, 3)
    assert m["actor/clipfrac_dual"].item() == 1.0
    loss, _ = ppo_clip_loss(logp, torch.zeros(1, 1, dtype=torch.float64), adv, torch.ones(1, 1, dtype=torch.bool), dual_clip=None)
    assert loss.item() == pytest.approx(10.0)


def test_sft_loss_is_masked_nll():
    logp = torch.log(torch.tensor([[0.5, 0.25], [0.1, 0.9]], dtype=torch.float64))
    mask = torch.tensor([[True, True], [False, False]])
    assert sft_loss(logp, mask).item() == pytest.approx((math.log(2) + math.log(4)) / 2)


def test_token_entropy_matches_definition():
    logits = torch.randn(2, 3, 7, dtype=torch.float64)
    ent = token_entropy(logits)
    for b in range(2):
        for t in range(3):
            p = torch.softmax(logits[b, t], -1).tolist()
            assert ent[b, t].item() == pytest.approx(-sum(q * math.log(q) for q in p), rel=1e-9)
    assert token_entropy(torch.zeros(1, 1, 5))[0, 0].item() == pytest.approx(math.log(5))
    _, m = ppo_clip_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3), torch.ones(2, 3, dtype=torch.bool),
                         logits=logits.float())
    assert m["actor/entropy"].item() == pytest.approx(ent.mean().item(), rel=1e-5)


def test_kl_estimators():
    logp = torch.log(torch.tensor([[0.5]], dtype=torch.float64))
    ref = torch.log(torch.tensor([[0.25]], dtype=torch.float64))
    assert kl_penalty(logp, ref, "k1").item() == pytest.approx(math.log(2))
    assert kl_penalty(logp, ref, "k2").item() == pytest.approx(0.5 * math.log(2) ** 2)
    assert kl_penalty(logp, ref, "k3").item() == pytest.approx(0.5 - 1 + math.log(2))


def test_padding_values_never_reach_the_loss_or_metrics():
    logp = torch.tensor([[-1.0, -0.5, float("-inf")]], dtype=torch.float64, requires_grad=True)
    logp_old = torch.tensor([[-1.1, -0.4, float("-inf")]], dtype=torch.float64)
    adv = torch.tensor([[1.0, -1.0, float("nan")]], dtype=torch.float64)
    mask = torch.tensor([[True, True, False]])
    loss, m = ppo_clip_loss(logp, logp_old, adv, mask, agg="seq-mean-token-mean")
    ref, _ = ppo_clip_loss(logp[:, :2], logp_old[:, :2], adv[:, :2], mask[:, :2])
    assert loss.item() == pytest.approx(ref.item())
    assert all(math.isfinite(v.item()) for v in m.values())
    loss.backward()
    assert torch.isfinite(logp.grad).all() and logp.grad[0, 2] == 0
    assert math.isfinite(sft_loss(logp.detach(), mask).item())
    with pytest.raises(ValueError, match=r"^advantages: NaN at response token \(row 0, column 1\)"):
        ppo_clip_loss(logp, logp_old, torch.tensor([[1.0, float("nan"), 0.0]]).double(), mask)
    with pytest.raises(ValueError, match=r"^logits: expected shape \(1, 3\) \+ \(V,\)"):
        ppo_clip_loss(logp, logp_old, adv, mask, logits=torch.randn(2, 3, 5))


def test_entropy_with_vocabulary_masked_logits():
    logits = torch.tensor([[[0.0, float("-inf"), 0.0]]])
    assert token_entropy(logits)[0, 0].item() == pytest.approx(math.log(2))
