"""Off-policy correction from the rollout engine's own log-probs (prl_core.offpolicy): equal log-probs leave the step
bit for bit; the weights are what their definition says; and on an enumerable policy sampled by a deliberately
different behaviour policy, the corrected expected gradient is the on-policy one while the uncorrected one is not."""

from __future__ import annotations

import pytest
import torch

from prl_core import AlgorithmConfig
from prl_core.objective import surrogate_loss
from prl_core.offpolicy import rollout_is_weights

from enumeration import Tabular, expected_surrogate_grad


def _batch(seed=0, B=6, T=9):
    gen = torch.Generator().manual_seed(seed)
    mask = torch.arange(T) < torch.randint(2, T + 1, (B,), generator=gen)[:, None]
    old = -torch.rand(B, T, generator=gen) * 3
    return mask, old, torch.randn(B, T, generator=gen) * 0.1


@pytest.mark.parametrize("mode", ["tis", "mis"])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_equal_log_probs_give_the_uncorrected_loss_and_gradients_bit_for_bit(mode, level):
    mask, old, _ = _batch()
    ref = old - 0.3
    rho = torch.randn(mask.shape).masked_fill(~mask, 0.0)
    cfg = AlgorithmConfig(estimator="frpo", eta=4.0, divergence="forward_kl", n_samples=3)
    w, m = rollout_is_weights(old, old.clone(), mask, mode=mode, level=level, cap=2.0)
    assert torch.equal(w[mask], torch.ones(int(mask.sum()))) and m["rollout/is_clipped_frac"] == 0.0
    assert m["rollout/mismatch_kl"] == 0.0 and m["rollout/is_weight_max"] == 1.0
    out = []
    for weights in (None, w):
        logp = (old + 0.05 * torch.randn(mask.shape, generator=torch.Generator().manual_seed(1))).requires_grad_(True)
        loss, _ = surrogate_loss(cfg, logp, old, ref, rho, mask, is_weights=weights)
        loss.backward()
        out.append((loss.detach(), logp.grad))
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])


def test_truncation_masking_and_sequence_products_follow_their_definitions():
    mask = torch.tensor([[True, True, True, False], [True, True, False, False]])
    behav = torch.zeros(2, 4)
    log_r = torch.tensor([[3.0, 0.4, 1.5, 9.0], [0.9, 1.2, 7.0, 7.0]]).log()  # r = π_old/μ; padding ignored
    w, m = rollout_is_weights(log_r, behav, mask, mode="tis", level="token", cap=2.0)
    torch.testing.assert_close(w, torch.tensor([[2.0, 0.4, 1.5, 0.0], [0.9, 1.2, 0.0, 0.0]]))
    assert m["rollout/is_clipped_frac"] == pytest.approx(1 / 5)
    assert m["rollout/is_weight_max"] == pytest.approx(3.0) and m["rollout/is_weight_mean"] == pytest.approx(7.0 / 5)
    r = torch.tensor([3.0, 0.4, 1.5, 0.9, 1.2])
    assert m["rollout/mismatch_kl"] == pytest.approx(float((r - 1 - r.log()).mean()))
    w, m = rollout_is_weights(log_r, behav, mask, mode="mis", level="token", cap=2.0)
    torch.testing.assert_close(w, torch.tensor([[0.0, 0.0, 1.5, 0.0], [0.9, 1.2, 0.0, 0.0]]))
    assert m["rollout/is_clipped_frac"] == pytest.approx(2 / 5)
    w, m = rollout_is_weights(log_r, behav, mask, mode="tis", level="sequence", cap=2.0)  # 1.8 and 1.08
    torch.testing.assert_close(w, torch.tensor([[1.8, 1.8, 1.8, 0.0], [1.08, 1.08, 0.0, 0.0]]))
    assert m["rollout/is_clipped_frac"] == 0.0 and m["rollout/is_weight_mean"] == pytest.approx((1.8 + 1.08) / 2)
    w, _ = rollout_is_weights(log_r, behav, mask, mode="mis", level="sequence", cap=1.5)
    torch.testing.assert_close(w, torch.tensor([[0.0, 0.0, 0.0, 0.0], [1.08, 1.08, 0.0, 0.0]]))
    w, m = rollout_is_weights(log_r, behav, mask, mode="off")
    assert w is None and m["rollout/is_weight_max"] == pytest.approx(3.0)


