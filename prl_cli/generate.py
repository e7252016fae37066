"""``prl generate``: sample responses for a JSONL file of problems (``prl.generation.generate``)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

from prl.generation.engines.base import ENGINE_KINDS, SamplingConfig
from prl.options import add_config_arguments, option

from prl_cli.common import OutputOptions, show_progress

HELP = "sample responses for a JSONL file of problems (vLLM or transformers)"
DESCRIPTION = """\
Generate N responses per problem with the model's own chat template and the evaluation prompt
of docs/architecture.md §Evaluation protocol, and write one JSONL line per sample (problem_index,
problem_id, sample_index, prompt, response, finish_reason, n_tokens, token_ids, logprobs) plus
OUT_STEM.manifest.json (engine and version, sampling settings, seed, chat-template hash, package
versions, git commit).

Defaults follow the paper's evaluation: n=8, temperature 1.0, top_p 1, 3072 new tokens.
The same seed, settings and weights give the same samples (vLLM: per prompt, whatever else is
in the file; hf: per batch). Engines: 'vllm' (vLLM LLM API; the CPU build needs head_dim >= 32
and starts in ~20 s) or 'hf' (transformers.generate, for machines without vLLM).

example:
  prl generate --model models/tiny --prompts data/synth_test.jsonl --n 8 --out runs/tiny.samples.jsonl
"""


@dataclass
class GenerateOptions:
    """`prl generate`'s files, engine and output switches (the sampling settings are ``SamplingConfig``'s)."""

    model: str = option(metavar="DIR")
    """Hugging Face model directory (weights, tokenizer)."""
    prompts: str = option(metavar="FILE")
    """JSONL file, one object per line with 'problem'."""
    out: str = option(metavar="FILE")
    """Output JSONL (one line per sample)."""
    engine: str = option("vllm", choices=ENGINE_KINDS)
    """Generation engine."""
    dtype: str = option("float32", choices=("float32", "bfloat16", "float16", "auto"))
    """Model dtype."""
    max_model_len: int | None = None
    """Context length (default: the model's)."""
    limit: int | None = option(None, metavar="K")
    """Only the first K problems."""
    batch_size: int | None = None
    """hf engine: sequences per generate call (default 256)."""
    gpu_memory_utilization: float | None = None
    """vllm engine: memory fraction for weights + KV cache (default 0.2 on CPU, 0.9 on GPU)."""


def register(sub) -> None:
    """Add ``generate`` to the ``prl`` command's subparsers."""
    p = sub.add_parser("generate", help=HELP, description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arguments(p, GenerateOptions)
    add_config_arguments(p, SamplingConfig)  # n, temperature, top_p, max_tokens, stop, seed: one source of defaults
    add_config_arguments(p, OutputOptions)
    p.set_defaults(func=_cmd_generate)


def _cmd_generate(args: argparse.Namespace) -> int:
    from prl.generation.generate import run_generate

    kw: dict[str, Any] = {}
    if args.engine == "vllm":
        kw["in_process"] = None  # a dedicated process: in-process engine on CPU (faster start and generation)
    if args.batch_size is not None:
        if args.engine != "hf":
            print("error: --batch-size applies to --engine hf (vLLM schedules its own batches)", file=sys.stderr)
            return 2
        kw["batch_size"] = args.batch_size
    if args.gpu_memory_utilization is not None:
        if args.engine != "vllm":
            print("error: --gpu-memory-utilization applies to --engine vllm", file=sys.stderr)
            return 2
        kw["gpu_memory_utilization"] = args.gpu_memory_utilization
    try:
        run_generate(
            args.model, args.prompts, args.out, engine=args.engine, n=args.n, temperature=args.temperature,
            top_p=args.top_p, max_tokens=args.max_tokens, seed=args.seed, stop=tuple(args.stop), dtype=args.dtype,
            max_model_len=args.max_model_len, limit=args.limit, engine_kwargs=kw, progress=show_progress(args),
            log=None if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True)),
        )
    except ValueError as e:  # SamplingConfig's checks (the package's own errors reach main as UserError)
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
