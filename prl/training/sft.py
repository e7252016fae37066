"""Supervised warm start on the synthetic task (``prl model sft``).

RL needs mixed rewards within each group, so the embedded model starts from a short SFT on
the task's step-by-step solutions: loss on the response tokens only, AdamW with warm-up and
cosine decay, a fixed seed, a wall-clock or step budget. Accuracy on the held-out test split
is measured before and after (greedy and sampled) and written to ``sft_report.json`` beside
the weights.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from prl.data import synthetic
from prl.fault_points import fault_point
from prl.generation.prompts import build_prompt
from prl.grading.verifier import is_correct
from prl.manifest import run_manifest
from prl.training.config import WARM_START_BASE, WARM_START_MARKERS, WARM_START_MODEL, SFTConfig, WarmStart


def _examples(tok, records, direct_frac: float = 0.0, seed: int = 0):
    """(prompt ids, response ids) per record; a seeded ``direct_frac`` of responses skip the working."""
    pick = random.Random(f"sft-direct:{seed}")
    prompts = [build_prompt(tok, r["problem"]) for r in records]
    solutions = [(synthetic.direct_solution(r) if pick.random() < direct_frac else r["solution"]) + tok.eos_token
                 for r in records]
    # one batched call each: the same ids as record by record, 2.4 s instead of 6 s for 20,000 records
    prompt_ids = tok(prompts, add_special_tokens=False)["input_ids"]
    response_ids = tok(solutions, add_special_tokens=False)["input_ids"]
    return list(zip(prompt_ids, response_ids))


def _batch(examples, pad_id, torch):
    T = max(len(p) + len(r) for p, r in examples)
    ids = torch.full((len(examples), T), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), T), -100, dtype=torch.long)
    attn = torch.zeros((len(examples), T), dtype=torch.long)
    for i, (p, r) in enumerate(examples):
        seq = p + r
        ids[i, : len(seq)] = torch.tensor(seq)
        labels[i, len(p): len(seq)] = torch.tensor(r)
        attn[i, : len(seq)] = 1
    return ids, labels, attn


def held_out_accuracy(model, tok, records, *, sampled: bool = False, batch_size: int = 50, max_new_tokens: int = 96,
                      seed: int = 0) -> float:
    """Fraction of ``records`` answered correctly (Math-Verify on the boxed answer): greedy decoding, or one
    sample at temperature 1 with ``sampled=True`` (seeded)."""

    tok.padding_side = "left"
    correct = 0
    torch.manual_seed(seed)
    model.eval()
    with torch.no_grad():
        for i in range(0, len(records), batch_size):
            chunk = records[i: i + batch_size]
            prompts = [build_prompt(tok, r["problem"]) for r in chunk]
            enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
            out = model.generate(
                **enc, max_new_tokens=max_new_tokens, do_sample=sampled, temperature=1.0 if sampled else None,
                top_p=1.0 if sampled else None, top_k=0 if sampled else None,
                pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
            )
            texts = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
            correct += sum(is_correct(t, r["answer"]) for t, r in zip(texts, chunk))
    return correct / max(len(records), 1)


def held_out_records(cfg: SFTConfig) -> list[dict]:
    """The test-split problems the SFT report scores (a seeded sample of the held-out split)."""
    held_out = synthetic.generate("test", synthetic.TEST_SIZE, seed=cfg.seed)
    return random.Random(f"sft-eval:{cfg.seed}").sample(held_out, min(cfg.eval_size, len(held_out)))


def run_sft(model_dir: str | Path, out_dir: str | Path, cfg: SFTConfig | None = None, *, log=print,
            progress: bool = True) -> dict:
    """Fine-tune ``model_dir`` on the task; save to ``out_dir`` with ``sft_report.json``.

    Bit-reproducible on one machine: same seed, config, packages, CPU capability
    (``torch.backends.cpu.get_cpu_capability()``) and thread count give identical weights, losses
    and accuracies. Across machines only the conclusions are (docs/reproducibility.md).
    """
    cfg = cfg or SFTConfig()
    threads_before = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        return _run_sft(model_dir, out_dir, cfg, log, progress)
    finally:
        torch.set_num_threads(threads_before)  # the caller's process keeps its own setting


def _run_sft(model_dir: str | Path, out_dir: str | Path, cfg: SFTConfig, log, progress: bool = True) -> dict:
    torch.manual_seed(cfg.seed)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    train = _examples(tok, synthetic.generate("train", cfg.train_size, seed=cfg.seed), cfg.direct_frac, cfg.seed)
    eval_records = held_out_records(cfg)
    rng = random.Random(cfg.seed)

    before = held_out_accuracy(model, tok, eval_records)
    log(f"[sft] held-out greedy accuracy before: {before:.3f} ({len(eval_records)} problems)")
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))

    def lr_at(step: int) -> float:
        if step < cfg.warmup_steps:
            return cfg.lr * (step + 1) / cfg.warmup_steps
        progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
        return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))

    model.train()
    t0 = time.time()
    order = list(range(len(train)))
    rng.shuffle(order)
    pos, losses, step = 0, [], 0
    from tqdm import tqdm

    # progress False (--quiet): no bar; otherwise one on a terminal only (tqdm's disable=None), never \r lines in a log
    bar = tqdm(total=cfg.steps, desc="sft", unit="step", leave=False, disable=None if progress else True)
    while step < cfg.steps and time.time() - t0 < cfg.max_minutes * 60:
        if pos + cfg.batch_size > len(order):
            rng.shuffle(order)
            pos = 0
        batch = [train[j] for j in order[pos: pos + cfg.batch_size]]
        pos += cfg.batch_size
        ids, labels, attn = _batch(batch, tok.pad_token_id, torch)
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        step += 1
        fault_point("sft/step", step)
        bar.update(1)
        if step % 100 == 0:
            bar.set_postfix(loss=f"{sum(losses[-100:]) / 100:.3f}")
    bar.close()
    train_s = time.time() - t0
    after = held_out_accuracy(model, tok, eval_records)
    sampled = held_out_accuracy(model, tok, eval_records, sampled=True, seed=cfg.seed)
    if step < cfg.steps:
        log(f"[sft] stopped at the {cfg.max_minutes}-minute limit after {step} of {cfg.steps} steps")
    log(f"[sft] {step} steps in {train_s:.0f} s, final loss {sum(losses[-50:]) / max(1, len(losses[-50:])):.3f}")
    log(f"[sft] held-out accuracy after: greedy {after:.3f}, sampled (T=1) {sampled:.3f}")
    out = Path(out_dir)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    fault_point("sft/saved")
    report = {
        "base_model": str(model_dir), "config": asdict(cfg), "steps": step, "train_seconds": train_s,
        "final_loss": sum(losses[-50:]) / max(1, len(losses[-50:])),
        "losses": losses,
        "eval_problems": len(eval_records),
        "accuracy_before_greedy": before, "accuracy_after_greedy": after, "accuracy_after_sampled": sampled,
        "manifest": run_manifest("sft", config=asdict(cfg), seed=cfg.seed),
    }
    (out / "sft_report.json").write_text(json.dumps(report, indent=2) + "\n")
    src = Path(model_dir) / "prl_model.json"
    if src.exists():
        meta = json.loads(src.read_text())
        meta["sft"] = {k: report[k] for k in ("steps", "accuracy_before_greedy", "accuracy_after_greedy", "accuracy_after_sampled")}
        (out / "prl_model.json").write_text(json.dumps(meta, indent=2) + "\n")
    return report


def build_warm_start_base(models_dir: str | Path, ws: WarmStart, *, log=print) -> Path:
    """The warm start's first stage: the tiny model built from ``ws.seed`` in ``<models_dir>/tiny``."""
    from prl.models.tiny import build_tiny

    path = build_tiny(Path(models_dir) / WARM_START_BASE, seed=ws.seed)
    log(f"tiny model built from seed {ws.seed}: {path}")
    return path


