"""``prl model``."""

from __future__ import annotations

import argparse
import json

from prl.options import add_config_arguments, config_kwargs
from prl.training.sft import SFTConfig, run_sft


def _cmd_build_tiny(args: argparse.Namespace) -> int:
    from prl.models.tiny import build_tiny, file_hashes

    out = build_tiny(args.out, seed=args.seed)
    for name, digest in file_hashes(out).items():
        print(f"  {digest[:16]}  {name}")
    print(f"built the tiny model in {out} (seed {args.seed}); AutoTokenizer round trip verified")
    return 0


SFT_OPTIONS = ("steps", "max_minutes", "batch_size", "lr", "warmup_steps", "weight_decay", "train_size", "eval_size",
               "direct_frac", "seed", "threads")
"""The SFTConfig fields `prl model sft` exposes (flags, defaults and help come from the fields)."""


def _cmd_sft(args: argparse.Namespace) -> int:
    cfg = SFTConfig(**config_kwargs(args, SFTConfig, SFT_OPTIONS))
    report = run_sft(args.model, args.out, cfg)
    print(json.dumps({k: report[k] for k in ("steps", "train_seconds", "accuracy_before_greedy",
                                             "accuracy_after_greedy", "accuracy_after_sampled")}, indent=2))
    return 0


def register(sub) -> None:
    """Add ``model`` to the ``prl`` command's subparsers."""
    p = sub.add_parser("model", help="the embedded tiny model")
    msub = p.add_subparsers(dest="model_command", metavar="ACTION", required=True)
    m = msub.add_parser(
        "build-tiny",
        help="build the tiny model from a seed",
        description="Train a byte-level BPE tokenizer on the synthetic task, add a chat template, and initialise a "
        "small Llama-architecture model (4 layers, hidden 128, head_dim 32) from --seed; save a standard Hugging "
        "Face directory that transformers, vLLM and DeepSpeed load. Same seed -> byte-identical files (any x86-64 CPU with AVX2 or AVX-512). "
        "Example: prl model build-tiny --out models/tiny",
    )
    m.add_argument("--out", required=True, help="output directory")
    m.add_argument("--seed", type=int, default=0)
    m.set_defaults(func=_cmd_build_tiny)
    m = msub.add_parser(
        "sft",
        help="warm-start a model on the synthetic task",
        description="Supervised fine-tuning on the synthetic task's solutions (loss on the response only), then "
        "save to --out with sft_report.json holding the held-out accuracy before and after (greedy and sampled). "
        "Example: prl model sft --model models/tiny --out models/tiny-sft",
    )
    m.add_argument("--model", required=True, help="model directory to start from (e.g. from build-tiny)")
    m.add_argument("--out", required=True, help="output directory for the fine-tuned model")
    add_config_arguments(m, SFTConfig, SFT_OPTIONS, aliases={"max_minutes": ("--minutes",)})
    m.set_defaults(func=_cmd_sft)
