"""``prl train --dry-run``: everything a GPU run needs, resolved and printed, with neither a GPU nor the weights.

For a config such as ``configs/train/paper_qwen2.5_math_1.5b.yaml`` it resolves and shows:

- the validated config for the planned world size (``--gpus-per-node`` × ``--nodes``);
- the DeepSpeed config the trainer will pass to ``deepspeed.initialize`` (:func:`prl.training.train.ds_config`);
- the model: a local Hugging Face directory, or — for a hub id that is not on disk — the public
  ``config.json`` shipped in ``configs/models/`` (package data ``prl.model_configs``); parameters are
  counted on torch's meta device (nothing allocated, no weights needed);
- per-GPU memory of the model states for the chosen ZeRO stage from **DeepSpeed's own estimators**
  (``estimate_zero2_model_states_mem_needs`` / ``estimate_zero3_model_states_mem_needs``, and the
  table their ``*_cold`` variants print), plus the frozen reference model's copy. ZeRO 0 is the ZeRO-2
  estimate on one GPU (nothing partitioned); ZeRO 1 is bounded by it (DeepSpeed has no stage-1
  estimator). Activations, the vLLM KV cache (``gpu_memory_utilization``) and CUDA's own overhead
  come on top: the estimators leave them out and so does this plan;
- tokens per step (upper bound: every response at ``max_tokens``) and per rank;
- the chat template and the prompt it renders for a benchmark problem, and how the tokenizer splits a
  sample solution into steps under the config's ``step_split`` (and under ``text:\\n\\n`` for
  comparison): the token boundaries are computed exactly as training computes them
  (ids decoded one by one, :func:`prl_core.steps.step_boundaries`).
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from prl_core.config import ConfigError
from prl_core.steps import parse_split, step_boundaries

from prl.data.datasets import load_dataset
from prl.generation.prompts import build_prompt, template_record
from prl.training.config import RunConfig
from prl.training.train import ds_config

GIB = 1024 ** 3
SAMPLE_DATASET = "math500"
"""The benchmark whose problem and reference solution the plan renders and splits."""
SAMPLE_MIN_CHARS = 1500
"""The sample is the data set's first problem whose reference solution is at least this long (several steps)."""


@dataclass(frozen=True)
class ModelSource:
    """Where the dry run found the model's config (and tokenizer)."""

    name: str
    """``train.model`` as written in the config."""
    config_path: Path
    """The config.json read."""
    local: bool
    """True: a model directory on disk (weights present); False: a shipped config only (cold estimates)."""
    tokenizer: str
    """'local' (the directory's own) or 'qwen2.5' (built offline by prl.models.qwen)."""


def model_configs_dir() -> Path:
    """``configs/models`` of a checkout, or the installed package data ``prl.model_configs`` (as ``sql/``)."""
    here = Path(__file__).resolve().parents[2] / "configs" / "models"
    return here if here.is_dir() else Path(str(resources.files("prl.model_configs")))


def shipped_model_configs() -> dict[str, Path]:
    """``{hub id: folder}`` of the configs shipped in ``configs/models`` (package data ``prl.model_configs``)."""
    out: dict[str, Path] = {}
    for folder in sorted(model_configs_dir().iterdir()):
        meta = folder / "prl_model.json"
        if meta.is_file():
            out[json.loads(meta.read_text(encoding="utf-8"))["hub_id"]] = folder
    return out


def resolve_model(model: str) -> ModelSource:
    """A local model directory, else a shipped config for the hub id; ConfigError naming both otherwise."""
    path = Path(model)
    if (path / "config.json").is_file():
        return ModelSource(model, path / "config.json", True, "local")
    shipped = shipped_model_configs()
    if model in shipped:
        meta = json.loads((shipped[model] / "prl_model.json").read_text(encoding="utf-8"))
        return ModelSource(model, shipped[model] / "config.json", False, meta.get("tokenizer", "local"))
    raise ConfigError(f"train.model: {model!r} is neither a model directory with a config.json nor a hub id whose "
                      f"config ships with prl (configs/models: {', '.join(sorted(shipped)) or 'none'}); download the "
                      "model, or add its public config.json there")


def load_tokenizer(source: ModelSource):
    if source.tokenizer == "qwen2.5":
        from prl.models.qwen import qwen25_tokenizer

        return qwen25_tokenizer()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(source.config_path.parent))


