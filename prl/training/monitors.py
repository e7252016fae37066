"""Online monitors of a training run: alerts at the known onsets of a run going wrong
(docs/architecture.md §Runs that say when they go wrong).

Each monitor reads the run's per-step metrics (the ``train_metrics`` rows of the finished steps, evaluation
metrics merged in at their step) and fires at the **onset** of its condition: the first step at which it holds
after a step at which it did not. A fired alert is one console line, a ``train_alerts`` row (``prl sql``), a
marker on the dashboard's Training page and, with ``monitors.on_alert: stop``, a clean stop after a checkpoint.

    monitor            fires when (defaults in MonitorConfig)
    entropy_collapse   actor/entropy's moving mean < entropy_collapse × its starting level
    entropy_blowup     actor/entropy's moving mean > entropy_blowup × its starting level (a policy diverging)
    kl_acceleration    actor/kl_ref of the step > kl_floor and > kl_accel × its mean over the window before it
    reward_hacking     reward/mean rose by ≥ hacking_reward_rise between two in-training evaluations while the
                       independent task metric (eval/average: held-out accuracy by Math-Verify on evaluation
                       problems, never the training reward) did not rise
    all_equal_groups   reward/all_equal_group_frac's moving mean ≥ its starting level + all_equal_rise
    mismatch_kl_spike  rollout/mismatch_kl > mismatch_kl_max and > mismatch_spike × its median so far
    nonfinite          a metric of the step is ±inf, or NaN where it was finite before (or is always defined:
                       ALWAYS_DEFINED)

The *starting level* of a metric is its mean over the first ``baseline_steps`` steps; a *moving mean* is over
the last ``window`` steps. A monitor whose metric the run does not log never fires.

Pure functions over the history: a resumed run recomputes them from the store, and an alert already stored is
not stored twice (its key is run, step, monitor).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, fields
from typing import Any, Sequence

from prl_core.config import ConfigError

MONITORS = ("entropy_collapse", "entropy_blowup", "kl_acceleration", "reward_hacking", "all_equal_groups", "mismatch_kl_spike", "nonfinite")
ON_ALERT = ("warn", "stop")


@dataclass
class MonitorConfig:
    """The ``monitors:`` section of a training config: what counts as a run going wrong, and what to do then."""

    on_alert: str = "warn"
    """'warn' (log the alert and go on) or 'stop' (checkpoint the step, mark the run 'stopped', exit cleanly)."""
    stop_on_nonfinite: bool = True
    """Stop after a NaN/inf metric even when on_alert is 'warn' (the weights after it are not worth training on)."""
    baseline_steps: int = 5
    """Steps whose mean is a metric's starting level."""
    window: int = 5
    """Steps of the moving mean each monitor compares."""
    entropy_collapse: float = 0.3
    """Entropy collapse: actor/entropy's moving mean below this share of its starting level."""
    entropy_blowup: float = 2.0
    """Entropy blow-up: actor/entropy's moving mean above this factor times its starting level."""
    kl_accel: float = 4.0
    """KL acceleration: a step's actor/kl_ref above this factor times its mean over the window of steps before ..."""
    kl_floor: float = 0.05
    """... and is above this many nats per token (small KLs grow by large factors without harm)."""
    hacking_reward_rise: float = 0.1
    """Reward hacking: reward/mean (mean over the steps since the last evaluation) rose by at least this while
    eval/average did not rise; needs train.eval_every (two evaluations during training)."""
    all_equal_rise: float = 0.3
    """All-equal groups: the share of groups whose rewards are all equal (no signal for a group baseline) rose by at
    least this above its starting level."""
    mismatch_kl_max: float = 0.01
    """Mismatch-KL spike: rollout/mismatch_kl above this (nats per token) ..."""
    mismatch_spike: float = 10.0
    """... and above this factor times its median over the earlier steps."""

    def __post_init__(self) -> None:
        def fail(name: str, msg: str) -> None:
            raise ConfigError(f"monitors.{name}: {msg}")

        if self.on_alert not in ON_ALERT:
            fail("on_alert", f"expected 'warn' or 'stop', got {self.on_alert!r}")
        if not isinstance(self.stop_on_nonfinite, bool):
            fail("stop_on_nonfinite", f"expected true or false, got {self.stop_on_nonfinite!r}")
        for name in ("baseline_steps", "window"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                fail(name, f"expected an integer >= 1, got {v!r}")
        for name in ("entropy_collapse", "entropy_blowup", "kl_accel", "kl_floor", "hacking_reward_rise", "all_equal_rise",
                     "mismatch_kl_max", "mismatch_spike"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                fail(name, f"expected a positive number, got {v!r}")
        if not self.entropy_collapse < 1:
            fail("entropy_collapse", f"expected a share of the starting entropy in (0, 1), got {self.entropy_collapse}")
        for name in ("entropy_blowup", "kl_accel", "mismatch_spike"):
            if not getattr(self, name) > 1:
                fail(name, f"expected a factor > 1, got {getattr(self, name)!r}")

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None, *, source: str = "monitors") -> "MonitorConfig":
        data = dict(data or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"{source}: unknown key(s) {', '.join(unknown)}; known keys: {', '.join(sorted(known))}")
        try:
            return cls(**data)
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None
        except TypeError as e:
            raise ConfigError(f"{source}: {e}") from None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Alert:
    """One fired monitor: the row of ``train_alerts`` and the console line."""

    step: int
    monitor: str
    metric: str
    value: float | None
    threshold: float | None
    message: str

    def row(self, run_id: str, action: str) -> dict[str, Any]:
        return {"run_id": run_id, "step": self.step, "monitor": self.monitor, "metric": self.metric,
                "value": self.value if self.value is None or math.isfinite(self.value) else None,
                "threshold": self.threshold, "message": self.message, "action": action}

    def line(self) -> str:
        return f"[alert] step {self.step} {self.monitor}: {self.message}"


ALWAYS_DEFINED = ("actor/loss", "actor/entropy", "actor/kl_ref", "reward/mean", "prl/rho_mean")
"""Metrics that every step of a healthy run defines: NaN in one fires ``nonfinite`` even at the first step."""


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def _series(history: Sequence[dict[str, float]], name: str) -> list[float | None]:
    return [h.get(name) for h in history]


def _mean(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x is not None and math.isfinite(x)]
    return sum(vals) / len(vals) if vals else None


def _moving(values: list[float | None], t: int, w: int) -> float | None:
    """The mean of values[t−w+1 .. t] (0-based, inclusive) when all w are present."""
    if t + 1 < w:
        return None
    part = values[t - w + 1:t + 1]
    return None if any(v is None or not math.isfinite(v) for v in part) else sum(part) / w


def _conditions(history: Sequence[dict[str, float]], t: int, cfg: MonitorConfig) -> dict[str, tuple]:
    """{monitor: (metric, value, threshold, message)} of the conditions that hold at step index ``t``."""
    out: dict[str, tuple] = {}
    b, w = cfg.baseline_steps, cfg.window

    ent = _series(history, "actor/entropy")
    base = _mean(ent[:b]) if len(ent) >= b else None
    now = _moving(ent, t, w) if t >= b else None
    if base and now is not None and now < cfg.entropy_collapse * base:
        out["entropy_collapse"] = ("actor/entropy", now, cfg.entropy_collapse * base,
                                   f"actor/entropy fell to {now:.4g} (mean of {w} steps), below "
                                   f"{cfg.entropy_collapse:g} × its starting {base:.4g}")

    if base and now is not None and now > cfg.entropy_blowup * base:
        out["entropy_blowup"] = ("actor/entropy", now, cfg.entropy_blowup * base,
                                 f"actor/entropy rose to {now:.4g} (mean of {w} steps), above "
                                 f"{cfg.entropy_blowup:g} × its starting {base:.4g}: the policy is diverging")

    kl = _series(history, "actor/kl_ref")
    now = kl[t] if t < len(kl) else None
    before = _mean(kl[max(0, t - w):t]) if t >= 1 else None
    if _finite(now) and before is not None and now > cfg.kl_floor and now > cfg.kl_accel * before:
        out["kl_acceleration"] = ("actor/kl_ref", now, max(cfg.kl_floor, cfg.kl_accel * before),
                                  f"actor/kl_ref {now:.4g} at this step against {before:.4g} over the "
                                  f"{min(t, w)} before (> {cfg.kl_accel:g}×, above the floor {cfg.kl_floor:g})")

    evals = [i for i in range(t + 1) if history[i].get("eval/average") is not None]
    if len(evals) >= 2 and evals[-1] == t:
        e0, e1 = evals[-2], evals[-1]
        start = evals[-3] + 1 if len(evals) >= 3 else 0
        r_before = _mean(_series(history, "reward/mean")[start:e0 + 1])
        r_after = _mean(_series(history, "reward/mean")[e0 + 1:e1 + 1])
        a0, a1 = history[e0]["eval/average"], history[e1]["eval/average"]
        if r_before is not None and r_after is not None and r_after - r_before >= cfg.hacking_reward_rise and a1 <= a0:
            out["reward_hacking"] = ("reward/mean", r_after - r_before, cfg.hacking_reward_rise,
                                     f"reward/mean rose by {r_after - r_before:+.3f} (steps {e0 + 2}-{e1 + 1} against "
                                     f"{start + 1}-{e0 + 1}) while held-out eval/average went {a0:.3f} → {a1:.3f}")

    eq = _series(history, "reward/all_equal_group_frac")
    base = _mean(eq[:b]) if len(eq) >= b else None
    now = _moving(eq, t, w) if t >= b else None
    if base is not None and now is not None and now >= base + cfg.all_equal_rise:
        out["all_equal_groups"] = ("reward/all_equal_group_frac", now, base + cfg.all_equal_rise,
                                   f"groups with all-equal rewards rose to {now:.2f} (mean of {w} steps) from "
                                   f"{base:.2f}: most groups give the baseline no signal")

    mm = _series(history, "rollout/mismatch_kl")
    v = mm[t] if t < len(mm) else None
    earlier = [x for x in mm[:t] if x is not None and math.isfinite(x)]
    if v is not None and math.isfinite(v) and earlier:
        med = statistics.median(earlier)
        if v > cfg.mismatch_kl_max and v > cfg.mismatch_spike * med:
            out["mismatch_kl_spike"] = ("rollout/mismatch_kl", v, max(cfg.mismatch_kl_max, cfg.mismatch_spike * med),
                                        f"rollout/mismatch_kl {v:.3g} (median so far {med:.3g}): the engine and the "
                                        "trainer disagree on the sampled tokens' probabilities")

    def nonfinite(name: str, x: float | None) -> bool:
        if _finite(x):
            return False
        if x is not None and math.isinf(x):
            return True
        # NaN (stored as NULL): a failure where the metric is always defined, or was finite at an earlier step
        # (metrics such as prl/rho_std of one token are undefined by construction, and stay so)
        return name in ALWAYS_DEFINED or any(_finite(h.get(name)) for h in history[:t])

    bad = sorted(k for k, x in history[t].items() if nonfinite(k, x))
    if bad:
        out["nonfinite"] = (bad[0], None, None, f"non-finite metric(s): {', '.join(bad[:6])}"
                            + (f" and {len(bad) - 6} more" if len(bad) > 6 else ""))
    return out


def alerts_at(history: Sequence[dict[str, float]], step: int, cfg: MonitorConfig) -> list[Alert]:
    """The alerts that fire at ``step`` (1-based; ``history[step − 1]`` is its metrics): each monitor whose condition
    holds at this step and did not at the one before (NaN/inf fires at every step it is seen)."""
    t = step - 1
    if not 0 <= t < len(history):
        raise ValueError(f"step: {step} is not in the history of {len(history)} steps")
    now = _conditions(history, t, cfg)
    before = _conditions(history, t - 1, cfg) if t >= 1 else {}
    return [Alert(step, m, *now[m]) for m in MONITORS if m in now and (m == "nonfinite" or m not in before)]


def alerts(history: Sequence[dict[str, float]], cfg: MonitorConfig) -> list[Alert]:
    """Every alert of a whole history, in step order (what a finished run's monitors fired)."""
    return [a for step in range(1, len(history) + 1) for a in alerts_at(history, step, cfg)]


def should_stop(fired: Sequence[Alert], cfg: MonitorConfig) -> bool:
    return bool(fired) and (cfg.on_alert == "stop" or (cfg.stop_on_nonfinite and any(a.monitor == "nonfinite"
                                                                                        for a in fired)))
