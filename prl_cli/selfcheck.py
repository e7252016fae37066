"""``prl selfcheck``."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

from prl.options import add_config_arguments

from prl_cli.common import Verbosity


@dataclass
class SelfcheckOptions:
    """`prl selfcheck`."""

    seed: int = 0
    """Seed of the random invariant batch."""


def _cmd_selfcheck(args: argparse.Namespace) -> int:
    import torch

    from prl_core import worked_example
    from prl_core.advantages import group_advantages, prl_advantages
    from prl_core.boundaries import step_boundaries

    got = worked_example.compute()
    width = max(map(len, got))
    failures = 0
    print("Worked example (docs/architecture.md §The worked example): paths 00/01/10/11, reference 1/4 each, "
          "R=1 only for 11, eta=1")
    for key, value in got.items():
        want = worked_example.DOCUMENTED[key]
        ok = abs(value - want) < 5e-7
        failures += not ok
        print(f"  {key:<{width}}  {value:.6f}   documented {want:.6f}   {'ok' if ok else 'MISMATCH'}")

    gen = torch.Generator().manual_seed(args.seed)
    B, T = 40, 64
    rewards = torch.randint(0, 2, (B,), generator=gen).double()
    groups = torch.arange(B) // 5
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    mask = torch.arange(T) < lengths[:, None]
    old = torch.randn(B, T, generator=gen, dtype=torch.float64)
    ref = torch.randn(B, T, generator=gen, dtype=torch.float64)
    grpo = group_advantages(rewards, groups)[:, None].expand(B, T) * mask
    checks = {
        "eta=inf equals GRPO exactly": torch.equal(
            prl_advantages(rewards, groups, old, ref, mask, eta=math.inf), grpo
        ),
        "fixed:8 segments share their boundary value": _segments_constant(
            prl_advantages(rewards, groups, old, ref, mask, eta=2.0, boundaries=step_boundaries(mask, "fixed:8")),
            step_boundaries(mask, "fixed:8"), mask,
        ),
    }
    print(f"Invariants on a random batch (B={B}, T={T}, seed {args.seed}):")
    for name, ok in checks.items():
        failures += not ok
        print(f"  {name:<45} {'ok' if ok else 'FAILED'}")
    print("selfcheck: " + ("all checks passed" if failures == 0 else f"{failures} check(s) FAILED"))
    return 0 if failures == 0 else 1


def _segments_constant(rho, boundaries, mask) -> bool:
    for b in range(rho.shape[0]):
        cols = mask[b].nonzero().squeeze(1).tolist()
        value = None
        for c in reversed(cols):
            if boundaries[b, c]:
                value = rho[b, c]
            elif rho[b, c] != value:
                return False
    return True


def register(sub) -> None:
    """Add ``selfcheck`` to the ``prl`` command's subparsers."""
    p = sub.add_parser(
        "selfcheck",
        help="recompute the worked example and core invariants of prl_core",
        description="Recompute the four-path worked example of docs/architecture.md §The worked example with "
        "prl_core (optimal policy, net value C, prefix value V, and the reference-policy counter-case), compare "
        "with the documented values, and check eta=inf == GRPO and the segment fill on a random batch. Exit "
        "status 1 on any mismatch.",
    )
    add_config_arguments(p, SelfcheckOptions)
    add_config_arguments(p, Verbosity)
    p.set_defaults(func=_cmd_selfcheck)
