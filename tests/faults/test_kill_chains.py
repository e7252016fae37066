"""kill -9 at named stages of `prl eval` and of the training script; after every kill the store and the files
show the stage the kill aimed at, only whole units (problems, steps) are stored and the checkpoint ``latest``
names loads; the rerun completes with the rows of an uninterrupted run of the same command (the reference,
run once per chain), equal key by key and value by value, with bit-identical weights (training: the policy,
the latest checkpoint's module and every export) and checkpoint tags.

CI (``PRL_FAULT_KILLS`` unset): one kill per stage. The long chains (``PRL_FAULT_KILLS=20``, what
``bench/run_all.py --only faults --full`` runs) draw at least that many kills at seeded random stages and are
recorded in bench/results/faults.json.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from chain import (KILLS, NOT_COMPARED, Aim, Segment, check_record, clean_env, compare_rows, file_digest, kill_chain,
                   run_reference, store_rows, tensors_equal, write_report, write_reproducibility)
from stages import Schedule, aimed_eval_stage, eval_stage, random_train_aims, train_aim, train_stage, train_state

from prl.store.db import Store

pytestmark = pytest.mark.e2e


# ─── evaluation ───────────────────────────────────────────────────────────────────────────────────

EVAL_N, EVAL_CHUNK = 2, 8
EVAL_PROBLEMS = 64 if KILLS else 32  # chunks of 8: 8 (bench) or 4 (CI)


def _eval_cmd(model, db: Path) -> list[str]:
    return [sys.executable, "-m", "prl_cli", "eval", "--model", str(model), "--dataset", f"synth_test:{EVAL_PROBLEMS}",
            "--n", str(EVAL_N), "--max-tokens", "32", "--chunk", str(EVAL_CHUNK), "--run", "e", "--db", str(db),
            "--verifier-workers", "1", "--quiet"]


def _eval_aims(rng: random.Random | None) -> list[Aim]:
    """CI: a kill 0.1 s into the second chunk's generation, then one inside the third chunk's store transaction.
    Long chains: 5 kills at seeded random chunks (strictly later each time), either kind."""
    chunks = EVAL_PROBLEMS // EVAL_CHUNK
    plan = ([(1, "eval/generate"), (2, "store/insert_samples")] if rng is None else
            sorted((c, rng.choice(["eval/generate", "store/insert_samples"]))
                   for c in rng.sample(range(chunks), min(5, chunks))))
    aims, done = [], 0
    for chunk, point in plan:  # chunk: 0-based index in the run; the start after a kill counts from the first unstored
        k = chunk - done + 1
        spec = f"{point}@e:{k}" + ("+0.1" if point == "eval/generate" else "")
        aims.append(Aim(spec, "generating a chunk" if point == "eval/generate" else "inside a chunk's store transaction",
                        aimed_eval_stage(chunk)))
        done = chunk
    return aims


@pytest.mark.timeout(900 + 120 * KILLS)
def test_eval_killed_at_each_stage(tiny_model_dir, tmp_path, prefect_api_env):
    env = clean_env(OMP_NUM_THREADS="1")
    ref_db = tmp_path / "ref.duckdb"
    t_ref = run_reference(_eval_cmd(tiny_model_dir, ref_db), env)
    ref = store_rows(ref_db)
    assert len(ref["samples"]) == EVAL_PROBLEMS * EVAL_N and ref["runs"][("e",)] == [("eval", "finished", None, None)]

    def segment(i: int, rng: random.Random) -> Segment:
        db = tmp_path / f"store-{i}.duckdb"

        def final():
            measured = compare_rows(db, ref)
            status = Store(db, create=False).records("get_run", run_id="e")[0]["status"]
            return {**measured, "mismatches": [] if status == "finished" else [f"run e is {status!r}"]}

        return Segment(_eval_cmd(tiny_model_dir, db), _eval_aims(rng if KILLS else None),
                       lambda: eval_stage(db, "e", EVAL_N, EVAL_CHUNK), final)

    record = kill_chain("eval", segment, kills=max(KILLS, 1), seed=7, env=env)
    write_report({**record, "reference_s": round(t_ref, 1)})
    check_record(record, max(KILLS, 2))


# ─── training ─────────────────────────────────────────────────────────────────────────────────────

SCHED = Schedule("t", steps=10 if KILLS else 6, checkpoint_every=2, eval_every=4, evaluates=True)


def _easy_problems(path: Path) -> Path:
    """Level-1 and -2 problems of the synthetic training split, where the warm start has mixed rewards."""
    from prl.data import synthetic

    rows = [r for r in synthetic.generate("train", 600, seed=0) if r["level"] <= 2][:200]
    path.write_text("".join(json.dumps({"problem": r["problem"], "answer": r["answer"]}) + "\n" for r in rows))
    return path


def _train_config(model, d: Path, engine: str = "vllm") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    data = {"algorithm": {"estimator": "prl", "eta": 10, "step_split": "fixed:8", "n_samples": 4},
            "train": {"model": str(model), "out_dir": str(d / "out"), "db": str(d / "store.duckdb"),
                      "train_data": str(_easy_problems(d / "easy.jsonl")), "run_id": SCHED.run_id, "steps": SCHED.steps,
                      "prompts_per_step": 4, "max_tokens": 32, "engine": engine, "lr": 1e-3, "mini_batch_size": 8,
                      "micro_batch_size": 4, "checkpoint_every": SCHED.checkpoint_every, "eval_every": SCHED.eval_every,
                      "eval_datasets": ["synth_test"], "eval_limit": 6, "eval_n": 2, "segments_per_step": 2, "seed": 0,
                      "verifier_workers": 1, "threads": 1}}
    path = d / "t.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _train_cmd(cfg: Path) -> list[str]:
    return [sys.executable, "-m", "prl.training.train", "--config", str(cfg), "--resume", "--quiet"]


TRAINED_FILES = "the policy, every export and the checkpoint tags (sha256 of the weights files); the latest checkpoint's module (tensor by tensor, bitwise)"


def trained_files(out: Path) -> dict[str, Any]:
    """What a finished run leaves beside the store: checkpoint tags, `latest`, the latest checkpoint's module
    state, the digests of the policy's and each export's weights."""
    import torch

    ckpt = out / "checkpoints"
    latest = (ckpt / "latest").read_text().strip()
    module = torch.load(ckpt / latest / "mp_rank_00_model_states.pt", map_location="cpu", weights_only=False)["module"]
    return {"tags": sorted(p.name for p in ckpt.glob("step_*")), "latest": latest, "module": module,
            "policy": file_digest(out / "policy" / "model.safetensors"),
            "exports": {p.name: file_digest(p / "model.safetensors") for p in sorted((out / "exports").glob("step_*"))}}


def compare_trained(out: Path, ref: dict[str, Any]) -> list[str]:
    got, bad = trained_files(out), []
    for k in ("tags", "latest", "policy", "exports"):
        if got[k] != ref[k]:
            bad.append(f"{k}: {got[k]} != the reference's {ref[k]}")
    differ = tensors_equal(got["module"], ref["module"])
    if differ:
        bad.append(f"checkpoint {got['latest']}: {len(differ)} tensors not bit-identical ({differ[:3]})")
    return bad


@pytest.fixture(scope="module")
def train_reference(warm_model, tmp_path_factory):
    """The uninterrupted training run every train chain compares with: its rows, files, seconds."""
    model, _ = warm_model
    d = tmp_path_factory.mktemp("train-ref")
    env = clean_env(OMP_NUM_THREADS="1")
    seconds = run_reference(_train_cmd(_train_config(model, d)), env)
    rows, files = store_rows(d / "store.duckdb"), trained_files(d / "out")
    steps: dict[int, set[str]] = {}
    for _run, step, name in rows["train_metrics"]:
        steps.setdefault(step, set()).add(name)
    assert sorted(steps) == list(range(1, SCHED.steps + 1)) and files["latest"] == f"step_{SCHED.steps:06d}"
    return {"model": model, "dir": d, "rows": rows, "files": files, "steps": steps, "seconds": seconds, "env": env}


def _train_ci_aims() -> list[Aim]:
    """One kill per stage, in the order a run reaches them: step 4 (a checkpoint step, after checkpoint 2 and the
    stored step 3) after its update, then inside its store transaction (its checkpoint committed), then during its
    evaluation. (A checkpoint's files written before `latest` moves, and the checkpoint before its export: the long
    chains.)"""
    return [train_aim("train/update_done", 4, SCHED), train_aim("train/store_write", 4, SCHED),
            train_aim("eval/generate", 4, SCHED)]


@pytest.mark.skipif(not KILLS, reason="a second uninterrupted training (~1 min): bench/run_all.py --only faults; in CI "
                    "the killed-and-resumed run below is the second run compared with the reference")
@pytest.mark.timeout(900)
def test_training_twice_with_one_seed_is_bit_identical(train_reference, tmp_path):
    """The same config and seed trained again, uninterrupted, in a fresh process on this machine: every stored row
    equal by value (rollouts, segments, training metrics but the measured time/ and memory/ ones, the periodic and
    final evaluations' samples), the policy, each export and the latest checkpoint's module bit-identical. (The
    kill chain below compares a third run, killed at each stage and resumed, with the same reference.)"""
    ref = train_reference
    d = tmp_path / "again"
    seconds = run_reference(_train_cmd(_train_config(ref["model"], d)), ref["env"])
    measured = compare_rows(d / "store.duckdb", ref["rows"])
    mismatches = compare_trained(d / "out", ref["files"])
    record = {"name": "train_twice", "what": "the training run of the kill chain, run twice uninterrupted",
              "reference_s": round(ref["seconds"], 1), "seconds": round(seconds, 1), "files_compared": TRAINED_FILES,
              "policy": ref["files"]["policy"],
              "exports": ref["files"]["exports"], "checkpoint": ref["files"]["latest"],
              "checkpoint_tensors": len(ref["files"]["module"]), **measured, "mismatches": mismatches,
              "not_compared": NOT_COMPARED}
    write_reproducibility(record)
    assert mismatches == [] and measured["values_differ"] == 0, (mismatches, measured["differences"])
    assert measured["rows_lost"] == measured["rows_extra"] == measured["duplicates"] == 0, measured
    assert measured["rows_compared"] > 200 and ref["rows"]["samples"]  # evaluations included


@pytest.mark.timeout(1200 + 300 * KILLS)
def test_train_killed_at_each_stage(train_reference, tmp_path):
    ref = train_reference

    def segment(i: int, rng: random.Random) -> Segment:
        d = tmp_path / f"seg{i}"
        cfg = _train_config(ref["model"], d)
        db, out = d / "store.duckdb", d / "out"

        def derive():
            state = train_state(db, out, SCHED, ref["steps"])
            return {"stage": train_stage(state, SCHED), **state}

        def final():
            measured = compare_rows(db, ref["rows"])
            mismatches = compare_trained(out, ref["files"])
            status = Store(db, create=False).records("get_run", run_id=SCHED.run_id)[0]["status"]
            if status != "finished":
                mismatches.append(f"run t is {status!r}")
            return {**measured, "mismatches": mismatches}

        aims = random_train_aims(SCHED, rng, 5) if KILLS else _train_ci_aims()
        return Segment(_train_cmd(cfg), aims, derive, final)

    record = kill_chain("train", segment, kills=max(KILLS, 1), seed=11, env=ref["env"])
    write_report({**record, "reference_s": round(ref["seconds"], 1), "files_compared": TRAINED_FILES})
    check_record(record, max(KILLS, 3))


@pytest.mark.skipif(not KILLS, reason="the hf engine's same-seed runs (~3 training runs): bench/run_all.py --only faults")
@pytest.mark.timeout(3600)
def test_hf_engine_training_twice_and_killed_is_bit_identical(warm_model, tmp_path):
    """The same with the transformers engine for rollouts and evaluations (its samples are seeded per generate call
    and batch, not per prompt as vLLM's): an uninterrupted run, the same again, and one killed at each stage of the
    CI chain and resumed."""
    model, _ = warm_model
    env = clean_env(OMP_NUM_THREADS="1")
    seconds = run_reference(_train_cmd(_train_config(model, tmp_path / "ref", "hf")), env)
    rows, files = store_rows(tmp_path / "ref" / "store.duckdb"), trained_files(tmp_path / "ref" / "out")
    steps: dict[int, set[str]] = {}
    for _run, step, name in rows["train_metrics"]:
        steps.setdefault(step, set()).add(name)
    again = run_reference(_train_cmd(_train_config(model, tmp_path / "again", "hf")), env)
    twice = {**compare_rows(tmp_path / "again" / "store.duckdb", rows),
             "mismatches": compare_trained(tmp_path / "again" / "out", files)}
    write_reproducibility({"name": "train_twice_hf", "what": "the same training run with the hf engine, run twice "
                           "uninterrupted", "reference_s": round(seconds, 1), "seconds": round(again, 1),
                           "files_compared": TRAINED_FILES, **twice, "not_compared": NOT_COMPARED})

    def segment(i: int, rng: random.Random) -> Segment:
        d = tmp_path / f"seg{i}"
        cfg = _train_config(model, d, "hf")
        db, out = d / "store.duckdb", d / "out"

        def derive():
            state = train_state(db, out, SCHED, steps)
            return {"stage": train_stage(state, SCHED), **state}

        return Segment(_train_cmd(cfg), _train_ci_aims(), derive,
                       lambda: {**compare_rows(db, rows), "mismatches": compare_trained(out, files)})

    record = kill_chain("train_hf", segment, kills=1, seed=11, env=env)
    write_reproducibility({**record, "what": "the same training run with the hf engine, killed at each stage and "
                           "resumed", "reference_s": round(seconds, 1), "files_compared": TRAINED_FILES})
    assert twice["values_differ"] == 0 and twice["mismatches"] == [], twice
    check_record(record, 3)
