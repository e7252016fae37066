"""Typed configuration of the policy-optimisation algorithm, validated up front.

Built from a mapping (:meth:`AlgorithmConfig.from_dict`: the ``algorithm:`` section of a config file, which
``prl.config_files.load_algorithm_config`` reads) or in code. Every cross-field rule says how to fix the problem, e.g. a ``step_split`` given with a
non-PRL estimator is refused instead of silently training GRPO.
"""

from __future__ import annotations

from .errors import UserError
import dataclasses
import math
from dataclasses import dataclass, field, fields
from typing import Any


class ConfigError(UserError, ValueError):
    """A configuration value or combination is invalid; the message says how to fix it."""


@dataclass
class AlgorithmConfig:
    """How advantages and the policy loss are computed (docs/architecture.md §The PRL math). Paper defaults: Table 6."""

    estimator: str = "prl"
    """Advantage estimator: 'grpo', 'dr_grpo', 'prl' (paper v1), 'frpo' (v2), 'grpo_fused_kl' or 'raft' (prl_core.estimators)."""
    eta: float | None = None
    """prl, frpo, grpo_fused_kl: inverse regulariser strength η (> 0; coefficient 1/η; 'inf' = GRPO). Required."""
    step_split: str | None = None
    """prl, frpo: 'token' (default), 'fixed:N' or 'text:<delimiter>' such as 'text:\\n\\n'."""
    order: str | None = None
    """prl only: 'advantage_first' (default, the paper's main setting) or 'process_first'."""
    divergence: str | None = None
    """prl, frpo, grpo_fused_kl: the token-wise f-divergence: 'reverse_kl' (default), 'forward_kl', 'chi2' or 'js'."""
    normalize_std: bool | None = None
    """Divide group-centred rewards by the group std (default: True, except False for 'dr_grpo')."""
    eps: float = 1e-6
    """Added to the group std (1e-6 matches the authors' implementation)."""
    n_samples: int = 5
    """Responses per prompt (the group size n; 5 in Table 6, >= 2 for group baselines)."""
    clip_low: float = 0.2
    """PPO clip ε_low, in (0, 1)."""
    clip_high: float = 0.2
    """PPO clip ε_high, > 0 (asymmetric 'clip-higher' when larger than clip_low)."""
    dual_clip: float | None = 3.0
    """Dual-clip constant c > 1 bounding the loss of negative advantages (None disables)."""
    loss_agg: str = "token-mean"
    """'token-mean' (authors' actor) or 'seq-mean-token-mean' (the paper's Algorithm 1)."""
    kl_loss_coef: float = 0.0
    """Extra KL-to-reference loss coefficient (0 in Table 6; PRL's KL already lives in ρ)."""
    kl_estimator: str = "k3"
    """Estimator of the loss-side KL penalty (kl_loss_coef): 'k1', 'k2' or 'k3' (actor/kl_ref is always k3)."""
    raft_threshold: float = 1.0
    """RAFT only: a response with reward >= this counts as correct and is kept."""
    rollout_is: str = "tis"
    """Correction by the engine's sampled log-probs μ: 'tis' (weight min(π_old/μ, cap)), 'mis' (0 outside [1/cap, cap]), 'off'."""
    rollout_is_level: str = "token"
    """'token' (each token's ratio, as verl and Yao et al.'s TIS) or 'sequence' (the response's product of ratios)."""
    rollout_is_cap: float = 2.0
    """The cap C of rollout_is (> 1): truncation at C ('tis') or the kept range [1/C, C] ('mis')."""

    def __post_init__(self) -> None:
        self._validate()

    # ── validation ─────────────────────────────────────────────────────────────────
    def _validate(self) -> None:
        # Imported here, not at module level: they import torch, and the CLI builds its options from this class
        # (`prl --help` must not load torch).
        from .advantages import ORDERS
        from .boundaries import parse_split
        from .divergences import DEFAULT_DIVERGENCE, DIVERGENCES
        from .estimators import ESTIMATOR_KEYS, ESTIMATORS, estimator_names, group_size_error, readers_of
        from .losses import AGGREGATIONS, KL_ESTIMATORS
        from .offpolicy import IS_LEVELS, IS_MODES

        for f in fields(self):
            _check_type(f.name, getattr(self, f.name), f.type)
        for name in ("eps", "clip_low", "clip_high", "kl_loss_coef", "raft_threshold", "rollout_is_cap"):
            if not math.isfinite(getattr(self, name)):
                raise ConfigError(f"{name}: must be a finite number, got {getattr(self, name)}")
        if self.estimator not in ESTIMATORS:
            raise ConfigError(f"estimator: unknown {self.estimator!r}; choose one of {', '.join(estimator_names())}")
        est = ESTIMATORS[self.estimator]
        given = [k for k in ESTIMATOR_KEYS if k not in est.keys and getattr(self, k) is not None]
        if given:
            users = sorted({e for k in given for e in readers_of(k)}, key=list(ESTIMATORS).index)
            raise ConfigError(
                f"{', '.join(given)}: only used by the {', '.join(users)} estimator{'s' if len(users) > 1 else ''}, but "
                f"estimator is {self.estimator!r}. Set estimator: {users[0]} to train it, or remove {', '.join(given)} "
                f"to train {self.estimator}."
            )
        if "eta" in est.keys:
            if self.eta is None:
                raise ConfigError(
                    f"eta: required when estimator is {self.estimator!r} (inverse KL strength; the paper uses 100-300 "
                    "for responses up to 3,072 tokens: choose it relative to response length, 'inf' reproduces GRPO)"
                )
            self.eta = _as_eta(self.eta)
        if "step_split" in est.keys:
            try:
                self.step_split = str(parse_split(self.step_split if self.step_split is not None else "token"))
            except ValueError as e:
                raise ConfigError("step_split: " + str(e).removeprefix("split: ")) from None
        if "order" in est.keys:
            self.order = self.order or ORDERS[0]
            if self.order not in ORDERS:
                raise ConfigError(f"order: expected {' or '.join(map(repr, ORDERS))}, got {self.order!r}")
        if "divergence" in est.keys:
            self.divergence = self.divergence or DEFAULT_DIVERGENCE
            if self.divergence not in DIVERGENCES:
                raise ConfigError(f"divergence: expected one of {', '.join(DIVERGENCES)}, got {self.divergence!r}")
        if self.rollout_is not in IS_MODES:
            raise ConfigError(f"rollout_is: expected one of {', '.join(IS_MODES)}, got {self.rollout_is!r}")
        if self.rollout_is_level not in IS_LEVELS:
            raise ConfigError(f"rollout_is_level: expected one of {', '.join(IS_LEVELS)}, got {self.rollout_is_level!r}")
        if not self.rollout_is_cap > 1.0:
            raise ConfigError(f"rollout_is_cap: must be > 1 (the truncation cap / the kept range [1/C, C]), got "
                              f"{self.rollout_is_cap} (verl and TRL use 2)")
        if est.normalize_std is not None:
            if self.normalize_std is not None and self.normalize_std != est.normalize_std:
                raise ConfigError(
                    f"normalize_std: {self.estimator} is defined {'with' if est.normalize_std else 'without'} the "
                    "std division; remove normalize_std or use estimator: grpo"
                )
            self.normalize_std = est.normalize_std
        elif self.normalize_std is None:
            self.normalize_std = True
        if not self.eps >= 0:
            raise ConfigError(f"eps: must be >= 0, got {self.eps!r}")
        if not (isinstance(self.n_samples, int) and not isinstance(self.n_samples, bool) and self.n_samples >= 1):
            raise ConfigError(f"n_samples: must be an integer >= 1, got {self.n_samples!r}")
        small = group_size_error(self.estimator, self.n_samples)
        if small:
            raise ConfigError(f"n_samples: {small}")
        if not 0.0 < self.clip_low < 1.0:
            raise ConfigError(f"clip_low: must be in (0, 1), got {self.clip_low} (the paper uses 0.2)")
        if not self.clip_high > 0.0:
            raise ConfigError(f"clip_high: must be > 0, got {self.clip_high} (the paper uses 0.2)")
        if self.dual_clip is not None and not self.dual_clip > 1.0:
            raise ConfigError(f"dual_clip: must be > 1 or null to disable, got {self.dual_clip} (verl uses 3)")
        if self.loss_agg not in AGGREGATIONS:
            raise ConfigError(f"loss_agg: expected one of {', '.join(AGGREGATIONS)}, got {self.loss_agg!r}")
        if not self.kl_loss_coef >= 0.0:
            raise ConfigError(f"kl_loss_coef: must be >= 0, got {self.kl_loss_coef}")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ConfigError(f"kl_estimator: expected one of {', '.join(KL_ESTIMATORS)}, got {self.kl_estimator!r}")

    # ── from and to mappings ────────────────────────────────────────────────────────────────────────
    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "<dict>") -> "AlgorithmConfig":
        """Build from a mapping; unknown keys and wrong types are errors naming ``source`` and the key."""
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: the algorithm section must be a mapping, got {type(data).__name__}")
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ConfigError(f"{source}: unknown key(s) {', '.join(unknown)}; known keys: {', '.join(known)}")
        try:
            return cls(**data)
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if isinstance(d.get("eta"), float) and math.isinf(d["eta"]):
            d["eta"] = "inf"
        return d


def _as_eta(value: Any) -> float:
    """η from a config value: a number, or 'inf' spelled as a string in YAML (checked by ``require_eta``)."""
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity", ".inf"):
        return math.inf
    from ._checks import require_eta

    try:
        return require_eta(value)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _check_type(key: str, value: Any, annotation: Any) -> None:
    """Check a YAML value against the field's annotation (``float | None`` etc.); bools are not numbers."""
    ok = key == "eta" and isinstance(value, str)  # eta: 'inf' is spelled as a string in YAML
    for part in str(annotation).split("|"):
        part = part.strip()
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        ok |= (
            (part == "None" and value is None)
            or (part == "str" and isinstance(value, str))
            or (part == "bool" and isinstance(value, bool))
            or (part == "int" and is_number and isinstance(value, int))
            or (part == "float" and is_number)
        )
    if not ok:
        raise ConfigError(f"{key}: expected {annotation}, got {type(value).__name__} {value!r}")
