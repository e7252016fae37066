"""``prl demo``: the main job on the embedded default, end to end with what exists today.

synthetic task → tiny model (built from a seed) → SFT warm start → n samples per held-out
problem with the vLLM engine → Math-Verify grading → a per-level accuracy table.

Steps whose outputs already exist with the same settings are reused (the model build and
the warm start are deterministic and cost minutes), so re-running only regenerates samples.
Everything lands under ``--out`` (default ``runs/demo``) with a ``demo_report.json``.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path

from . import task
from .grading import is_correct


def _cached(path: Path, expected: dict) -> bool:
    if not path.exists():
        return False
    try:
        found = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return all(found.get(k) == v for k, v in expected.items())


def run_demo(out_dir: str | Path = "runs/demo", *, seed: int = 0, sft_steps: int = 600, n: int = 8,
             engine: str = "vllm", max_tokens: int = 128, log=print) -> dict:
    from .generate import run_generate
    from .sft import SFTConfig, run_sft
    from .tiny_model import build_tiny

    out = Path(out_dir)
    t0 = time.time()
    log(f"[demo] 1/5 synthetic task -> {out / 'data'}")
    test_file = task.write_jsonl(task.generate("test", task.TEST_SIZE, seed=seed), out / "data" / "synth_test.jsonl")
    records = [json.loads(line) for line in test_file.read_text().splitlines()]

    tiny = out / "models" / "tiny"
    if _cached(tiny / "prl_model.json", {"kind": "tiny", "seed": seed}):
        log(f"[demo] 2/5 tiny model: reusing {tiny}")
    else:
        log(f"[demo] 2/5 building the tiny model (seed {seed}) -> {tiny}")
        build_tiny(tiny, seed=seed)

    warm = out / "models" / "tiny-sft"
    cfg = SFTConfig(steps=sft_steps, seed=seed)
    if _cached(warm / "sft_report.json", {"steps": sft_steps, "base_model": str(tiny)}):
        report = json.loads((warm / "sft_report.json").read_text())
        log(f"[demo] 3/5 warm start: reusing {warm}")
    else:
        log(f"[demo] 3/5 SFT warm start, {sft_steps} steps (~4 min on 2 cores) -> {warm}")
        report = run_sft(tiny, warm, cfg, log=log)

    samples_file = out / "samples" / "synth_test.jsonl"
    log(f"[demo] 4/5 generating {n} samples for each of {len(records)} held-out problems ({engine})")
    # Training is over in this process, so vLLM may run in it (on CPU: ~2 s start instead of ~16 s
    # and 1.4-1.6x the tokens/s of separate processes; see bench/notes/generation.md).
    manifest = run_generate(warm, test_file, samples_file, engine=engine, n=n, temperature=1.0, top_p=1.0,
                            max_tokens=max_tokens, seed=seed, log=log,
                            engine_kwargs={"in_process": None} if engine == "vllm" else None)

    log("[demo] 5/5 grading with Math-Verify")
    correct: dict[int, list[bool]] = defaultdict(list)
    for line in samples_file.read_text().splitlines():
        row = json.loads(line)
        rec = records[row["problem_index"]]
        correct[row["problem_index"]].append(is_correct(row["response"], rec["answer"]))
    by_level: dict[int, dict[str, list]] = defaultdict(lambda: {"avg": [], "pass": []})
    for idx, oks in correct.items():
        lv = records[idx]["level"]
        by_level[lv]["avg"].append(sum(oks) / len(oks))
        by_level[lv]["pass"].append(any(oks))
    rows = []
    for lv in sorted(by_level):
        avg, pas = by_level[lv]["avg"], by_level[lv]["pass"]
        rows.append({"level": lv, "problems": len(avg), f"average@{n}": sum(avg) / len(avg), f"pass@{n}": sum(pas) / len(pas)})
    all_avg = [a for v in by_level.values() for a in v["avg"]]
    all_pass = [p for v in by_level.values() for p in v["pass"]]
    total = {"level": "all", "problems": len(all_avg), f"average@{n}": sum(all_avg) / len(all_avg),
             f"pass@{n}": sum(all_pass) / len(all_pass)}
    log("")
    log(f"  held-out synthetic test, {n} samples per problem at T=1 (tiny model after {report['steps']} SFT steps)")
    log(f"  {'level':>6} {'problems':>9} {'average@' + str(n):>11} {'pass@' + str(n):>8}")
    for r in rows + [total]:
        log(f"  {str(r['level']):>6} {r['problems']:>9} {r[f'average@{n}']:>11.3f} {r[f'pass@{n}']:>8.3f}")
    result = {
        "out_dir": str(out.resolve()), "seed": seed, "n": n, "engine": engine, "levels": rows, "overall": total,
        "sft": {k: report[k] for k in ("steps", "accuracy_before_greedy", "accuracy_after_greedy", "accuracy_after_sampled")},
        "generation": {"manifest": str(samples_file.with_suffix("").as_posix()) + ".manifest.json",
                       "tokens_per_s": manifest["timing"]["generated_tokens_per_s"]},
        "seconds": round(time.time() - t0, 1),
    }
    (out / "demo_report.json").write_text(json.dumps(result, indent=2) + "\n")
    log(f"\n[demo] done in {result['seconds']:.0f} s; report {out / 'demo_report.json'}, samples {samples_file}")
    return result
