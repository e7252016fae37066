"""prl_core: the PRL algorithm as pure functions over torch tensors (no I/O).

Public API:
    group_advantages, suffix_sums, prl_advantages, fill_segments, raft_select   (advantages)
    step_boundaries, parse_split                                                 (steps)
    ppo_clip_loss, sft_loss, token_entropy, kl_penalty, aggregate, masked_mean   (losses)
    token_logprobs                                                               (logprobs)
    AlgorithmConfig, ConfigError                                                 (config)
    ESTIMATORS, get_estimator, compute_advantages                                (estimators)
"""

from .advantages import fill_segments, group_advantages, prl_advantages, raft_select, suffix_sums
from .config import AlgorithmConfig, ConfigError
from .estimators import ESTIMATORS, compute_advantages, get_estimator
from .logprobs import token_logprobs
from .losses import aggregate, kl_penalty, masked_mean, ppo_clip_loss, sft_loss, token_entropy
from .steps import StepSplit, parse_split, step_boundaries

__version__ = "0.1.0"

__all__ = [
    "AlgorithmConfig", "ConfigError", "ESTIMATORS", "StepSplit", "aggregate", "compute_advantages",
    "fill_segments", "get_estimator", "group_advantages", "kl_penalty", "masked_mean", "parse_split",
    "ppo_clip_loss", "prl_advantages", "raft_select", "sft_loss", "step_boundaries", "suffix_sums",
    "token_entropy", "token_logprobs",
]
