"""Input validation shared by the public functions: every error names the argument."""

from __future__ import annotations

import math

import torch


def require_tensor(name: str, x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    return x


def require_float(
    name: str, x: object, shape: tuple[int, ...] | None = None, *, allow_nan: bool = False
) -> torch.Tensor:
    """A floating tensor (optionally of an exact shape) with no NaN unless ``allow_nan``."""
    t = require_tensor(name, x)
    if not t.is_floating_point():
        raise ValueError(f"{name}: expected a floating-point tensor, got dtype {t.dtype}")
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(t.shape)}")
    if not allow_nan and torch.isnan(t).any():
        raise ValueError(f"{name}: contains NaN (first at index {_first_nan(t)})")
    return t


def require_mask(name: str, x: object, ndim: int = 2) -> torch.Tensor:
    """A bool tensor of the given rank (masks are never silently cast from 0/1 floats)."""
    t = require_tensor(name, x)
    if t.dtype != torch.bool:
        raise ValueError(
            f"{name}: expected a torch.bool mask, got dtype {t.dtype} (use `{name}.bool()` "
            "if it holds 0/1 values)"
        )
    if t.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(t.shape)}")
    return t


def require_group_ids(name: str, x: object, batch: int) -> torch.Tensor:
    t = require_tensor(name, x)
    if t.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise ValueError(f"{name}: expected an integer tensor, got dtype {t.dtype}")
    if tuple(t.shape) != (batch,):
        raise ValueError(f"{name}: expected shape ({batch},), got {tuple(t.shape)}")
    return t.long()


def require_eta(eta: object) -> float:
    """η, PRL's inverse KL strength: a number > 0, infinity included (the one check, for the advantage
    functions and ``AlgorithmConfig``)."""
    if isinstance(eta, bool) or not isinstance(eta, (int, float)):
        raise ValueError(f"eta: expected a positive number or inf, got {eta!r}")
    eta = float(eta)
    if math.isnan(eta) or eta <= 0:
        raise ValueError(f"eta: must be > 0 (the inverse KL strength; inf reproduces GRPO), got {eta}")
    return eta


def require_choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{name}: expected one of {', '.join(map(repr, choices))}, got {value!r}")
    return value  # type: ignore[return-value]


def _first_nan(t: torch.Tensor) -> tuple[int, ...]:
    idx = torch.nonzero(torch.isnan(t))[0]
    return tuple(int(i) for i in idx)


def require_rollout_batch(rewards: object, logp_old: object, logp_ref: object, mask: object) -> tuple[torch.Tensor, torch.Tensor]:
    """The shared checks of a rollout batch: rewards (B,) float without NaN/inf, mask (B, T)
    bool, and log-prob tensors (B, T) of a floating dtype. Returns (rewards, mask)."""
    rewards = require_float("rewards", rewards)
    if rewards.dim() != 1:
        raise ValueError(f"rewards: expected shape (B,), got {tuple(rewards.shape)}")
    if torch.isinf(rewards).any():
        raise ValueError("rewards: contains inf")
    mask = require_mask("mask", mask)
    if mask.shape[0] != rewards.shape[0]:
        raise ValueError(f"mask: expected {rewards.shape[0]} rows (one per reward), got shape {tuple(mask.shape)}")
    for name, t in (("logp_old", logp_old), ("logp_ref", logp_ref)):
        require_tensor(name, t)
        if not t.is_floating_point():
            raise ValueError(f"{name}: expected a floating-point tensor, got dtype {t.dtype}")
        if t.shape != mask.shape:
            raise ValueError(f"{name}: expected shape {tuple(mask.shape)} (as mask), got {tuple(t.shape)}")
    return rewards, mask
