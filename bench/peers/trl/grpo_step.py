"""TRL's GRPOTrainer on CPU, configured as our GRPO training step, timed per generation batch ("step").

Runs inside bench/.envs/trl (made by bench/peers/trl/make_env.sh), never the project's .venv:

    bench/.envs/trl/bin/python bench/peers/trl/grpo_step.py --model DIR --prompts FILE.jsonl --out OUT.json \
        [--steps 3] [--warmup-steps 1] [--prompts-per-step 16] [--group 5] [--max-tokens 96] [--lr 1e-5] \
        [--micro-batch 8] [--grad-accum 2] [--threads 2] [--seed 0]

FILE.jsonl rows are {"prompt": "<chat-templated prompt text>", "gold": "<answer>"}; the prompts are given to TRL
as *standard* (non-conversational) prompts, so TRL tokenizes the text as it is and applies no chat template.

One step = one TRL generation batch: prompts_per_step x group completions (16 x 5 = 80) sampled with HF generate
(temperature 1, top_p 1, top_k off), rewarded, old log-probs computed, then (prompts_per_step x group) /
(micro_batch x grad_accum) optimizer steps (80 / 16 = 5), each of grad_accum micro-batches of micro_batch
completions. The script asserts that TRL really did that.

Per step it reports the wall time and its phases:
  generate_and_score_s  the time inside GRPOTrainer._generate_and_score_completions (generation, decoding,
                        reward, advantages, old log-probs), split into generate_s (model.generate),
                        reward_s (the reward function), old_logprob_s (the no-grad log-prob forward passes) and
                        other_gen_s (the rest: tokenizing, decoding, padding, advantages);
  optimizer_s           the rest of the step: fwd_bwd_s (the loss forward/backward passes, i.e. the time in
                        Trainer.training_step less the generation it triggers) and opt_step_s (the rest: gradient
                        clipping, AdamW step, zero_grad, the Trainer loop's own bookkeeping).
The first --warmup-steps steps are reported but left out of the medians.

Loss: loss_type='bnpo' (token-mean over each micro-batch, divided by grad_accum) is exactly our token-mean under
DeepSpeed's 1/GA backward scaling; delta=3 (TRL's two-sided clip) gives exactly our dual clip c=3; beta=0 (no
reference model). The report's "vs_prl" lists every setting of ours, the TRL setting used for it and whether it
matches exactly.

Prints one summary line on stdout; everything TRL/transformers print goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

# No hub, no telemetry, no tokenizer threads: set before transformers/trl are imported.
for _k, _v in {
    "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled", "WANDB_DISABLED": "true",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
}.items():
    os.environ.setdefault(_k, _v)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a Hugging Face causal-LM directory (loaded in float32 on CPU)")
    ap.add_argument("--prompts", required=True, help='JSON lines {"prompt": <templated text>, "gold": <answer>}')
    ap.add_argument("--out", required=True, help="where the JSON report goes")
    ap.add_argument("--steps", type=int, default=3, help="generation batches (steps) in all, warm-up included")
    ap.add_argument("--warmup-steps", type=int, default=1, help="first steps left out of the medians")
    ap.add_argument("--prompts-per-step", type=int, default=16)
    ap.add_argument("--group", type=int, default=5, help="completions per prompt (GRPO group size)")
    ap.add_argument("--max-tokens", type=int, default=96, help="max completion length")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--micro-batch", type=int, default=8, help="completions per forward/backward pass")
    ap.add_argument("--grad-accum", type=int, default=2, help="micro-batches per optimizer step")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--in-order", action="store_true",
                    help="draw the prompts in the file's order (shuffle_dataset=False): bench/peers.py writes them in "
                         "the order our trainer draws them, so both sides see the same prompts at every step")
    ap.add_argument("--loss-type", default="bnpo", choices=["bnpo", "dapo"],
                    help="bnpo (default): token-mean over each micro-batch, averaged over the grad-accum micro-batches "
                         "= our token-mean under DeepSpeed's 1/GA backward scaling; dapo: the generation batch's "
                         "tokens / optimizer steps as one constant normalizer (TRL's default)")
    ap.add_argument("--delta", default="3.0",
                    help="TRL's two-sided clip bound on the ratio (GRPOConfig.delta); 3.0 (default) reproduces our "
                         "dual clip c=3 exactly; 'none' disables it")
    a = ap.parse_args(argv)
    if a.steps < 1 or a.warmup_steps < 0 or a.warmup_steps >= a.steps:
        ap.error(f"need steps >= 1 and 0 <= warmup-steps < steps (got {a.steps}, {a.warmup_steps})")
    if str(a.delta).lower() in ("none", "null", ""):
        a.delta = None
    else:
        a.delta = float(a.delta)
        if a.delta <= 1.2:
            ap.error("--delta must be > 1 + epsilon_high (1.2) to act as a dual clip")
    if a.group < 2:
        ap.error("--group must be >= 2")
    per_step = a.prompts_per_step * a.group
    if per_step % (a.micro_batch * a.grad_accum):
        ap.error(f"prompts-per-step x group = {per_step} is not a multiple of micro-batch x grad-accum = "
                 f"{a.micro_batch * a.grad_accum}")
    return a


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} in text (braces balanced), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i = start + len("\\boxed{")
    depth, j = 1, i
    while j < len(text):
        c = text[j]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
        j += 1
    return None  # unclosed


def read_prompts(path: str) -> list[dict[str, str]]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            r = json.loads(line)
            if not isinstance(r.get("prompt"), str) or "gold" not in r:
                raise SystemExit(f"{path}:{n}: expected {{'prompt': str, 'gold': ...}}")
            rows.append({"prompt": r["prompt"], "gold": str(r["gold"])})
    return rows


def peak_rss_mib() -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def mapping(a: argparse.Namespace, per_step: int, opt_steps: int) -> list[dict[str, str]]:
    """Our GRPO step's settings, the TRL setting used for each, and whether it matches exactly."""
    loss = (
        ("loss_type='bnpo': token-mean over each micro-batch of per_device_train_batch_size, divided by the "
         "gradient_accumulation_steps", "exact")
        if a.loss_type == "bnpo" else
        ("loss_type='dapo': per-micro-batch token sum / (generation batch's response tokens x grad_accum / "
         "steps_per_generation), i.e. one constant normalizer per generation batch", "differs")
    )
    dual = (
        (f"delta={a.delta}: ratio clamped at delta in the unclipped branch; for delta > 1+eps this gives the same "
         "loss and gradient as dual clip c=delta (advantages < 0) and leaves advantages > 0 alone", "exact")
        if a.delta is not None else ("delta=None: no dual clip", "differs")
    )
    rows = [
        ("prompts_per_step x n_samples", f"{a.prompts_per_step} x {a.group}",
         f"generation_batch_size={per_step} (steps_per_generation={per_step // a.micro_batch} x "
         f"per_device_train_batch_size={a.micro_batch}), num_generations={a.group}", "exact"),
        ("mini_batch_size / micro_batch_size", f"{a.micro_batch * a.grad_accum} / {a.micro_batch}",
         f"per_device_train_batch_size={a.micro_batch}, gradient_accumulation_steps={a.grad_accum}: "
         f"{opt_steps} optimizer steps per generation batch", "exact"),
        ("ppo_epochs", "1", "num_iterations=1", "exact"),
        ("mini-batch order", "random permutation of the rollouts",
         "TRL shuffles the generation batch (shuffle_sequence_dict) before splitting it", "same kind"),
        ("loss_agg", "token-mean per micro-batch, DeepSpeed backward scales by 1/GA", *loss),
        ("clip_low / clip_high", "0.2 / 0.2", "epsilon=0.2, epsilon_high=0.2", "exact"),
        ("dual_clip", "3.0", *dual),
        ("log-ratio clamp", "|log w| <= 20 before exp", "none", "differs (inert unless |log w| > 20)"),
        ("kl_loss_coef", "0 (ref log-probs still computed)", "beta=0.0: no ref model, no ref log-probs",
         "differs: our step does one more no-grad forward pass per micro-batch"),
        ("advantages", "(r - mean_g) / (std_g + 1e-6), unbiased std", "scale_rewards='group': (r - mean_g) / "
         "(std_g + 1e-4), unbiased std", "eps differs (1e-6 vs 1e-4)"),
        ("temperature / top_p", "1.0 / 1.0", "temperature=1.0, top_p=1.0, top_k=0, HF generate (use_vllm=False)",
         "exact"),
        ("max_tokens", str(a.max_tokens), f"max_completion_length={a.max_tokens}", "exact"),
        ("truncated responses", "kept in the loss", "mask_truncated_completions=False", "exact"),
        ("optimizer", "DeepSpeed AdamW (torch_adam: torch.optim.AdamW), betas 0.9/0.999, eps 1e-8",
         "optim='adamw_torch' (torch.optim.AdamW), betas 0.9/0.999, eps 1e-8", "exact"),
        ("lr / warm-up / weight decay", f"{a.lr} / none (constant) / 0", f"learning_rate={a.lr}, "
         "lr_scheduler_type='constant', warmup_steps=0, weight_decay=0.0", "exact"),
        ("grad_clip", "1.0", "max_grad_norm=1.0", "exact"),
        ("dtype", "fp32", "bf16=False, fp16=False, float32 weights, gradient_checkpointing=False", "exact"),
        ("engine", "DeepSpeed engine, ZeRO stage 0, on CPU",
         "transformers Trainer + accelerate, DistributedType.NO, use_cpu=True", "differs"),
        ("reward", "math verifier on the response", "last \\boxed{...} stripped == gold string",
         "differs (cost negligible on both sides)"),
        ("prompts", "the pool, our own order", "the same pool, TRL RepeatSampler order (seeded)",
         "same pool and count, different draw"),
    ]
    return [{"prl": r[0], "prl_value": r[1], "trl": r[2], "match": r[3]} for r in rows]


