"""kill -9 at seeded random moments in `prl eval` and `prl train`; after every kill the store holds
only whole units (problems, steps), the latest checkpoint loads, and the rerun completes with
exactly the rows of an uninterrupted run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

from chain import KILLS, ROOT, Segment, kill_chain, write_report
from prl.store.db import Store

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cli_env(prefect_harness):
    """The CLI under test reports to the session's Prefect server (no temporary server per start)."""
    from prefect.settings import PREFECT_API_URL

    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                              "MASTER_PORT", "LOCAL_WORLD_SIZE")}
    return {**env, "PREFECT_API_URL": PREFECT_API_URL.value(), "OMP_NUM_THREADS": "1"}


def _samples(db, run_id) -> set[tuple]:
    with Store(db, create=False).read() as con:
        return set(con.execute("select dataset, problem_id, sample_idx, response, verdict from samples "
                               "where run_id = $r", {"r": run_id}).fetchall())


@pytest.mark.timeout(300 + 60 * KILLS)
def test_eval_killed_at_random_points(tiny_model_dir, tmp_path, cli_env):
    import subprocess
    import time

    n, problems = 2, 160
    args = [sys.executable, "-m", "prl_cli", "eval", "--model", str(tiny_model_dir), "--datasets",
            f"synth_test:{problems}", "--n", str(n), "--max-tokens", "32", "--chunk", "4", "--run-id", "e",
            "--verifier-workers", "1", "--no-progress"]
    ref_db = tmp_path / "ref.duckdb"
    t = time.monotonic()
    ref = subprocess.run(args + ["--db", str(ref_db)], cwd=ROOT, env=cli_env, capture_output=True, text=True,
                         timeout=900)
    assert ref.returncode == 0, ref.stderr[-3000:]
    t_ref = time.monotonic() - t
    expected = _samples(ref_db, "e")
    assert len(expected) == problems * n

    def segment(i: int) -> Segment:
        db = tmp_path / f"store-{i}.duckdb"

        def after_kill():
            if not db.exists():
                return {"samples": 0}
            counts = Store(db, create=False, lock_timeout_s=30).rows("stored_counts_for_run", run_id="e")
            assert {c for *_, c in counts} <= {n}, "a problem was stored partially"
            return {"samples": sum(c for *_, c in counts)}

        def final():
            got = _samples(db, "e")
            assert got == expected  # every sample of the uninterrupted run, identical, nothing else
            assert Store(db, create=False).rows("get_run", run_id="e")[0][4] == "finished"
            with Store(db, create=False).read() as con:
                dup = con.execute("select count(*) - count(distinct (dataset, problem_id, sample_idx)) "
                                  "from samples").fetchall()[0][0]
            assert dup == 0
            return {"rows_expected": len(expected), "rows_lost": len(expected - got), "rows_extra": len(got - expected),
                    "duplicates": dup}

        return Segment(args + ["--db", str(db)], after_kill, final)

    record = kill_chain("eval", segment, kills=KILLS, seed=7, delay=(0.4 * t_ref, 1.0 * t_ref), env=cli_env)
    write_report(record)
    assert record["kills"] == KILLS and record["rows_lost"] == 0 and record["rows_extra"] == 0


def _train_config(model, tmp_path, steps: int) -> Path:
    data = {"algorithm": {"estimator": "prl", "eta": 10, "step_split": "fixed:8", "n_samples": 4},
            "train": {"model": str(model), "out_dir": str(tmp_path / "out"), "db": str(tmp_path / "store.duckdb"),
                      "run_id": "t", "steps": steps, "prompts_per_step": 4, "max_tokens": 24, "engine": "vllm",
                      "lr": 1e-4, "mini_batch_size": 16, "micro_batch_size": 8, "checkpoint_every": 2,
                      "eval_every": steps // 2, "eval_datasets": ["synth_test"], "eval_limit": 6, "eval_n": 2,
                      "segments_per_step": 2, "seed": 0, "verifier_workers": 1}}
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _steps(db) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for step, name, _v in Store(db, create=False, lock_timeout_s=30).rows("train_metrics_for_run", run_id="t"):
        out.setdefault(step, set()).add(name)
    return out


@pytest.mark.timeout(300 + 90 * KILLS)
def test_train_killed_at_random_points(tiny_model_dir, tmp_path, cli_env):
    import torch

    steps = 10

    def segment(i: int) -> Segment:
        seg_dir = tmp_path / f"seg{i}"
        seg_dir.mkdir()
        cfg = _train_config(tiny_model_dir, seg_dir, steps)
        db, ckpt = seg_dir / "store.duckdb", seg_dir / "out" / "checkpoints"
        names: set[str] = set()

        def after_kill():
            stored = _steps(db) if db.exists() else {}
            assert sorted(stored) == list(range(1, len(stored) + 1)), f"steps not contiguous: {sorted(stored)}"
            if stored:
                names.update(stored[1])
                assert all(s == stored[1] for s in stored.values()), "a step's metrics were stored partially"
            latest = (ckpt / "latest").read_text().strip() if (ckpt / "latest").exists() else None
            if latest:  # the checkpoint `latest` names is whole and loads
                states = torch.load(ckpt / latest / "mp_rank_00_model_states.pt", map_location="cpu",
                                    weights_only=False)
                assert states["module"]
            return {"steps_stored": len(stored), "latest_checkpoint": latest}

        def final():
            stored = _steps(db)
            full = names or stored[1]
            assert sorted(stored) == list(range(1, steps + 1)) and all(v == full for v in stored.values())
            store = Store(db, create=False)
            assert store.rows("get_run", run_id="t")[0][4] == "finished"
            for step in (steps // 2, steps):
                counts = store.rows("stored_counts_for_run", run_id=f"t@step{step}")
                assert len(counts) == 6 and {c for *_, c in counts} == {2}
            with store.read() as con:
                dup = con.execute("select count(*) - count(distinct (step, name)) from train_metrics").fetchall()[0][0]
            got = sum(len(v) for v in stored.values())
            return {"rows_expected": steps * len(full), "rows_lost": steps * len(full) - got, "rows_extra": 0,
                    "duplicates": dup}

        return Segment([sys.executable, "-m", "prl_cli", "train", "--config", str(cfg), "--resume", "--no-progress"],
                       after_kill, final)

    record = kill_chain("train", segment, kills=KILLS, seed=11, delay=(6.0, 40.0), env=cli_env)
    write_report(record)
    assert record["kills"] == KILLS and record["rows_lost"] == 0 and record["duplicates"] == 0
