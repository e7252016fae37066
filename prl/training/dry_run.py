"""``prl train --dry-run``: everything a GPU run needs, resolved and printed, with neither a GPU nor the weights.

For a config such as ``configs/train/paper_qwen2.5_math_1.5b.yaml`` it resolves and shows:

- the validated config for the planned world size (``--gpus-per-node`` × ``--nodes``);
- the DeepSpeed config the trainer will pass to ``deepspeed.initialize`` (:func:`prl.training.distributed.ds_config`);
- the model: a local Hugging Face directory, or — for a hub id that is not on disk — the public
  ``config.json`` shipped in ``configs/models/`` (package data ``prl.model_configs``); parameters are
  counted on torch's meta device (nothing allocated, no weights needed);
- per-GPU memory of the model states for the chosen ZeRO stage from **DeepSpeed's own estimators**
  (``estimate_zero2_model_states_mem_needs`` / ``estimate_zero3_model_states_mem_needs``, and the
  table their ``*_cold`` variants print);
- the memory of one rank term by term — model states, reference, the rollout engine, activations,
  the log-prob chunk, CUDA's own overhead — in each phase of a step, and whether it **fits** on a named
  device (:mod:`prl.training.memory`; ``--device``), with what to change when it does not;
- tokens per step (upper bound: every response at ``max_tokens``) and per rank;
- the chat template and the prompt it renders for a benchmark problem, and how the tokenizer splits a
  sample solution into steps under the config's ``step_split`` (and under ``text:\\n\\n`` for
  comparison): the token boundaries are computed exactly as training computes them
  (:func:`prl.training.segments.split_boundaries`: ids decoded one by one, then
  :func:`prl_core.boundaries.step_boundaries`).
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import asdict, dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from prl_core.config import ConfigError
from prl_core.boundaries import segment_bounds

from prl.data.datasets import load_dataset
from prl.generation.prompts import build_prompt, template_record
from prl.training.config import RunConfig
from prl.training import memory as mem
from prl.training.distributed import ds_config
from prl.training.segments import split_boundaries, token_texts

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
    """'local' (the directory's own), 'qwen2.5' (built offline by prl.models.qwen) or 'llama3.2' (prl.models.llama)."""


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
    if source.tokenizer == "llama3.2":
        from prl.models.llama import llama32_tokenizer

        return llama32_tokenizer()
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
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return {"architecture": type(model).__name__, "total": int(total), "largest_layer": int(largest),
            "tie_word_embeddings": bool(getattr(config, "tie_word_embeddings", False)),
            "hidden_size": config.hidden_size, "layers": config.num_hidden_layers,
            "vocab_size": config.vocab_size, "max_position_embeddings": getattr(config, "max_position_embeddings", None),
            "kv_dim": int(getattr(config, "num_key_value_heads", heads) * head_dim),
            "intermediate_size": int(getattr(config, "intermediate_size", 0) or 4 * config.hidden_size)}


def memory_estimate(total: int, largest: int, *, stage: int, gpus_per_node: int, nodes: int) -> dict[str, Any]:
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
    return {"stage": stage, "method": how, "model_states_gpu_gib": gpu / GIB, "model_states_cpu_gib": cpu / GIB,
            "deepspeed_table": table.getvalue().strip()}


def step_preview(tokenizer, text: str, split: str) -> list[dict[str, Any]]:
    """The steps ``split`` makes of ``text`` as training sees it (:func:`prl.training.segments.split_boundaries`,
    :func:`prl_core.boundaries.segment_bounds`); one dict (first/last token, tokens, text) per step."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    texts = token_texts(tokenizer, ids)
    bounds = split_boundaries(tokenizer, [ids], torch.ones(1, len(ids), dtype=torch.bool), split)[0]
    return [{"first_token": start, "last_token": end, "tokens": end - start + 1, "boundary_token": texts[end],
             "text": "".join(texts[start:end + 1])} for start, end in segment_bounds(bounds)]


def sample_problem() -> tuple[int, str, str]:
    """(line index, problem, reference solution) of the sample, as the benchmark file writes them (its loader
    keeps only the gold answer)."""
    with (resources.files("prl.data") / "benchmarks" / f"{SAMPLE_DATASET}.jsonl").open(encoding="utf-8") as f:
        for i, line in enumerate(f):
            row = json.loads(line)
            if len(row.get("solution") or "") >= SAMPLE_MIN_CHARS:
                return i, row["problem"], row["solution"]
    raise ConfigError(f"{SAMPLE_DATASET}: no solution of {SAMPLE_MIN_CHARS}+ characters to preview")


def longest_prompt_tokens(t, tokenizer, sample_tokens: int, *, limit: int = 2000) -> dict[str, Any]:
    """The longest rendered prompt (tokens) the run will see, from up to ``limit`` of its training problems when
    they are at hand; otherwise the benchmark sample's prompt (and the plan says so)."""
    try:
        if t.train_data == "synth_train":
            from prl.data import synthetic

            problems = [r["problem"] for r in synthetic.generate("train", min(limit, t.train_size), seed=t.seed)]
        elif Path(t.train_data).is_file():
            problems = [p.problem for p in load_dataset(t.train_data)[0][:limit]]
        else:
            raise FileNotFoundError(t.train_data)
    except (FileNotFoundError, OSError):
        return {"tokens": sample_tokens, "from": f"the {SAMPLE_DATASET} sample's prompt ({t.train_data} is not here)"}
    lengths = [len(x) for x in tokenizer([build_prompt(tokenizer, p) for p in problems],
                                         add_special_tokens=False)["input_ids"]]
    return {"tokens": max(lengths), "from": f"the longest of {len(problems)} training prompts of {t.train_data}"}


def plan_rank_memory(t, source: ModelSource, params: dict[str, Any], memory: dict[str, Any], *, world: int,
                     device: str, prompt_tokens: int, rollouts_per_rank: int,
                     with_reference: bool = True) -> dict[str, Any]:
    """:func:`prl.training.memory.plan_memory` for this config, the layer probed on the model's own architecture;
    when it does not fit, each fix re-planned; with ``ref_offload``, the reference's CPU time per step."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(source.config_path.parent))
    dtype = torch.bfloat16 if t.dtype == "bfloat16" else torch.float32
    shape = mem.ModelShape(params=params["total"], largest_layer=params["largest_layer"], layers=params["layers"],
                           hidden=params["hidden_size"], vocab=params["vocab_size"], kv_dim=params["kv_dim"],
                           intermediate=params.get("intermediate_size", 0))
    profile = mem.probe_layer(config, dtype)
    if device == "cpu":
        capacity = machine_memory_gib()
        baseline = cpu_baseline_bytes(t.engine)
    else:
        capacity, baseline = mem.GPUS[device], 0.0
    kw = dict(shape=shape, profile=profile, world=world, device=device, capacity_gib=capacity,
              prompt_tokens=prompt_tokens, rollouts_per_rank=rollouts_per_rank, baseline_bytes=baseline,
              with_reference=with_reference)

    def states(stage: int) -> float:  # DeepSpeed's estimate of the model states per GPU for a ZeRO stage
        if stage == t.zero_stage:
            return memory["model_states_gpu_gib"] * GIB
        return memory_estimate(params["total"], params["largest_layer"], stage=stage, gpus_per_node=world,
                               nodes=1)["model_states_gpu_gib"] * GIB

    out = mem.plan_memory(t=t, deepspeed_gpu_bytes=states(t.zero_stage), **kw)
    out["fixes"] = []
    if not out["fits"]:
        for change, why in mem.fixes(out, t):
            changed = replace(t, **change)
            again = mem.plan_memory(t=changed, deepspeed_gpu_bytes=states(changed.zero_stage), **kw)
            out["fixes"].append({"change": change, "why": why, "peak_gib": again["peak_gib"], "fits": again["fits"]})
    if t.ref_offload and with_reference:
        out["reference_cpu_seconds_per_step"] = reference_cpu_seconds(params["total"], rollouts_per_rank,
                                                                      prompt_tokens + t.max_tokens)
    return out


def machine_memory_gib() -> float:
    import psutil

    return psutil.virtual_memory().total / GIB


def cpu_baseline_bytes(engine: str) -> float:
    """This process's resident memory with what a training process imports before it loads a model (torch,
    transformers, DeepSpeed and, for the vllm engine, vLLM): the CPU plan's overhead term."""
    import psutil

    if engine == "vllm":
        with contextlib.redirect_stderr(io.StringIO()):
            import vllm  # noqa: F401 - imported for its resident memory
    import deepspeed  # noqa: F401
    import transformers  # noqa: F401

    return float(psutil.Process().memory_info().rss)


