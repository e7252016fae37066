"""Hypothesis strategies for rollout batches: any shape, groups, masks with holes and empty rows."""

from __future__ import annotations

import torch
from hypothesis import strategies as st


@st.composite
def batches(draw, max_b: int = 9, max_t: int = 11):
    B = draw(st.integers(0, max_b))
    T = draw(st.integers(1, max_t))
    group_pool = draw(st.lists(st.integers(-5, 1000), min_size=1, max_size=4, unique=True))
    groups = [draw(st.sampled_from(group_pool)) for _ in range(B)]
    reward_values = st.one_of(st.sampled_from([0.0, 1.0]), st.floats(-2, 2, allow_nan=False, width=32))
    rewards = [draw(reward_values) for _ in range(B)]
    layout = draw(st.sampled_from(["right_padded", "left_prompt", "arbitrary"]))
    mask = []
    for _ in range(B):
        if layout == "arbitrary":
            mask.append(draw(st.lists(st.booleans(), min_size=T, max_size=T)))
        else:
            start = draw(st.integers(0, T)) if layout == "left_prompt" else 0
            length = draw(st.integers(0, T - start))
            mask.append([start <= t < start + length for t in range(T)])
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    old = (torch.randn(B, T, generator=gen, dtype=torch.float64) - 1.0)
    ref = (torch.randn(B, T, generator=gen, dtype=torch.float64) - 1.0)
    return {
        "rewards": torch.tensor(rewards, dtype=torch.float64),
        "groups": torch.tensor(groups, dtype=torch.long),
        "mask": torch.tensor(mask, dtype=torch.bool).reshape(B, T),
        "old": old,
        "ref": ref,
    }
