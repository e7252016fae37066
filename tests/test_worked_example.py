"""The four-path example of docs/architecture.md §The worked example, derived here from the
definitions, then through prl_core."""

from __future__ import annotations

import math

import pytest
import torch

from prl_core import prl_advantages, worked_example

ETA = 1.0


def _optimum():
    # π*(a) = π_ref(a) e^{η R(a)} / Z over the four paths; R = 1 only for 11.
    z = 3 * 0.25 + 0.25 * math.e ** ETA
    return {p: 0.25 * math.e ** (ETA * (p == "11")) / z for p in ("00", "01", "10", "11")}, z


def test_optimal_policy_and_net_value_match_design():
    pi, z = _optimum()
    assert pi["11"] == pytest.approx(0.475367, abs=5e-7)
    assert pi["00"] == pi["01"] == pi["10"] == pytest.approx(0.174878, abs=5e-7)
    c = math.log(z) / ETA
    assert c == pytest.approx(0.357374, abs=5e-7)
    # Corollary 3.2: R - (1/η) log(π*/π_ref) is the same C for every path
    for p, prob in pi.items():
        assert (p == "11") - math.log(prob / 0.25) / ETA == pytest.approx(c, abs=1e-12)


def test_prl_weights_reproduce_C_and_the_prefix_value():
    pi, z = _optimum()
    first = {"0": pi["00"] + pi["01"], "1": pi["10"] + pi["11"]}
    paths = ["00", "01", "10", "11"]
    logp_old = torch.tensor([[math.log(first[p[0]]), math.log(pi[p] / first[p[0]])] for p in paths], dtype=torch.float64)
    logp_ref = torch.full((4, 2), math.log(0.5), dtype=torch.float64)
    rewards = torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    mask = torch.ones(4, 2, dtype=torch.bool)
    rho = prl_advantages(rewards, torch.arange(4), logp_old, logp_ref, mask, eta=ETA)  # groups of one: A = R
    torch.testing.assert_close(rho[:, 0], torch.full((4,), math.log(z) / ETA, dtype=torch.float64))
    # prefix "1": both continuations are worth V = 0.620115 after their future log-ratio
    assert rho[2, 1].item() == pytest.approx(0.620115, abs=5e-7)
    assert rho[3, 1].item() == pytest.approx(0.620115, abs=5e-7)
    # ... and V equals C + (1/η) log(π*(1)/π_ref(1)) (Theorem 3.3 with the prefix sum)
    assert rho[3, 1].item() == pytest.approx(math.log(z) + math.log(first["1"] / 0.5), abs=1e-12)


def test_under_the_reference_policy_the_two_continuations_differ():
    logp_ref = torch.full((4, 2), math.log(0.5), dtype=torch.float64)
    rewards = torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    rho = prl_advantages(rewards, torch.arange(4), logp_ref.clone(), logp_ref, torch.ones(4, 2, dtype=torch.bool), eta=ETA)
    assert rho[2, 1].item() == 0.0 and rho[3, 1].item() == 1.0


def test_selfcheck_module_agrees_with_documented_values():
    got = worked_example.compute()
    for key, want in worked_example.DOCUMENTED.items():
        assert got[key] == pytest.approx(want, abs=5e-7), key