def run_warm_start(models_dir: str | Path, ws: WarmStart, *, log=print, progress: bool = True) -> Path:
    """The warm start's second stage: SFT of ``<models_dir>/tiny`` into ``<models_dir>/tiny-sft``."""
    out = Path(models_dir) / WARM_START_MODEL
    report = run_sft(str(Path(models_dir) / WARM_START_BASE), out, ws.sft_config(), log=log, progress=progress)
    log(f"warm start: held-out accuracy greedy {report['accuracy_after_greedy']:.3f}, "
        f"sampled {report['accuracy_after_sampled']:.3f}")
    return out


def warm_start(models_dir: str | Path, ws: WarmStart, *, log=print, progress: bool = True) -> str:
    """The warm-started model in ``<models_dir>/tiny-sft`` (:class:`WarmStart`): each stage runs unless its
    marker file (``WARM_START_MARKERS``) shows it complete. The caller keeps ``ws`` fixed for a models
    directory (a study refuses a changed file; the demo's Prefect tasks are keyed on the settings and call
    the two stages themselves)."""
    root = Path(models_dir)
    if not (root / WARM_START_BASE / WARM_START_MARKERS[WARM_START_BASE]).exists():
        build_warm_start_base(root, ws, log=log)
    out = root / WARM_START_MODEL
    if not (out / WARM_START_MARKERS[WARM_START_MODEL]).exists():
        run_warm_start(root, ws, log=log, progress=progress)
    else:
        log(f"warm start {out} exists, reused")
    return str(out)
