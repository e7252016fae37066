"""A real pretrained model on this machine (issue 15): SmolLM2-135M-Instruct, converted from its GGUF.

    python bench/real_model.py            # ~10 min on 2 cores; writes bench/results/real_model.json

Three measurements, each a ratio against its baseline in the same run:

1. **Generation**: vLLM (in-process, as `prl eval` and the trainer run it on CPU) vs
   ``transformers.generate`` (the ``hf`` engine), the same rendered prompts, n, max_tokens (EOS
   ignored, so both generate exactly the same number of tokens), fp32; engine start and one warm-up
   call excluded for both. Target (docs/architecture.md §Targets): vLLM ≥ 3×.
2. **Weight sync**: the trainer's policy into the running in-process vLLM engine, from memory
   (``Engine.load_weights``) vs the disk round trip (``save_pretrained`` to ``out/policy`` + vLLM's
   reload, what every step did before); alternating, median. Each is checked: after it, vLLM's greedy
   log-probs equal a transformers forward pass of the policy. Target: memory ≥ 5× faster.
3. **A PRL step's phases** on SmolLM2 through `prl train` (3 steps, steps 2-3 reported: step 1 carries
   first-call warm-ups), once with ``weight_sync: memory`` and once with ``disk``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from common import machine_info, render_all, write_json  # noqa: E402

from prl.data import synthetic  # noqa: E402
from prl.generation.engines import SamplingConfig, make_engine  # noqa: E402
from prl.models.importer import smollm2_model  # noqa: E402
from prl.store.db import Store  # noqa: E402
from prl.training.exports import save_policy  # noqa: E402
from prl.training.weight_sync import named_weights  # noqa: E402

CODE = ("bench/real_model.py", "prl/generation", "prl/models", "prl/training", "prl_core", "prl/store",
        "prl_cli/train.py")
"""The code this benchmark measures: its results file records these paths (bench/common.py's write_json),
and ``python bench/render.py --check`` fails once one of them changes after the recorded commit."""

GEN_TARGET, SYNC_TARGET = 3.0, 5.0


def generation(model: Path, prompts_n: int, n: int, max_tokens: int) -> dict:
    problems = [r["problem"] for r in synthetic.generate("test", prompts_n)]
    sampling = SamplingConfig(n=n, max_tokens=max_tokens, ignore_eos=True, seed=1, logprobs=True)
    out = {}
    for kind, kw in (("vllm", {"in_process": True}), ("hf", {})):
        t = time.perf_counter()
        engine = make_engine(kind, model, **kw)
        start = time.perf_counter() - t
        prompts = engine.build_prompts(problems)
        engine.generate(prompts[:2], SamplingConfig(n=1, max_tokens=8))  # warm-up, excluded
        t = time.perf_counter()
        samples = engine.generate(prompts, sampling)
        seconds = time.perf_counter() - t
        tokens = sum(s.n_tokens for s in samples)
        out[kind] = {"start_s": round(start, 2), "seconds": round(seconds, 2), "generated_tokens": tokens,
                     "tokens_per_s": round(tokens / seconds, 1), "info": {k: str(v) for k, v in engine.info().items()}}
        engine.close()
        del engine
    out["ratio"] = round(out["vllm"]["tokens_per_s"] / out["hf"]["tokens_per_s"], 3)
    out["meets_target"] = out["ratio"] >= GEN_TARGET
    out["workload"] = {"prompts": prompts_n, "n": n, "max_tokens": max_tokens, "ignore_eos": True, "dtype": "float32"}
    return out


def weight_sync(model: Path, repeats: int) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    policy = AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    engine = make_engine("vllm", model, in_process=True)
    prompt = engine.build_prompts([synthetic.generate("test", 1)[0]["problem"]])
    greedy = SamplingConfig(n=1, temperature=0, max_tokens=8)
    gen = torch.Generator().manual_seed(0)
    times = {"memory": [], "disk": []}
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "policy"
        for i in range(repeats + 1):
            for how in ("memory", "disk") if i % 2 == 0 else ("disk", "memory"):
                with torch.no_grad():  # a training step's worth of change
                    for p in policy.parameters():
                        p.add_(1e-3 * torch.randn(p.shape, generator=gen))
                t = time.perf_counter()
                if how == "memory":
                    engine.load_weights(named_weights(policy))
                else:
                    save_policy(policy, tokenizer, target)
                    engine.update_weights(target)
                dt = time.perf_counter() - t
                if i:  # the first round warms both paths up
                    times[how].append(dt)
                [s] = engine.generate(prompt, greedy)
                ids = torch.tensor([engine.encode(prompt)[0] + s.token_ids])
                with torch.no_grad():
                    logits = policy(ids).logits[0, len(ids[0]) - len(s.token_ids) - 1:-1].float()
                ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(s.token_ids)[:, None])[:, 0]
                worst = max(worst, float((torch.tensor(s.logprobs) - ref).abs().max()))
    engine.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    n_bytes = sum(t.numel() * t.element_size() for _, t in named_weights(policy))
    return {"repeats": repeats, "memory_s": round(med["memory"], 3), "disk_s": round(med["disk"], 3),
            "ratio": round(med["disk"] / med["memory"], 2), "meets_target": med["disk"] / med["memory"] >= SYNC_TARGET,
            "weights_bytes": n_bytes, "max_logprob_diff_after_sync": worst,
            "all_s": {k: [round(x, 3) for x in v] for k, v in times.items()}}


def train_phases(model: Path, sync: str) -> dict:
    import yaml

    with tempfile.TemporaryDirectory() as tmp:
        cfg = {"algorithm": {"estimator": "prl", "eta": 20, "step_split": "text:\n\n", "n_samples": 4},
               "train": {"model": str(model), "out_dir": f"{tmp}/out", "db": f"{tmp}/store.duckdb", "steps": 3,
                         "prompts_per_step": 4, "max_tokens": 64, "lr": 1e-5, "mini_batch_size": 16,
                         "micro_batch_size": 4, "eval_datasets": [], "weight_sync": sync}}
        Path(f"{tmp}/c.yaml").write_text(yaml.safe_dump(cfg))
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                                  "MASTER_PORT")}
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "prl_cli", "train", "--config", f"{tmp}/c.yaml", "--run", "bench",
                        "--quiet"], check=True, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t
        with Store(f"{tmp}/store.duckdb", create=False).read() as con:
            rows = con.execute("select step, name, value from train_metrics where run_id = 'bench' and step >= 2 "
                               "and (name like 'time/%' or name like 'rollout/%' or name = 'response/length')").fetchall()
    per: dict[str, list[float]] = {}
    for _step, name, value in rows:
        per.setdefault(name, []).append(value)
    return {"weight_sync": sync, "wall_s": round(wall, 1), "steps_reported": [2, 3], "rollouts_per_step": 16,
            "mean": {k: float(f"{statistics.mean(v):.4g}") for k, v in sorted(per.items())}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--sync-repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(2)
    model = smollm2_model()
    before = machine_info()
    result = {"model": {"name": "SmolLM2-135M-Instruct (GGUF Q4_1, de-quantized to fp32)", "dir": "~/.cache/prl/models/"
                        + model.name, **{k: v for k, v in json.loads((model / "prl_model.json").read_text()).items()
                                         if k in ("architecture", "n_parameters")}}}
    print("[real_model] generation …", file=sys.stderr, flush=True)
    result["generation"] = generation(model, args.prompts, args.n, args.max_tokens)
    print(f"[real_model] generation: vLLM {result['generation']['ratio']}× transformers; weight sync …",
          file=sys.stderr, flush=True)
    result["weight_sync"] = weight_sync(model, args.sync_repeats)
    print(f"[real_model] weight sync: memory {result['weight_sync']['ratio']}× faster; train phases …",
          file=sys.stderr, flush=True)
    result["train"] = {sync: train_phases(model, sync) for sync in ("memory", "disk")}
    result["machine"] = machine_info()
    result["machine_before"] = before
    path = write_json("real_model", result, code=CODE)
    print(f"[real_model] wrote {path}", file=sys.stderr)
    render_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
