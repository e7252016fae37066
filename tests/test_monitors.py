"""The online monitors (prl/training/monitors.py): given histories → the alerts expected, by the documented
rules; then on runs the pipeline itself trains (tests/test_monitors_runs.py has those)."""

from __future__ import annotations

import math

import pytest

from prl_core.config import ConfigError
from prl.training.monitors import MONITORS, MonitorConfig, alerts, alerts_at, should_stop

CFG = MonitorConfig()  # baseline 5 steps, window 5


def steady(steps: int = 20, **over) -> list[dict[str, float]]:
    """A healthy run: every monitored metric flat."""
    h = [{"actor/entropy": 1.0, "actor/kl_ref": 0.01, "reward/mean": 0.4, "reward/all_equal_group_frac": 0.2,
          "rollout/mismatch_kl": 1e-6, "actor/loss": 0.1, "prl/rho_mean": 0.0} for _ in range(steps)]
    for name, values in over.items():
        for i, v in values.items():
            h[i][name.replace("__", "/")] = v
    return h


def fired(history, cfg=CFG) -> list[tuple[int, str]]:
    return [(a.step, a.monitor) for a in alerts(history, cfg)]


def test_a_steady_run_fires_nothing():
    assert fired(steady()) == []


def test_entropy_collapse_fires_once_at_its_onset():
    h = steady()
    for i in range(8, 20):
        h[i]["actor/entropy"] = 0.1  # from step 9 on
    # moving mean of 5 steps below 0.3 x 1.0: 4 of 5 at 0.1 → 0.28 at step 12 (index 11)
    assert fired(h) == [(12, "entropy_collapse")]
    a = alerts_at(h, 12, CFG)[0]
    assert a.metric == "actor/entropy" and a.value == pytest.approx(0.28) and a.threshold == pytest.approx(0.3)
    assert a.line().startswith("[alert] step 12 entropy_collapse: actor/entropy fell to 0.28")


def test_kl_acceleration_needs_both_the_factor_and_the_floor():
    # a jump at step 9 to 0.1: above the floor and 10x the mean (0.01) of the 5 steps before
    h = steady(**{"actor__kl_ref": {i: 0.1 for i in range(8, 20)}})
    assert fired(h) == [(9, "kl_acceleration")]
    a = alerts_at(h, 9, CFG)[0]
    assert (a.value, a.threshold) == (pytest.approx(0.1), pytest.approx(0.05))
    # steady doubling is acceleration too: each step 2x the last, so > 4x the mean of the 5 before once above 0.05
    grow = steady(**{"actor__kl_ref": {i: 0.001 * 2 ** i for i in range(20)}})
    first = fired(grow)[0]
    assert first == (7, "kl_acceleration") and 0.001 * 2 ** 6 > 0.05  # 0.064 against a mean of 0.0126
    # the same jump below the floor fires nothing
    assert fired(steady(**{"actor__kl_ref": {i: 0.04 for i in range(8, 20)}})) == []


def test_entropy_blowup_fires_when_the_policy_diverges():
    h = steady(**{"actor__entropy": {i: 2.5 for i in range(8, 20)}})
    # from step 9 on: the 5-step mean is (3 x 2.5 + 2 x 1.0) / 5 = 1.9 at step 11, (4 x 2.5 + 1.0) / 5 = 2.2 at step 12
    assert fired(h) == [(12, "entropy_blowup")]


def test_reward_hacking_reads_the_independent_metric_not_the_reward():
    h = steady()
    for i in range(10, 20):
        h[i]["reward/mean"] = 0.7
    h[9]["eval/average"] = 0.30
    h[19]["eval/average"] = 0.28  # held-out accuracy fell while the training reward rose by 0.3
    assert fired(h) == [(20, "reward_hacking")]
    h[19]["eval/average"] = 0.35  # it rose with the reward: no alert
    assert fired(h) == []


def test_all_equal_groups_and_mismatch_spike_and_nonfinite():
    h = steady(**{"reward__all_equal_group_frac": {i: 0.9 for i in range(10, 20)}})
    assert fired(h) == [(13, "all_equal_groups")]  # (3 x 0.9 + 2 x 0.2) / 5 = 0.62 >= 0.2 + 0.3 at step 13
    h = steady(**{"rollout__mismatch_kl": {7: 0.5}})
    assert fired(h) == [(8, "mismatch_kl_spike")]
    h = steady(**{"actor__loss": {3: math.nan}, "actor__grad_norm": {3: math.inf}})
    assert fired(h) == [(4, "nonfinite")]
    assert "actor/grad_norm" in alerts_at(h, 4, CFG)[0].message and "actor/loss" in alerts_at(h, 4, CFG)[0].message


def test_a_metric_undefined_from_the_start_is_not_a_failure():
    """prl/rho_std of a one-token batch is NaN by construction (stored NULL): not an alert; a metric that was finite
    and turns NaN is; one of ALWAYS_DEFINED is at once."""
    h = steady(**{"prl__rho_std": {i: math.nan for i in range(20)}})
    assert fired(h) == []
    h = steady(**{"prl__rho_std": {i: (0.5 if i < 4 else None) for i in range(20)}})
    assert [m for _, m in fired(h)] == ["nonfinite"] * 16  # every step it is seen
    h = steady(**{"reward__mean": {0: None}})
    assert fired(h) == [(1, "nonfinite")]


def test_stop_rules_and_config_errors():
    h = steady(**{"actor__loss": {3: math.nan}})
    assert should_stop(alerts_at(h, 4, CFG), CFG)  # stop_on_nonfinite, even with on_alert warn
    h = steady(**{"rollout__mismatch_kl": {7: 0.5}})
    assert not should_stop(alerts_at(h, 8, CFG), CFG)
    assert should_stop(alerts_at(h, 8, CFG), MonitorConfig(on_alert="stop"))
    assert set(MONITORS) == {"entropy_collapse", "entropy_blowup", "kl_acceleration", "reward_hacking", "all_equal_groups",
                             "mismatch_kl_spike", "nonfinite"}
    with pytest.raises(ConfigError, match="monitors.on_alert: expected 'warn' or 'stop'"):
        MonitorConfig(on_alert="halt")
    with pytest.raises(ConfigError, match=r"run.yaml monitors: unknown key\(s\) entropy"):
        MonitorConfig.from_dict({"entropy": 0.2}, source="run.yaml monitors")
    with pytest.raises(ConfigError, match="monitors.entropy_collapse"):
        MonitorConfig(entropy_collapse=1.5)
    with pytest.raises(ConfigError, match="monitors.window: expected an integer >= 1"):
        MonitorConfig(window=0)
    with pytest.raises(ValueError, match="step: 21 is not in the history of 20 steps"):
        alerts_at(steady(), 21, CFG)
