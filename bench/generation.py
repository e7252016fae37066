"""Generation throughput: vLLM (``LLM.generate``) vs ``transformers.generate`` on the same model,
prompts, n and lengths. Target (DESIGN §6): vLLM >= 3x generated tokens/s.

Both engines go through ``prl.engines`` (the code the pipeline runs), with the same
SamplingConfig: temperature 1, top_p 1, ``ignore_eos`` so every sample is exactly
``--tokens`` long, per-token log-probs on (the RL loop needs them). Engine start is timed
separately and excluded from tokens/s. transformers runs first (no vLLM processes alive), at
each ``--hf-batch-sizes`` value (sequences per generate call); the ratio uses its best.

    python bench/generation.py                 # 100 prompts x 8 samples x 64 tokens, tiny model
    python bench/generation.py --model DIR     # any local model directory

Writes bench/results/generation.json. The machine must be otherwise idle: two processes
running multi-threaded torch on the same cores slow each other far more than 2x.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

TARGET = 3.0


def _run(engine, prompts, sampling, repeats: int) -> dict:
    engine.generate(prompts[:4], sampling)  # warm-up (allocations, kernels)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        samples = engine.generate(prompts, sampling)
        times.append(time.perf_counter() - t0)
        lengths = {s.n_tokens for s in samples}
        assert len(samples) == len(prompts) * sampling.n, len(samples)
        assert lengths == {sampling.max_tokens}, f"samples not all {sampling.max_tokens} tokens: {sorted(lengths)[:5]}"
        assert all(s.logprobs is not None and len(s.logprobs) == s.n_tokens for s in samples)
    tokens = len(prompts) * sampling.n * sampling.max_tokens
    med = statistics.median(times)
    return {"seconds": [round(t, 3) for t in times], "median_s": round(med, 3), "generated_tokens": tokens,
            "tokens_per_s": round(tokens / med, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model directory (default: build the embedded tiny model)")
    ap.add_argument("--prompts", type=int, default=100, help="synthetic test problems (default 100)")
    ap.add_argument("--n", type=int, default=8, help="samples per prompt (default 8)")
    ap.add_argument("--tokens", type=int, default=64, help="generated tokens per sample (default 64)")
    ap.add_argument("--repeats", type=int, default=2, help="timed runs per engine/setting (default 2)")
    ap.add_argument("--hf-batch-sizes", default="800,256", help="transformers batch sizes in sequences (default 800,256)")
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args()

    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    from common import machine, write_json
    from prl import task
    from prl.engines import SamplingConfig, make_engine
    from prl.prompts import build_prompt

    tmp = None
    if args.model is None:
        from prl.tiny_model import build_tiny

        tmp = tempfile.TemporaryDirectory(prefix="bench_generation_")
        model_dir = build_tiny(Path(tmp.name) / "tiny", seed=0)
        model_desc = "embedded tiny Llama (prl.tiny_model, seed 0)"
    else:
        model_dir = Path(args.model)
        model_desc = str(model_dir)
    from transformers import AutoConfig, AutoTokenizer

    cfg = AutoConfig.from_pretrained(str(model_dir))
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    prompts = [build_prompt(tok, r["problem"]) for r in task.generate("test", args.prompts)]
    prompt_tokens = [len(tok(p, add_special_tokens=False)["input_ids"]) for p in prompts]
    sampling = SamplingConfig(n=args.n, temperature=1.0, top_p=1.0, max_tokens=args.tokens, ignore_eos=True,
                              logprobs=True, seed=0)
    load_before = os.getloadavg()
    print(f"model: {model_desc}; {len(prompts)} prompts x {args.n} samples x {args.tokens} tokens; "
          f"load average {load_before[0]:.2f}", flush=True)

    hf_results = {}
    for bs in [int(x) for x in args.hf_batch_sizes.split(",") if x.strip()]:
        t0 = time.perf_counter()
        hf = make_engine("hf", model_dir, dtype=args.dtype, batch_size=bs)
        start = time.perf_counter() - t0
        res = _run(hf, prompts, sampling, args.repeats)
        res["engine_start_s"] = round(start, 3)
        hf_results[str(bs)] = res
        hf.close()
        del hf
        print(f"transformers.generate batch {bs}: {res['tokens_per_s']:.0f} tok/s (runs {res['seconds']} s)",
              flush=True)
    best_bs = max(hf_results, key=lambda k: hf_results[k]["tokens_per_s"])

    t0 = time.perf_counter()
    vllm = make_engine("vllm", model_dir, dtype=args.dtype)
    vllm_start = time.perf_counter() - t0
    print(f"vLLM engine start: {vllm_start:.1f} s", flush=True)
    vres = _run(vllm, prompts, sampling, args.repeats)
    vres["engine_start_s"] = round(vllm_start, 3)
    vinfo = vllm.info()
    vllm.close()
    print(f"vLLM: {vres['tokens_per_s']:.0f} tok/s (runs {vres['seconds']} s)", flush=True)

    ratio = vres["tokens_per_s"] / hf_results[best_bs]["tokens_per_s"]
    load_after = os.getloadavg()
    payload = {
        "benchmark": "generation",
        "machine": machine(),
        "model": {"dir": model_desc, "model_type": cfg.model_type, "hidden_size": cfg.hidden_size,
                  "num_hidden_layers": cfg.num_hidden_layers, "num_attention_heads": cfg.num_attention_heads,
                  "head_dim": getattr(cfg, "head_dim", None), "vocab_size": cfg.vocab_size, "dtype": args.dtype},
        "workload": {"prompts": len(prompts), "n": args.n, "tokens_per_sample": args.tokens,
                     "sequences": len(prompts) * args.n, "prompt_tokens_mean": round(sum(prompt_tokens) / len(prompts), 1),
                     "sampling": sampling.to_dict(), "repeats": args.repeats},
        "transformers": {"by_batch_size": hf_results, "best_batch_size": int(best_bs)},
        "vllm": {**vres, "engine": {k: vinfo[k] for k in ("engine_version", "device", "gpu_memory_utilization",
                                                           "enforce_eager", "max_model_len")}},
        "ratio_vllm_over_transformers": round(ratio, 2),
        "target": TARGET,
        "meets_target": ratio >= TARGET,
        "load_average_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
    }
    path = write_json("generation", payload)
    print(f"ratio vLLM / transformers (best batch {best_bs}): {ratio:.2f}x (target >= {TARGET}x: "
          f"{'met' if ratio >= TARGET else 'MISSED'}); wrote {path}")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