def reference_cpu_seconds(params: int, rollouts: int, sequence: int) -> dict[str, float]:
    """The reference's forward pass on the CPU for one step of this rank (2 FLOPs per parameter and token), at
    this machine's measured fp32 matrix-multiply rate (the GPU node's CPU may differ)."""
    import time

    n, reps = 1024, 5
    a = torch.randn(n, n)
    torch.mm(a, a)
    t0 = time.perf_counter()
    for _ in range(reps):
        torch.mm(a, a)
    flops = 2 * n ** 3 * reps / (time.perf_counter() - t0)
    work = 2.0 * params * rollouts * sequence
    return {"seconds": work / flops, "gflops_measured": flops / 1e9, "tokens": rollouts * sequence}


def default_device(cfg: RunConfig) -> str:
    """The device a config is planned for unless told: the CPU for float32 configs (the embedded default), an
    80 GB H100 (the paper's) for bfloat16 ones."""
    return "cpu" if cfg.train.dtype == "float32" else "H100-80GB"


def plan(cfg: RunConfig, *, gpus_per_node: int = 1, nodes: int = 1, device: str | None = None) -> dict[str, Any]:
    """Everything ``prl train`` on ``gpus_per_node`` × ``nodes`` devices needs, resolved (module docstring);
    the memory of one rank planned on ``device`` (a name of :data:`prl.training.memory.GPUS`, or 'cpu')."""
    if gpus_per_node < 1 or nodes < 1:
        raise ConfigError(f"--gpus-per-node and --nodes must be >= 1, got {gpus_per_node} and {nodes}")
    device = device or default_device(cfg)
    if device != "cpu" and device not in mem.GPUS:
        raise ConfigError(f"--device: expected cpu or one of {', '.join(mem.GPUS)}, got {device!r}")
    t, algo = cfg.train, cfg.algorithm
    world = gpus_per_node * nodes
    t.validate(algo, world)
    source = resolve_model(t.model)
    params = parameter_counts(source.config_path)
    memory = memory_estimate(params["total"], params["largest_layer"], stage=t.zero_stage,
                             gpus_per_node=gpus_per_node, nodes=nodes)
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
    longest = longest_prompt_tokens(t, tokenizer, prompt_tokens)
    memory_plan = plan_rank_memory(t, source, params, memory, world=world, device=device,
                                   prompt_tokens=longest["tokens"], rollouts_per_rank=rollouts // world,
                                   with_reference=t.needs_reference(algo))
    memory_plan["prompt_tokens_from"] = longest["from"]
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
        "memory_plan": memory_plan,
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


