"""``prl generate``: sample responses for a JSONL file of problems (``prl.generation.generate``)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from prl.generation.engines.base import ENGINE_KINDS
from prl.generation.generate import DEFAULT_MAX_TOKENS

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


def register(sub) -> None:
    """Add ``generate`` to the ``prl`` command's subparsers."""
    p = sub.add_parser("generate", help=HELP, description=DESCRIPTION,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, metavar="DIR", help="Hugging Face model directory (weights, tokenizer)")
    p.add_argument("--prompts", required=True, metavar="FILE", help="JSONL file, one object per line with 'problem'")
    p.add_argument("--out", required=True, metavar="FILE", help="output JSONL (one line per sample)")
    p.add_argument("--engine", choices=ENGINE_KINDS, default="vllm", help="generation engine (default vllm)")
    p.add_argument("--n", type=int, default=8, help="samples per problem (default 8)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature, 0 = greedy (default 1.0)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (default 1.0)")
    p.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS,
                   help=f"max new tokens per sample (default {DEFAULT_MAX_TOKENS}; the context also limits it)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    p.add_argument("--stop", action="append", default=[], metavar="STR",
                   help="stop string (repeatable); it is cut from the response")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16", "auto"),
                   help="model dtype (default float32)")
    p.add_argument("--max-model-len", type=int, default=None, help="context length (default: the model's)")
    p.add_argument("--limit", type=int, default=None, metavar="K", help="only the first K problems")
    p.add_argument("--batch-size", type=int, default=None,
                   help="hf engine: sequences per generate call (default 256)")
    p.add_argument("--gpu-memory-utilization", type=float, default=None,
                   help="vllm engine: memory fraction for weights + KV cache (default 0.2 on CPU, 0.9 on GPU)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or status lines")
    p.add_argument("--verbose", action="store_true", help="keep vLLM's INFO logging")
    p.set_defaults(func=_cmd_generate)


def _cmd_generate(args: argparse.Namespace) -> int:
    from prl.generation.engines import EngineError
    from prl.generation.generate import GenerateInputError, run_generate
    from prl.generation.prompts import PromptError

    if not args.verbose:
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
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
            max_model_len=args.max_model_len, limit=args.limit, engine_kwargs=kw, progress=not args.quiet,
            log=None if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True)),
        )
    except (GenerateInputError, EngineError, PromptError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
