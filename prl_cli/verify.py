"""``prl verify``."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from prl.data.datasets import DATASETS
from prl.grading.verifier import VerifierSettings
from prl.options import add_config_arguments, option, same_as

from prl_cli.common import Verbosity

UNDECIDED = ("error", "timeout")
"""Verdicts that are no judgement of the response (the verifier failed or ran out of time): exit status 1."""


@dataclass
class VerifyOptions:
    """`prl verify`."""

    gold: str
    """Gold answer (raw)."""
    response: str
    """Model response text."""
    dataset: str | None = option(None, choices=DATASETS)
    """Normalise the gold as this data set's loader does (e.g. minerva_math)."""
    verify_timeout_s: int = same_as(VerifierSettings, "verify_timeout_s", was=("--timeout",))


def _cmd_verify(args: argparse.Namespace) -> int:
    from prl.data.datasets import normalize_gold
    from prl.grading.verifier import verify_one

    gold = normalize_gold(args.dataset or "", args.gold)  # the normalisation every data set gets, plus its own
    v = verify_one(args.response, gold, timeout_s=args.verify_timeout_s)
    print(json.dumps({"verdict": v.verdict, "extracted_answer": v.extracted, "gold_normalized": gold,
                      "gold_raw": args.gold, "score": v.score, "ms": round(v.ms, 2), "detail": v.detail}, indent=2))
    return 1 if v.verdict in UNDECIDED else 0


def register(sub) -> None:
    """Add ``verify`` to the ``prl`` command's subparsers."""
    p = sub.add_parser(
        "verify",
        help="verify one response against a gold answer and say why",
        description="Run Math-Verify on one response and print JSON: the verdict (correct, wrong, no_answer, "
        "timeout, gold_unparsable, error), the extracted answer, the normalised gold and the time taken. "
        "The gold is normalised as every data set's is ($ wrappers, e-notation such as 4.5e33); with --dataset also as "
        "that benchmark's loader does (e.g. minerva's boxed solution). Exit status 0 for a verdict on the response "
        "(correct, wrong, no_answer, gold_unparsable), 1 when the verifier reached none (error, timeout). "
        "Example: prl verify --dataset minerva_math --gold 'so $\\boxed{4.5e33}$' --response '\\boxed{4.5\\times10^{33}}'",
    )
    add_config_arguments(p, VerifyOptions)
    add_config_arguments(p, Verbosity)
    p.set_defaults(func=_cmd_verify)
