"""Generation throughput: vLLM (``LLM.generate``) vs ``transformers.generate`` on the same model,
prompts, n and lengths. Target (docs/architecture.md §Targets): vLLM >= 3x generated tokens/s.

Both engines run through ``prl.generation.engines`` (the code the pipeline runs) with one SamplingConfig:
temperature 1, top_p 1, per-token log-probs on (the RL loop needs them) and ``ignore_eos``, so
every sample is exactly as long as the workload says and both engines generate the same number
of tokens. Engine start is timed separately and excluded from tokens/s.

* workloads: 100 synthetic prompts x 8 samples x ``--tokens`` (default 64 and 384 tokens;
  the tiny model's context is 512);
* transformers: each ``--hf-batch-sizes`` value (sequences per generate call); ratios use the
  fastest, so the baseline is a tuned one;
* vLLM in both process layouts: separate engine-core/worker processes (the library default)
  and in-process (``prl generate``'s default on CPU).

transformers runs first, then each vLLM engine alone (never two engines alive at once).

    python bench/generation.py                 # tiny model, ~5 min on 2 cores
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

CODE = ("bench/generation.py", "prl/generation", "prl/models/tiny.py", "prl/models/build.py",
        "prl/data/synthetic.py")
"""The code this benchmark measures: its results file records these paths (bench/common.py's write_json),
and ``python bench/render.py --check`` fails once one of them changes after the recorded commit."""

TARGET = 3.0


def _run(engine, prompts, sampling, repeats: int) -> dict:
    engine.generate(prompts[:4], sampling)  # warm-up (allocations, kernels)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        samples = engine.generate(prompts, sampling)
        times.append(time.perf_counter() - t0)
        assert len(samples) == len(prompts) * sampling.n, len(samples)
        lengths = {s.n_tokens for s in samples}
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
    ap.add_argument("--tokens", default="64,384", help="tokens per sample, one workload each (default 64,384)")
    ap.add_argument("--repeats", default="2,1", help="timed runs per workload (default 2,1)")
    ap.add_argument("--hf-batch-sizes", default="32,64,128,256",
                    help="transformers batch sizes in sequences (default 32,64,128,256; 256 skipped above 64 tokens)")
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args()

    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    from common import machine_info, render_all, write_json
    from prl.data import synthetic
    from prl.generation.engines import SamplingConfig, make_engine
    from prl.generation.prompts import build_prompt

    tmp = None
    if args.model is None:
        from prl.models.tiny import build_tiny

        tmp = tempfile.TemporaryDirectory(prefix="bench_generation_")
        model_dir = build_tiny(Path(tmp.name) / "tiny", seed=0)
        model_desc = "embedded tiny Llama (prl.models.tiny.build_tiny, seed 0, random weights)"
    else:
        model_dir = Path(args.model)
        model_desc = str(model_dir)
    from transformers import AutoConfig, AutoTokenizer

    cfg = AutoConfig.from_pretrained(str(model_dir))
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    prompts = [build_prompt(tok, r["problem"]) for r in synthetic.generate("test", args.prompts)]
    prompt_tokens = [len(tok(p, add_special_tokens=False)["input_ids"]) for p in prompts]
    lengths = [int(x) for x in args.tokens.split(",")]
    repeats = [int(x) for x in args.repeats.split(",")]
    repeats += [repeats[-1]] * (len(lengths) - len(repeats))
    batch_sizes = [int(x) for x in args.hf_batch_sizes.split(",") if x.strip()]
    workloads = {
        f"{t}_tokens": SamplingConfig(n=args.n, temperature=1.0, top_p=1.0, max_tokens=t, ignore_eos=True,
                                      logprobs=True, seed=0)
        for t in lengths
    }
    load_before = os.getloadavg()
    print(f"model: {model_desc}; {len(prompts)} prompts x {args.n} samples x {lengths} tokens; "
          f"load average {load_before[0]:.2f}", flush=True)

    results: dict[str, dict] = {w: {"transformers": {}, "vllm": {}} for w in workloads}
    for (name, sampling), reps in zip(workloads.items(), repeats):
        for bs in batch_sizes:
            if bs > 128 and sampling.max_tokens > 64:
                continue  # measured far slower than smaller batches at long lengths; saves minutes
            hf = make_engine("hf", model_dir, dtype=args.dtype, batch_size=bs)
            res = _run(hf, prompts, sampling, reps)
            hf.close()
            results[name]["transformers"][f"batch_{bs}"] = res
            print(f"[{name}] transformers.generate batch {bs}: {res['tokens_per_s']:.0f} tok/s "
                  f"(runs {res['seconds']} s)", flush=True)

    starts = {}
    vinfo = {}
    for layout, in_process in (("separate_processes", False), ("in_process", True)):
        t0 = time.perf_counter()
        engine = make_engine("vllm", model_dir, dtype=args.dtype, in_process=in_process)
        starts[layout] = round(time.perf_counter() - t0, 3)
        print(f"vLLM ({layout}) engine start: {starts[layout]:.1f} s", flush=True)
        for (name, sampling), reps in zip(workloads.items(), repeats):
            res = _run(engine, prompts, sampling, reps)
            results[name]["vllm"][layout] = res
            print(f"[{name}] vLLM {layout}: {res['tokens_per_s']:.0f} tok/s (runs {res['seconds']} s)", flush=True)
        info = engine.info()
        vinfo = {k: info[k] for k in ("engine_version", "device", "gpu_memory_utilization", "enforce_eager",
                                      "max_model_len")}
        engine.close()
        del engine

    summary = {}
    for name, r in results.items():
        best_key = max(r["transformers"], key=lambda k: r["transformers"][k]["tokens_per_s"])
        best = r["transformers"][best_key]["tokens_per_s"]
        r["transformers_best"] = best_key
        r["ratio_vs_best_transformers"] = {k: round(v["tokens_per_s"] / best, 2) for k, v in r["vllm"].items()}
        summary[name] = {**r["ratio_vs_best_transformers"],
                         "meets_target": {k: v >= TARGET for k, v in r["ratio_vs_best_transformers"].items()}}
    load_after = os.getloadavg()
    payload = {
        "benchmark": "generation",
        "machine": machine_info(),
        "model": {"dir": model_desc, "model_type": cfg.model_type, "hidden_size": cfg.hidden_size,
                  "num_hidden_layers": cfg.num_hidden_layers, "num_attention_heads": cfg.num_attention_heads,
                  "head_dim": getattr(cfg, "head_dim", None), "vocab_size": cfg.vocab_size, "dtype": args.dtype},
        "prompts": len(prompts), "n": args.n, "prompt_tokens_mean": round(sum(prompt_tokens) / len(prompts), 1),
        "sampling": "temperature 1, top_p 1, logprobs on, ignore_eos (fixed lengths), seed 0",
        "engine_start_s": {"vllm": starts, "note": "excluded from tokens/s; transformers loads in < 1 s"},
        "vllm_engine": vinfo,
        "workloads": results,
        "ratio_summary": summary,
        "target": TARGET,
        "load_average_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
    }
    path = write_json("generation", payload, code=CODE)
    for name, s in summary.items():
        print(f"[{name}] vLLM / best transformers: " + ", ".join(
            f"{k} {s[k]:.2f}x" for k in ("separate_processes", "in_process")) + f" (target >= {TARGET}x)")
    print(f"wrote {path}; re-rendered " + ", ".join(p.name for p in render_all()))
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