def render_memory(mp: dict[str, Any]) -> list[str]:
    """The memory plan of one rank, term by term, and the verdict."""
    where = "CPU" if mp["device"] == "cpu" else mp["device"]
    inp = mp["inputs"]
    lines = [f"Memory of one rank on {where} ({mp['capacity_gib']:.1f} GiB): micro-batch of {inp['micro_batch_tokens']:,} "
             f"positions (sequences of up to {inp['sequence']:,} tokens; prompts of up to {inp['prompt_tokens']} tokens "
             f"from {mp.get('prompt_tokens_from', '?')})",
             f"  {'term':<16}{'rollout':>9}{'logprobs':>10}{'update':>9}{'export':>9}   how"]
    for term in mp["terms"]:
        by = term["phases"] or {k: term["gib"] for k in mem.PHASES}
        lines.append(f"  {term['name']:<16}{by['rollout']:>9.2f}{by['logprobs']:>10.2f}{by['update']:>9.2f}"
                     f"{by.get('export', by['rollout']):>9.2f}   {term['how']}")
    ph = mp["phases_gib"]
    lines.append(f"  {'total (GiB)':<16}{ph['rollout']:>9.2f}{ph['logprobs']:>10.2f}{ph['update']:>9.2f}"
                 f"{ph.get('export', ph['rollout']):>9.2f}")
    if mp["fits"]:
        lines.append(f"  FITS: peak {mp['peak_gib']:.1f} GiB in the {mp['peak_phase']} phase, {mp['headroom_gib']:.1f} GiB "
                     f"to spare on {where}")
    else:
        lines.append(f"  DOES NOT FIT: peak {mp['peak_gib']:.1f} GiB in the {mp['peak_phase']} phase, "
                     f"{-mp['headroom_gib']:.1f} GiB more than {where} has. What to change:")
        for f in mp["fixes"]:
            change = ", ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in f["change"].items())
            lines.append(f"    train.{change}  ({f['why']}) -> peak {f['peak_gib']:.1f} GiB"
                         f"{', fits' if f['fits'] else ''}")
    if "reference_cpu_seconds_per_step" in mp:
        r = mp["reference_cpu_seconds_per_step"]
        lines.append(f"  WARNING: ref_offload runs the reference on the CPU: ~{r['seconds'] / 60:.0f} min per step for "
                     f"{r['tokens']:,} tokens at this machine's {r['gflops_measured']:.0f} GFLOP/s; under ZeRO-3 the "
                     "reference is partitioned on the GPUs instead")
    return lines


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
        f"  world       {w['world_size']} rank(s) = {w['gpus_per_node']} per node x {w['nodes']} node(s), one "
        f"{'process' if p['memory_plan']['device'] == 'cpu' else 'GPU'} each; launch: {w['launch']}",
        f"  ZeRO        stage {mem['stage']} ({t['dtype']}): DeepSpeed's estimate of the model states "
        f"{mem['model_states_gpu_gib']:.1f} GiB per GPU, {mem['model_states_cpu_gib']:.1f} GiB of CPU memory per node",
        f"              method: {mem['method']}",
        f"  tokens      {tok['rollouts_per_step']} rollouts/step ({tok['rollouts_per_rank']}/rank), at most "
        f"{tok['response_tokens_per_step_max']:,} response tokens/step ({tok['response_tokens_per_rank_max']:,}/rank); "
        f"{tok['optimizer_updates_per_step']} optimizer update(s)/step of {tok['micro_batches_per_update']} micro-batches",
    ]
    if tok["context_note"]:
        lines.append(f"              note: {tok['context_note']}")
    lines += [""] + render_memory(p["memory_plan"])
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
