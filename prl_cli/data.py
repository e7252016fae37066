"""``prl data``."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from prl.data.synthetic import TEST_SIZE, TRAIN_SIZE
from prl.options import add_config_arguments

from prl_cli.common import Verbosity


@dataclass
class SynthOptions:
    """`prl data synth`."""

    out: str
    """Output directory."""
    train: int = TRAIN_SIZE
    """Training problems."""
    test: int = TEST_SIZE
    """Test problems, up to the whole test split."""
    seed: int = 0
    """Seed of the generator."""


def _cmd_data_synth(args: argparse.Namespace) -> int:
    from prl.data import synthetic

    for split, n in (("train", args.train), ("test", args.test)):
        path = synthetic.write_jsonl(synthetic.generate(split, n, seed=args.seed), f"{args.out}/synth_{split}.jsonl")
        print(f"wrote {n} {split} problems to {path}")
    return 0


def register(sub) -> None:
    """Add ``data`` to the ``prl`` command's subparsers."""
    p = sub.add_parser("data", help="data set tools")
    dsub = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    d = dsub.add_parser(
        "synth",
        help="write the synthetic arithmetic task (train/test JSONL)",
        description="Write DIR/synth_train.jsonl and DIR/synth_test.jsonl: multi-step arithmetic word problems "
        "(levels 1-4 = number of operations) with step-by-step solutions separated by blank lines and a "
        "\\boxed{} answer, in the schema of the bundled benchmarks. Deterministic in --seed; the splits "
        "never share a problem. Example: prl data synth --out data/synth",
    )
    add_config_arguments(d, SynthOptions)
    add_config_arguments(d, Verbosity)
    d.set_defaults(func=_cmd_data_synth)
