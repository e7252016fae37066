"""prl_core: the PRL algorithm as pure functions over torch tensors (no I/O).

Public API:
    group_advantages, suffix_sums, prl_advantages, fill_segments, raft_select   (advantages)
    step_boundaries, parse_split                                                 (boundaries)
    ppo_clip_loss, sft_loss, token_entropy, kl_penalty, aggregate, masked_mean   (losses)
    token_logprobs                                                               (logprobs)
    AlgorithmConfig, ConfigError                                                 (config)
    UserError, the base of every error a user can fix                           (errors)
    ESTIMATORS, get_estimator, compute_advantages                                (estimators)
"""

from importlib import import_module
from typing import Any

_HOMES = {
    "fill_segments": "advantages", "group_advantages": "advantages", "prl_advantages": "advantages",
    "raft_select": "advantages", "suffix_sums": "advantages", "AlgorithmConfig": "config", "ConfigError": "config",
    "ESTIMATORS": "estimators", "compute_advantages": "estimators", "get_estimator": "estimators",
    "token_logprobs": "logprobs", "aggregate": "losses", "kl_penalty": "losses", "masked_mean": "losses",
    "ppo_clip_loss": "losses", "sft_loss": "losses", "token_entropy": "losses", "StepSplit": "boundaries",
    "parse_split": "boundaries", "step_boundaries": "boundaries", "UserError": "errors",
}
"""Each public name's module. Imported when first used (PEP 562), so that ``prl_core.errors`` (the CLI's
user-error base) and the configs load without torch."""


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'prl_core' has no attribute {name!r}")
    value = getattr(import_module(f".{_HOMES[name]}", __name__), name)
    globals()[name] = value
    return value


__version__ = "0.1.0"

__all__ = [
    "AlgorithmConfig", "ConfigError", "ESTIMATORS", "StepSplit", "aggregate", "compute_advantages",
    "fill_segments", "get_estimator", "group_advantages", "kl_penalty", "masked_mean", "parse_split",
    "ppo_clip_loss", "prl_advantages", "raft_select", "sft_loss", "step_boundaries", "suffix_sums",
    "token_entropy", "token_logprobs", "UserError",
]