def parameter_counts(config_path: Path) -> dict[str, Any]:
    """Total parameters and the largest layer's (what ZeRO-3's estimator needs), counted on the meta device."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(config_path.parent))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in model.parameters())  # shared (tied) tensors once
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    return {"architecture": type(model).__name__, "total": int(total), "largest_layer": int(largest),
            "tie_word_embeddings": bool(getattr(config, "tie_word_embeddings", False)),
            "hidden_size": config.hidden_size, "layers": config.num_hidden_layers,
            "vocab_size": config.vocab_size, "max_position_embeddings": getattr(config, "max_position_embeddings", None)}


def memory_estimate(total: int, largest: int, *, stage: int, gpus_per_node: int, nodes: int, dtype: str,
                    ref_offload: bool) -> dict[str, Any]:
    """Per-GPU and per-node CPU memory (GiB) of the model states for ``stage``, from DeepSpeed's estimators
    (no offload: the trainer's DeepSpeed config offloads nothing), and the printed ``*_cold`` table."""
    from deepspeed.runtime.zero.stage3 import (estimate_zero3_model_states_mem_needs,
                                               estimate_zero3_model_states_mem_needs_all_cold)
    from deepspeed.runtime.zero.stage_1_and_2 import (estimate_zero2_model_states_mem_needs,
                                                      estimate_zero2_model_states_mem_needs_all_cold)

    table = io.StringIO()
    if stage == 3:
        cpu, gpu, _ = estimate_zero3_model_states_mem_needs(total, largest, gpus_per_node, nodes, cpu_offload=False,
                                                            cpu_offload_params=False, zero_init=True)
        with contextlib.redirect_stdout(table):
            estimate_zero3_model_states_mem_needs_all_cold(total, largest, gpus_per_node, nodes)
        how = "DeepSpeed estimate_zero3_model_states_mem_needs (no offload)"
    else:
        gpus = 1 if stage == 0 else gpus_per_node  # ZeRO 0 partitions nothing: the one-GPU ZeRO-2 figure
        cpu, gpu = estimate_zero2_model_states_mem_needs(total, gpus, 1 if stage == 0 else nodes, cpu_offload=False)
        with contextlib.redirect_stdout(table):
            estimate_zero2_model_states_mem_needs_all_cold(total, gpus_per_node, nodes)
        how = {0: "DeepSpeed estimate_zero2_model_states_mem_needs on 1 GPU (ZeRO 0 partitions nothing)",
               1: "DeepSpeed estimate_zero2_model_states_mem_needs (an upper bound for ZeRO 1, which keeps "
                  "whole gradients; DeepSpeed has no stage-1 estimator)",
               2: "DeepSpeed estimate_zero2_model_states_mem_needs (no offload)"}[stage]
    bytes_per_param = 2 if dtype == "bfloat16" else 4
    reference = total * bytes_per_param
    return {"stage": stage, "method": how, "model_states_gpu_gib": gpu / GIB, "model_states_cpu_gib": cpu / GIB,
            "reference_gib": reference / GIB, "reference_on": "cpu" if ref_offload else "gpu",
            "total_gpu_gib": (gpu + (0 if ref_offload else reference)) / GIB,
            "not_included": "activations, the vLLM engine's weights and KV cache (gpu_memory_utilization), CUDA context",
            "deepspeed_table": table.getvalue().strip()}


def step_preview(tokenizer, text: str, split: str) -> list[dict[str, Any]]:
    """The steps ``split`` makes of ``text`` as training sees it: token ids decoded one by one, boundaries
    from :func:`prl_core.steps.step_boundaries`; one dict (first/last token, tokens, text) per step."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    texts = [tokenizer.decode([i]) for i in ids]
    mask = torch.ones(1, len(ids), dtype=torch.bool)
    sp = parse_split(split)
    bounds = step_boundaries(mask, sp, [texts] if sp.kind == "text" else None)[0].nonzero().flatten().tolist()
    steps, start = [], 0
    for end in bounds:
        steps.append({"first_token": start, "last_token": end, "tokens": end - start + 1,
                      "boundary_token": texts[end], "text": "".join(texts[start:end + 1])})
        start = end + 1
    return steps


def sample_problem() -> tuple[int, str, str]:
    """(line index, problem, reference solution) of the sample, as the benchmark file writes them (its loader
    keeps only the gold answer)."""
    with (resources.files("prl.data") / "benchmarks" / f"{SAMPLE_DATASET}.jsonl").open(encoding="utf-8") as f:
        for i, line in enumerate(f):
            row = json.loads(line)
            if len(row.get("solution") or "") >= SAMPLE_MIN_CHARS:
                return i, row["problem"], row["solution"]
    raise ConfigError(f"{SAMPLE_DATASET}: no solution of {SAMPLE_MIN_CHARS}+ characters to preview")


def plan(cfg: RunConfig, *, gpus_per_node: int = 1, nodes: int = 1) -> dict[str, Any]:
    """Everything ``prl train`` on ``gpus_per_node`` × ``nodes`` GPUs needs, resolved (module docstring)."""
    if gpus_per_node < 1 or nodes < 1:
        raise ConfigError(f"--gpus-per-node and --nodes must be >= 1, got {gpus_per_node} and {nodes}")
    t, algo = cfg.train, cfg.algorithm
    world = gpus_per_node * nodes
    t.validate(algo, world)
    source = resolve_model(t.model)
    params = parameter_counts(source.config_path)
    memory = memory_estimate(params["total"], params["largest_layer"], stage=t.zero_stage,
                             gpus_per_node=gpus_per_node, nodes=nodes, dtype=t.dtype, ref_offload=t.ref_offload)
    tokenizer = load_tokenizer(source)
    index, problem, solution = sample_problem()
    problem_id = load_dataset(SAMPLE_DATASET)[0][index].problem_id
    prompt = build_prompt(tokenizer, problem)
    prompt_tokens = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    rollouts = t.prompts_per_step * algo.n_samples
    splits = [algo.step_split or "token"] + (["text:\\n\\n"] if (algo.step_split or "") != "text:\\n\\n" else [])
    if t.max_tokens > (params["max_position_embeddings"] or t.max_tokens) - prompt_tokens:
        context_note = (f"max_tokens {t.max_tokens} + a {prompt_tokens}-token prompt exceeds the model's context "
                        f"({params['max_position_embeddings']}): long responses end with finish_reason 'length'")
    else:
        context_note = None
    return {
        "config": cfg.to_dict(),
        "world": {"gpus_per_node": gpus_per_node, "nodes": nodes, "world_size": world,
                  "launch": (f"deepspeed --num_gpus {gpus_per_node} --module prl.training.train --config FILE"
                             if nodes == 1 else
                             f"deepspeed --hostfile HOSTFILE --num_nodes {nodes} --num_gpus {gpus_per_node} "
                             "--module prl.training.train --config FILE")},
        "deepspeed": ds_config(t, world),
        "model": {**asdict(source), "config_path": str(source.config_path), **params},
        "memory": memory,
        "tokens": {"rollouts_per_step": rollouts, "rollouts_per_rank": rollouts // world,
                   "response_tokens_per_step_max": rollouts * t.max_tokens,
                   "response_tokens_per_rank_max": rollouts // world * t.max_tokens,
                   "sample_prompt_tokens": prompt_tokens,
                   "optimizer_updates_per_step": (rollouts // world // t.mini_batch_size) * t.ppo_epochs,
                   "micro_batches_per_update": t.mini_batch_size // t.micro_batch_size,
                   "context_note": context_note},
        "prompt": {**template_record(tokenizer), "sample_problem": f"{SAMPLE_DATASET} {problem_id}",
                   "rendered": prompt},
        "steps": {split: step_preview(tokenizer, solution, split) for split in splits},
        "sample_solution_tokens": len(tokenizer(solution, add_special_tokens=False)["input_ids"]),
    }


def render(p: dict[str, Any]) -> str:
    """The plan as the console shows it."""
    m, mem, tok, w = p["model"], p["memory"], p["tokens"], p["world"]
    t = p["config"]["train"]
    lines = [
        f"[dry-run] {t['run_id'] or Path(t['out_dir']).name}: {p['config']['algorithm']['estimator']} on {m['name']} "
        f"({'local directory' if m['local'] else 'shipped config ' + m['config_path'] + ', no weights'})",
        f"  model       {m['architecture']}: {m['total'] / 1e9:.3f} B parameters (largest layer {m['largest_layer'] / 1e6:.1f} M), "
        f"{m['layers']} layers, hidden {m['hidden_size']}, vocab {m['vocab_size']}, context {m['max_position_embeddings']}, "
        f"tied embeddings {m['tie_word_embeddings']}",
        f"  world       {w['world_size']} GPU(s) = {w['gpus_per_node']} per node x {w['nodes']} node(s); launch: {w['launch']}",
        f"  memory/GPU  model states {mem['model_states_gpu_gib']:.1f} GiB (ZeRO {mem['stage']}, {t['dtype']}) + reference "
        f"{mem['reference_gib']:.1f} GiB on {mem['reference_on']} = {mem['total_gpu_gib']:.1f} GiB; CPU per node "
        f"{mem['model_states_cpu_gib']:.1f} GiB",
        f"              method: {mem['method']}; not included: {mem['not_included']}",
        f"  tokens      {tok['rollouts_per_step']} rollouts/step ({tok['rollouts_per_rank']}/rank), at most "
        f"{tok['response_tokens_per_step_max']:,} response tokens/step ({tok['response_tokens_per_rank_max']:,}/rank); "
        f"{tok['optimizer_updates_per_step']} optimizer update(s)/step of {tok['micro_batches_per_update']} micro-batches",
    ]
    if tok["context_note"]:
        lines.append(f"              note: {tok['context_note']}")
    lines += ["", "DeepSpeed config:", json.dumps(p["deepspeed"], indent=2), "",
              "DeepSpeed's estimate for all ZeRO options of this stage (*_cold):", mem["deepspeed_table"], "",
              f"Chat template ({p['prompt']['format']}, sha256 {p['prompt']['template_sha256'][:16]}…); the prompt "
              f"of {p['prompt']['sample_problem']} ({tok['sample_prompt_tokens']} tokens):",
              repr(p["prompt"]["rendered"]), ""]
    for split, steps in p["steps"].items():
        lines.append(f"Step split {split!r} of the reference solution ({p['sample_solution_tokens']} tokens): "
                     f"{len(steps)} step(s)")
        for i, s in enumerate(steps[:12]):
            lines.append(f"  step {i}: tokens {s['first_token']}-{s['last_token']} ({s['tokens']}), ends with "
                         f"{s['boundary_token']!r}: {s['text'][:70]!r}")
        if len(steps) > 12:
            lines.append(f"  … {len(steps) - 12} more")
    return "\n".join(lines)