def test_bad_input_names_the_argument():
    mask, old, _ = _batch()
    with pytest.raises(ValueError, match="cap: must be > 1"):
        rollout_is_weights(old, old, mask, cap=1.0)
    with pytest.raises(ValueError, match="mode: expected one of 'tis', 'mis', 'off'"):
        rollout_is_weights(old, old, mask, mode="clip")
    bad = old.clone()
    bad[0, 0] = float("inf")
    with pytest.raises(ValueError, match=r"non-finite at response token \(row 0, column 0\)"):
        rollout_is_weights(bad, old, mask)


def _setting():
    pol = Tabular.build(2, 3, seed=3)
    theta, ref = pol.logits(13), pol.logits(23)
    behavior = theta + 0.6 * pol.logits(33)  # a deliberately different behaviour policy
    return pol, theta, ref, behavior


def _rel(a, b):
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))


@pytest.mark.parametrize("divergence", ["reverse_kl", "forward_kl"])
def test_sequence_level_is_makes_the_off_policy_expected_gradient_the_on_policy_one(divergence, capsys):
    """Dr.GRPO's centring (a baseline linear in the other responses' rewards) with the response's own sequence ratio:
    exact. Without the correction the expected gradient is another one; token-level weights and, with GRPO's std,
    the sequence weight come close but are not exact (measured)."""
    pol, theta, ref, behavior = _setting()
    n = 3
    cfg = AlgorithmConfig(estimator="frpo", eta=2.5, divergence=divergence, normalize_std=False, n_samples=n)
    on = expected_surrogate_grad(pol, theta, ref, cfg, n)
    big = ("tis", "sequence", 1e9)  # no truncation
    corrected = expected_surrogate_grad(pol, theta, ref, cfg, n, behavior_logits=behavior, correction=big)
    uncorrected = expected_surrogate_grad(pol, theta, ref, cfg, n, behavior_logits=behavior)
    token = expected_surrogate_grad(pol, theta, ref, cfg, n, behavior_logits=behavior, correction=("tis", "token", 1e9))
    assert float((corrected - on).abs().max()) < 1e-10
    assert _rel(uncorrected, on) > 0.05
    # GRPO's std division: its utility is linear in p for n <= 3 (every extra success moves the advantages by the
    # same amount), so the sequence weight is exact there too; from n = 4 it is not, and neither is the weight
    small = Tabular.build(2, 2, seed=3)
    s_theta, s_ref = small.logits(13), small.logits(23)
    s_beh = s_theta + 0.6 * small.logits(33)
    cfg_std = AlgorithmConfig(estimator="frpo", eta=2.5, divergence=divergence, n_samples=4)
    std_gap = _rel(expected_surrogate_grad(small, s_theta, s_ref, cfg_std, 4, behavior_logits=s_beh, correction=big),
                   expected_surrogate_grad(small, s_theta, s_ref, cfg_std, 4))
    with capsys.disabled():
        print(f"\n[offpolicy] {divergence}: relative gap to the on-policy gradient — uncorrected "
              f"{_rel(uncorrected, on):.4f}, token-level IS {_rel(token, on):.4f}, sequence-level IS (Dr.GRPO) "
              f"{_rel(corrected, on):.1e}, sequence-level IS with the std division {std_gap:.4f}")
    assert 1e-4 < std_gap < _rel(uncorrected, on)


def test_truncation_trades_the_exactness_for_bounded_weights():
    pol, theta, ref, behavior = _setting()
    n = 3
    cfg = AlgorithmConfig(estimator="frpo", eta=2.5, normalize_std=False, n_samples=n)
    on = expected_surrogate_grad(pol, theta, ref, cfg, n)
    w, m = rollout_is_weights(pol.token_logp(theta), pol.token_logp(behavior), pol.mask, level="sequence", cap=2.0)
    assert m["rollout/is_clipped_frac"] > 0  # some responses' ratios pass the cap here
    capped = expected_surrogate_grad(pol, theta, ref, cfg, n, behavior_logits=behavior, correction=("tis", "sequence", 2.0))
    assert _rel(capped, on) > 1e-4
