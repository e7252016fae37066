"""kill -9 at named stages of the main job (`prl demo --small`): during the warm start, each training and each
evaluation. After every kill the store and the files show the stage the kill aimed at (the warm-start
directory and its marker, each training's steps and checkpoints, each evaluation's stored chunks); the last
rerun completes with the rows of the uninterrupted `prl demo --small` run of the session (``small_demo``),
equal key by key and value by value, the same report, and bit-identical weights: the tiny model, the warm
start, both trained policies and their latest checkpoints.

CI (``PRL_FAULT_KILLS`` unset): one kill per stage, six in one segment. The long chain (``PRL_FAULT_KILLS=20``,
``bench/run_all.py --only faults --full``) draws its kills at seeded random stages.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from chain import (KILLS, Aim, Segment, check_record, compare_rows, file_digest, kill_chain, store_rows,
                   tensors_equal, write_report)
from stages import Schedule, aimed_eval_stage, eval_stage, random_train_aims, train_aim, train_stage, train_state, warm_stage

from prl.store.db import Store

pytestmark = pytest.mark.e2e

EVAL_RUNS = ("warm_start", "grpo", "prl")
ESTIMATORS = ("prl", "grpo")
TRAIN_STEPS, EVAL_N, EVAL_CHUNK, SFT_STEPS = 3, 2, 32, 30  # flows.config.small(); EvalConfig.chunk_problems
SCHEDS = {est: Schedule(f"demo-train-{est}", TRAIN_STEPS, checkpoint_every=1) for est in ESTIMATORS}
WARM = "warm start: tiny complete, "


def demo_cmd(out: Path) -> list[str]:
    return [sys.executable, "-m", "prl_cli", "demo", "--small", "--out", str(out), "--quiet"]


def pipeline_stage(out: Path, ref_steps: dict[str, dict[int, set[str]]]) -> str:
    """The first stage of the pipeline the files and the store do not show complete, and where in it the run
    stopped (asserting whole units: steps, problems, the checkpoint `latest` names loads)."""
    ws = warm_stage(out / "models")
    if ws != WARM + "tiny-sft complete":
        return ws
    db = out / "store.duckdb"
    store = Store(db, create=False, lock_timeout_s=30) if db.exists() else None

    def finished(run_id: str) -> bool:
        run = store.records("get_run", run_id=run_id) if store is not None else []
        return bool(run) and run[0]["status"] == "finished"

    for est, sched in SCHEDS.items():
        if not finished(sched.run_id):
            return f"train {est}: " + train_stage(train_state(db, out / "train" / est, sched, ref_steps[est]), sched)
    for name in EVAL_RUNS:
        if not finished(f"demo-eval-{name}"):
            return f"eval {name}: " + eval_stage(db, f"demo-eval-{name}", EVAL_N, EVAL_CHUNK)["stage"]
    return "report"


DEMO_FILES = ("the tiny model, the warm start (sha256 of the weights; its SFT losses and accuracies), both trained "
              "policies (sha256), both trainings' latest checkpoint modules (tensor by tensor, bitwise), the report's text")


def demo_files(out: Path) -> dict:
    """Weights and reports of a finished demo: digests of the tiny model, the warm start and both policies, the
    warm start's losses and accuracies, each training's latest checkpoint module, the report's text."""
    import torch

    sft = json.loads((out / "models" / "tiny-sft" / "sft_report.json").read_text())
    files = {"tiny": file_digest(out / "models" / "tiny" / "model.safetensors"),
             "warm_start": file_digest(out / "models" / "tiny-sft" / "model.safetensors"),
             "sft": {k: sft[k] for k in ("losses", "accuracy_before_greedy", "accuracy_after_greedy",
                                         "accuracy_after_sampled")},
             "report": json.loads((out / "pipeline_report.json").read_text())["text"]}
    for est in ESTIMATORS:
        ckpt = out / "train" / est / "checkpoints"
        latest = (ckpt / "latest").read_text().strip()
        files[f"{est}_policy"] = file_digest(out / "train" / est / "policy" / "model.safetensors")
        files[f"{est}_latest"] = latest
        files[f"{est}_module"] = torch.load(ckpt / latest / "mp_rank_00_model_states.pt", map_location="cpu",
                                            weights_only=False)["module"]
    return files