def main(argv: list[str] | None = None) -> dict:
    a = parse_args(argv)
    real_stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # whatever TRL/transformers print goes to stderr
        report = run(a)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(report, indent=2) + "\n")
    m = report["median"]
    print(
        f"trl {report['versions']['trl']} GRPO: {report['measured_steps']} measured step(s) of "
        f"{report['completions_per_step']} completions / {report['optimizer_steps_per_step']} optimizer steps; "
        f"median step {m['wall_s']:.2f}s = generate+score {m['generate_and_score_s']:.2f}s "
        f"(generate {m['generate_s']:.2f}s) + optimizer {m['optimizer_s']:.2f}s; "
        f"mean completion {m['mean_completion_tokens']:.1f} tok; peak RSS {report['peak_rss_mib']:.0f} MiB -> {a.out}",
        file=real_stdout,
    )
    return report


def run(a: argparse.Namespace) -> dict:
    import torch

    torch.set_num_threads(a.threads)

    import accelerate
    import datasets
    import transformers
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    transformers.logging.set_verbosity_warning()
    datasets.disable_progress_bars()
    transformers.set_seed(a.seed)

    rows = read_prompts(a.prompts)
    if len(rows) < a.prompts_per_step:
        raise SystemExit(f"{a.prompts}: {len(rows)} prompts, fewer than --prompts-per-step {a.prompts_per_step}")
    dataset = datasets.Dataset.from_list(rows)

    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    model.to("cpu")

    per_step = a.prompts_per_step * a.group
    opt_batch = a.micro_batch * a.grad_accum
    opt_steps_per_gen = per_step // opt_batch
    micro_per_gen = per_step // a.micro_batch  # = TRL's steps_per_generation (counted in micro-batches)

    # ---- timing state -------------------------------------------------------------------------------
    recs: list[dict] = []            # one per generation batch
    cur: dict = {}                   # the step being timed
    inside_gen = [False]

    def new_rec() -> dict:
        return {"t_start": None, "t_end": None, "generate_and_score_s": 0.0, "generate_s": 0.0, "reward_s": 0.0,
                "old_logprob_s": 0.0, "training_step_s": 0.0, "generate_calls": 0, "reward_calls": 0,
                "generations": 0, "training_steps": 0, "optimizer_steps": 0, "rewards": [], "completions": 0}

    def reward_fn(prompts, completions, gold, **kwargs):
        t0 = time.perf_counter()
        out = []
        for c, g in zip(completions, gold, strict=True):
            b = last_boxed(c)
            out.append(1.0 if b is not None and b.strip() == str(g).strip() else 0.0)
        cur["reward_s"] += time.perf_counter() - t0
        cur["reward_calls"] += 1
        cur["rewards"].extend(out)
        return out

    reward_fn.__name__ = "boxed_exact_match"

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            if state.global_step % opt_steps_per_gen == 0:
                cur.clear()
                cur.update(new_rec())
                cur["metric_marks"] = {k: len(v) for k, v in trainer._metrics["train"].items()}
                cur["t_start"] = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            cur["optimizer_steps"] += 1
            if state.global_step % opt_steps_per_gen == 0:
                cur["t_end"] = time.perf_counter()
                # TRL's own metrics for this step (its logging is off, so they accumulate): mean of the new entries
                marks = cur["metric_marks"]
                cur["trl_metrics"] = {}
                for k, v in trainer._metrics["train"].items():
                    new = [float(x) for x in v[marks.get(k, 0):]]
                    if new:
                        cur["trl_metrics"][k] = sum(new) / len(new)
                recs.append(dict(cur))

    with tempfile.TemporaryDirectory(prefix="trl_grpo_step_") as tmp:
        cfg = GRPOConfig(
            output_dir=tmp,
            # batch geometry: one generation of per_step completions feeds opt_steps_per_gen optimizer steps
            per_device_train_batch_size=a.micro_batch,
            gradient_accumulation_steps=a.grad_accum,
            steps_per_generation=micro_per_gen,
            num_generations=a.group,
            num_iterations=1,
            max_steps=a.steps * opt_steps_per_gen,
            # sampling
            max_completion_length=a.max_tokens,
            temperature=1.0, top_p=1.0, top_k=0, min_p=None, repetition_penalty=1.0,
            use_vllm=False, use_transformers_continuous_batching=False,
            # loss
            beta=0.0, epsilon=0.2, epsilon_high=0.2, delta=a.delta, importance_sampling_level="token",
            loss_type=a.loss_type, scale_rewards="group", mask_truncated_completions=False,
            top_entropy_quantile=1.0,
            # optimizer: torch AdamW (not fused), constant lr, no warm-up, no weight decay, grad-norm clip 1
            optim="adamw_torch", learning_rate=a.lr, weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999,
            adam_epsilon=1e-8, lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=1.0,
            # fp32 on CPU, no gradient checkpointing (GRPOConfig defaults: bf16=True, gradient_checkpointing=True)
            use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
            # data order: TRL's RepeatSampler shuffles the pool with this seed
            seed=a.seed, data_seed=a.seed, shuffle_dataset=not a.in_order, dataloader_num_workers=0,
            remove_unused_columns=False,
            # no logging, saving or eval
            report_to="none", logging_strategy="no", save_strategy="no", eval_strategy="no",
            log_completions=False, disable_tqdm=True,
        )
        assert cfg.generation_batch_size == per_step, (cfg.generation_batch_size, per_step)
        assert cfg.steps_per_generation == micro_per_gen, (cfg.steps_per_generation, micro_per_gen)

        trainer = GRPOTrainer(model=model, reward_funcs=[reward_fn], args=cfg, train_dataset=dataset,
                              processing_class=tok, callbacks=[StepClock()])

        # ---- wrap the phases on this trainer instance -------------------------------------------------
        orig_gas = trainer._generate_and_score_completions
        orig_logps = trainer._get_per_token_logps_and_entropies
        orig_training_step = trainer.training_step
        gen_model = trainer.accelerator.unwrap_model(trainer.model_wrapped)
        orig_generate = gen_model.generate
        eos_ids = set(int(i) for i in trainer.eos_token_ids)

        def gas(inputs):
            inside_gen[0] = True
            t0 = time.perf_counter()
            try:
                out = orig_gas(inputs)
            finally:
                inside_gen[0] = False
            cur["generate_and_score_s"] += time.perf_counter() - t0
            cur["generations"] += 1
            mask = out["completion_mask"]
            ids = out["completion_ids"]
            lengths = mask.sum(dim=1)
            truncated = 0
            for row, n in zip(ids.tolist(), lengths.tolist(), strict=True):
                if n == 0 or row[n - 1] not in eos_ids:
                    truncated += 1
            cur["completions"] += int(ids.size(0))
            cur["completion_tokens"] = int(lengths.sum())
            cur["completion_lengths"] = [int(x) for x in lengths.tolist()]
            cur["truncated"] = truncated
            cur["hit_max_tokens"] = int((lengths >= a.max_tokens).sum())
            cur["prompt_tokens"] = int(out["prompt_mask"].sum())
            cur["old_logps_computed"] = out.get("old_per_token_logps") is not None
            cur["advantage_abs_mean"] = float(out["advantages"].abs().mean())
            # TRL's own advantages, in generation order, with each completion's group (its prompt): bench/peers.py
            # checks prl_core's GRPO against them (tests/data/peers/trl_grpo_advantages.json)
            groups: dict[str, int] = {}
            cur["group_index"] = [groups.setdefault(x["prompt"], len(groups)) for x in inputs]
            cur["advantages"] = [float(x) for x in out["advantages"].flatten().tolist()]
            return out

        def logps(*args, **kwargs):
            if not inside_gen[0]:
                return orig_logps(*args, **kwargs)
            t0 = time.perf_counter()
            try:
                return orig_logps(*args, **kwargs)
            finally:
                cur["old_logprob_s"] += time.perf_counter() - t0

        def generate(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return orig_generate(*args, **kwargs)
            finally:
                cur["generate_s"] += time.perf_counter() - t0
                cur["generate_calls"] += 1

        def training_step(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return orig_training_step(*args, **kwargs)
            finally:
                cur["training_step_s"] += time.perf_counter() - t0
                cur["training_steps"] += 1

        trainer._generate_and_score_completions = gas
        trainer._get_per_token_logps_and_entropies = logps
        trainer.training_step = training_step
        gen_model.generate = generate

        t_train = time.perf_counter()
        trainer.train()
        train_s = time.perf_counter() - t_train

        # ---- checks: TRL did what we configured ------------------------------------------------------
        if len(recs) != a.steps:
            raise AssertionError(f"expected {a.steps} generation batches, timed {len(recs)}")
        for i, r in enumerate(recs):
            checks = {"generations": 1, "generate_calls": 1, "reward_calls": 1, "completions": per_step,
                      "optimizer_steps": opt_steps_per_gen, "training_steps": micro_per_gen}
            bad = {k: (r[k], v) for k, v in checks.items() if r[k] != v}
            if bad:
                raise AssertionError(f"step {i}: (got, expected) {bad}")
            if not r["old_logps_computed"]:
                raise AssertionError(f"step {i}: TRL did not compute old log-probs")

        opt = trainer.optimizer
        inner_opt = getattr(opt, "optimizer", opt)
        og = inner_opt.defaults
        config = {
            "loss_type": trainer.loss_type,
            "beta": trainer.beta,
            "ref_model_loaded": trainer.ref_model is not None,
            "epsilon_low": trainer.epsilon_low,
            "epsilon_high": trainer.epsilon_high,
            "delta": cfg.delta,
            "importance_sampling_level": cfg.importance_sampling_level,
            "scale_rewards": trainer.scale_rewards,
            "advantage_std": "unbiased group std (n-1), advantage = (r - mean) / (std + 1e-4)",
            "mask_truncated_completions": cfg.mask_truncated_completions,
            "num_generations": trainer.num_generations,
            "num_iterations": trainer.num_iterations,
            "per_device_train_batch_size": cfg.per_device_train_batch_size,
            "gradient_accumulation_steps": cfg.gradient_accumulation_steps,
            "steps_per_generation": cfg.steps_per_generation,
            "generation_batch_size": cfg.generation_batch_size,
            "max_steps": cfg.max_steps,
            "max_completion_length": trainer.max_completion_length,
            "temperature": trainer.temperature,
            "top_p": cfg.top_p,
            "top_k": cfg.top_k,
            "generation_config": {k: v for k, v in trainer.generation_config.to_dict().items()
                                  if k in ("max_new_tokens", "do_sample", "temperature", "top_p", "top_k", "min_p",
                                           "repetition_penalty", "eos_token_id", "pad_token_id", "bos_token_id",
                                           "cache_implementation", "use_cache")},
            "use_vllm": cfg.use_vllm,
            "optimizer": f"{type(inner_opt).__module__}.{type(inner_opt).__name__}",
            "optimizer_defaults": {k: (list(v) if isinstance(v, tuple) else v) for k, v in og.items()
                                   if k in ("lr", "betas", "eps", "amsgrad", "foreach", "fused")},
            "optimizer_param_groups": [{"params": len(g["params"]), "lr": g["lr"], "weight_decay": g["weight_decay"]}
                                       for g in inner_opt.param_groups],
            "lr_scheduler": type(trainer.lr_scheduler).__name__,
            "lr_scheduler_type": str(cfg.lr_scheduler_type),
            "warmup_steps": cfg.warmup_steps,
            "max_grad_norm": cfg.max_grad_norm,
            "bf16": cfg.bf16, "fp16": cfg.fp16,
            "model_dtype": str(next(trainer.model.parameters()).dtype),
            "gradient_checkpointing": cfg.gradient_checkpointing,
            "device": str(trainer.accelerator.device),
            "distributed_type": str(trainer.accelerator.distributed_type),
            "seed": cfg.seed,
            "shuffle_dataset": cfg.shuffle_dataset,
            "prompt_format": "standard (non-conversational) text prompts, already chat-templated; TRL applies no "
                             "template",
            "reward": "1.0 if the last \\boxed{...} content, stripped, equals the gold string, else 0.0",
        }

    steps = []
    for i, r in enumerate(recs):
        wall = r["t_end"] - r["t_start"]
        gs = r["generate_and_score_s"]
        fwd_bwd = r["training_step_s"] - gs  # the first training_step of a step runs the generation
        steps.append({
            "step": i,
            "warmup": i < a.warmup_steps,
            "wall_s": wall,
            "generate_and_score_s": gs,
            "generate_s": r["generate_s"],
            "reward_s": r["reward_s"],
            "old_logprob_s": r["old_logprob_s"],
            "other_gen_s": gs - r["generate_s"] - r["reward_s"] - r["old_logprob_s"],
            "optimizer_s": wall - gs,
            "fwd_bwd_s": fwd_bwd,
            "opt_step_s": wall - gs - fwd_bwd,
            "completions": r["completions"],
            "optimizer_steps": r["optimizer_steps"],
            "micro_batches": r["training_steps"],
            "mean_reward": sum(r["rewards"]) / len(r["rewards"]),
            "completion_tokens": r["completion_tokens"],
            "mean_completion_tokens": r["completion_tokens"] / r["completions"],
            "max_completion_tokens": max(r["completion_lengths"]),
            "truncated": r["truncated"],
            "hit_max_tokens": r["hit_max_tokens"],
            "prompt_tokens": r["prompt_tokens"],
            "advantage_abs_mean": r["advantage_abs_mean"],
            "rewards": r["rewards"],
            "group_index": r["group_index"],
            "advantages": r["advantages"],
            "trl_metrics": r["trl_metrics"],
        })
    measured = [s for s in steps if not s["warmup"]]
    keys = ["wall_s", "generate_and_score_s", "generate_s", "reward_s", "old_logprob_s", "other_gen_s",
            "optimizer_s", "fwd_bwd_s", "opt_step_s", "mean_completion_tokens", "mean_reward", "truncated"]
    med = {k: median([s[k] for s in measured]) for k in keys}

    return {
        "peer": "trl",
        "what": "TRL GRPOTrainer, one generation batch per step, HF generate, CPU fp32",
        "versions": {"trl": trl.__version__, "torch": torch.__version__, "transformers": transformers.__version__,
                     "accelerate": accelerate.__version__, "datasets": datasets.__version__,
                     "python": platform.python_version()},
        "args": vars(a),
        "model": str(Path(a.model).resolve()),
        "prompts_file": str(Path(a.prompts).resolve()),
        "prompt_pool": len(rows),
        "threads": torch.get_num_threads(),
        "completions_per_step": per_step,
        "optimizer_steps_per_step": opt_steps_per_gen,
        "micro_batches_per_step": micro_per_gen,
        "completions_per_optimizer_step": opt_batch,
        "config": config,
        "vs_prl": mapping(a, per_step, opt_steps_per_gen),
        "steps": steps,
        "warmup_steps": [s for s in steps if s["warmup"]],
        "measured_steps": len(measured),
        "median": med,
        "train_total_s": train_s,
        "peak_rss_mib": peak_rss_mib(),
        "phases": {
            "generate_and_score_s": "time inside GRPOTrainer._generate_and_score_completions",
            "generate_s": "model.generate (HF, one call for the whole generation batch)",
            "reward_s": "the reward function",
            "old_logprob_s": "no-grad log-prob forward passes inside _generate_and_score_completions",
            "other_gen_s": "the rest of _generate_and_score_completions (tokenize, decode, pad, advantages)",
            "optimizer_s": "wall_s - generate_and_score_s",
            "fwd_bwd_s": "Trainer.training_step time less the generation (loss forward + backward)",
            "opt_step_s": "optimizer_s - fwd_bwd_s (clip, AdamW step, zero_grad, loop bookkeeping)",
            "wall_s": "from on_step_begin of the step's first optimizer step to on_step_end of its last",
            "completion_tokens": "completion tokens per TRL's completion_mask (EOS included when generated)",
            "truncated": "completions with no EOS within max_completion_length",
            "hit_max_tokens": "completions of max_completion_length tokens (EOS as the last one included)",
            "trl_metrics": "TRL's own logged metrics for the step (mean of the entries it appended during it)",
        },
    }


if __name__ == "__main__":
    main()