def compare_demo(out: Path, ref: dict) -> list[str]:
    got, bad = demo_files(out), []
    for k, v in got.items():
        if k.endswith("_module"):
            differ = tensors_equal(v, ref[k])
            if differ:
                bad.append(f"{k}: {len(differ)} tensors not bit-identical ({differ[:3]})")
        elif v != ref[k]:
            bad.append(f"{k} differs from the uninterrupted run's" + (f": {v} != {ref[k]}" if len(str(v)) < 200 else ""))
    return bad


def _eval_aim(name: str, point: str) -> Aim:
    spec = f"{point}@demo-eval-{name}" + ("+0.1" if point == "eval/generate" else "")
    kind = f"eval {name}: " + ("generating" if point == "eval/generate" else "inside its store transaction")
    return Aim(spec, kind, f"eval {name}: " + aimed_eval_stage(0))


def _warm_aim(point: str, step: int = 0) -> Aim:
    if point == "sft/step":
        return Aim(f"sft/step@{step}", "warm start: SFT steps", WARM + "tiny-sft absent")
    return Aim("sft/saved", "warm start: weights written, marker not", WARM + "tiny-sft weights without marker")


def _train_aims(est: str, aims: list[Aim]) -> list[Aim]:
    return [Aim(a.spec, f"train {est}: {a.kind}", f"train {est}: {a.stage}") for a in aims]


def ci_aims() -> list[Aim]:
    """One kill per stage of the pipeline, in the order it reaches them."""
    return [_warm_aim("sft/step", SFT_STEPS // 3),
            *_train_aims("prl", [train_aim("train/update_done", 2, SCHEDS["prl"])]),
            *_train_aims("grpo", [train_aim("train/store_write", 3, SCHEDS["grpo"])]),
            _eval_aim("warm_start", "eval/generate"), _eval_aim("grpo", "store/insert_samples"),
            _eval_aim("prl", "eval/generate")]


def random_aims(rng: random.Random, k: int) -> list[Aim]:
    """``k`` (>= 6) kills at seeded random points along the pipeline, in the order it reaches them: one in each of
    its six stages (the warm start, each training, each evaluation), the rest in stages drawn at random."""
    groups: list[list[Aim]] = [[_warm_aim("sft/step", s) for s in range(1, SFT_STEPS + 1)] + [_warm_aim("sft/saved")]]
    for est in ESTIMATORS:
        groups.append(_train_aims(est, random_train_aims(SCHEDS[est], random.Random(0), 10 ** 6)))  # its whole timeline
    groups += [[_eval_aim(name, p) for p in ("eval/generate", "store/insert_samples")] for name in EVAL_RUNS]
    line = [a for g in groups for a in g]
    picks = {line.index(rng.choice(g)) for g in groups}
    while len(picks) < k:
        picks.add(line.index(rng.choice(rng.choice(groups))))
    return [line[i] for i in sorted(picks)]


@pytest.mark.timeout(3600 + 400 * KILLS)
def test_pipeline_killed_at_each_stage(small_demo, tmp_path):
    ref_out = small_demo["out"]
    ref_rows, ref_files = store_rows(ref_out / "store.duckdb"), demo_files(ref_out)
    ref_steps = {est: {} for est in ESTIMATORS}
    for run_id, step, name in ref_rows["train_metrics"]:
        ref_steps[run_id.rsplit("-", 1)[1]].setdefault(step, set()).add(name)
    for est in ESTIMATORS:
        assert sorted(ref_steps[est]) == list(range(1, TRAIN_STEPS + 1))

    def segment(i: int, rng: random.Random) -> Segment:
        out = tmp_path / f"demo{i}" / "demo"  # the run ids come from the directory's name

        def final():
            measured = compare_rows(out / "store.duckdb", ref_rows)
            return {**measured, "mismatches": compare_demo(out, ref_files)}

        aims = random_aims(rng, 7) if KILLS else ci_aims()
        return Segment(demo_cmd(out), aims, lambda: {"stage": pipeline_stage(out, ref_steps)}, final)

    record = kill_chain("pipeline", segment, kills=max(KILLS, 1), seed=23, env=small_demo["env"], attempt_timeout=1500)
    write_report({**record, "reference_s": small_demo["seconds"], "files_compared": DEMO_FILES})
    check_record(record, max(KILLS, 6))
