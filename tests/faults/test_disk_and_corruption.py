"""A full disk while writing a checkpoint or a shard, and a corrupt checkpoint: a clear error that
names the file and the way on, and nothing already stored lost.

The full disk is a real one: a small tmpfs mounted for the test (needs root, as CI and the
development machines run; skipped with the reason elsewhere).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from chain import ROOT
from prl.store.db import Store


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of 256 MiB (memory is only used as it fills)."""
    mnt = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}); run as root to test a full disk")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(disk: Path, leave_bytes: int = 64 * 1024) -> Path:
    """Fill the disk up to ``leave_bytes`` of free space."""
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    ballast = disk / "ballast"
    with open(ballast, "wb") as fh:
        chunk = b"\0" * (1 << 20)
        todo = max(0, free - leave_bytes)
        while todo > 0:
            fh.write(chunk[: min(len(chunk), todo)])
            todo -= min(len(chunk), todo)
    return ballast


def test_shard_on_a_full_disk_fails_by_name_and_leaves_nothing_half_written(small_disk, tmp_path):
    from prl.evaluation.shards import ShardError, ingest_shard, write_shard

    db = tmp_path / "store.duckdb"
    rows = [{"run_id": "r", "dataset": "d", "problem_id": f"p{i}", "sample_idx": 0, "response": os.urandom(600).hex(),
             "extracted_answer": None, "verdict": "wrong", "score": 0.0, "n_tokens": 1, "finish_reason": "stop",
             "verify_ms": 1.0} for i in range(400)]
    Store(db).insert_samples(rows[:10])
    ok = write_shard(rows[:100], small_disk / "shards" / "shard-a.parquet")
    _fill(small_disk)
    target = small_disk / "shards" / "shard-b.parquet"
    with pytest.raises(ShardError) as err:
        write_shard(rows, target)
    assert str(target) in str(err.value) and "No space left on device" in str(err.value)
    assert "free space and rerun" in str(err.value)
    assert not target.exists() and not list(target.parent.glob(".shard-b*"))  # no partial file
    assert ingest_shard(db, "r", ok) == 90  # the earlier shard is whole and stores
    assert Store(db, create=False).rows("count_samples") == [(100,)]


def _config(model, out: Path, db: Path, steps: int) -> Path:
    data = {"algorithm": {"estimator": "grpo", "n_samples": 4},
            "train": {"model": str(model), "out_dir": str(out), "db": str(db), "run_id": "d", "steps": steps,
                      "prompts_per_step": 4, "max_tokens": 16, "engine": "hf", "lr": 1e-4, "mini_batch_size": 16,
                      "micro_batch_size": 8, "checkpoint_every": 2, "keep_checkpoints": 2, "eval_datasets": [],
                      "seed": 0, "verifier_workers": 1}}
    path = out.parent / "d.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _steps(db):
    return [s for s, in Store(db, create=False, lock_timeout_s=30).rows("train_steps_for_run", run_id="d")]


@pytest.mark.e2e
def test_checkpoint_on_a_full_disk_then_a_corrupt_checkpoint(tiny_model_dir, tmp_path, small_disk):
    """(1) The disk fills after the step-4 checkpoint: writing step 6's fails with one line naming it and
    saying step 4's is intact. (2) Space freed, step 4's checkpoint corrupted: --resume skips it with a
    warning naming the file, resumes from step 2, and ends with steps 1-8 each once."""
    out, db = tmp_path / "out", tmp_path / "store.duckdb"
    out.mkdir()
    (out / "checkpoints").symlink_to(small_disk / "ckpt", target_is_directory=True)
    (small_disk / "ckpt").mkdir()
    cfg = _config(tiny_model_dir, out, db, steps=8)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                              "MASTER_PORT", "LOCAL_WORLD_SIZE")}
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "prl.training.train", "--config", str(cfg)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    latest = small_disk / "ckpt" / "latest"
    deadline = time.monotonic() + 600
    while proc.poll() is None and time.monotonic() < deadline:
        if latest.exists() and latest.read_text().strip() == "step_000004":
            ballast = _fill(small_disk)
            break
        time.sleep(0.02)
    else:
        proc.kill()
        pytest.fail("the step-4 checkpoint never appeared: " + proc.stderr.read()[-3000:])
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 2, stderr[-3000:]
    line = next(x for x in stderr.splitlines() if x.startswith("error:"))
    assert "step_000006: could not write the checkpoint of step 6" in line, line
    assert "the previous checkpoint step_000004 is intact" in line and "--resume" in line
    assert "Traceback" not in stderr
    assert _steps(db) == [1, 2, 3, 4, 5]  # every finished step is stored; step 6 is not
    assert not (small_disk / "ckpt" / "step_000006").exists()

    ballast.unlink()
    model_file = small_disk / "ckpt" / "step_000004" / "mp_rank_00_model_states.pt"
    model_file.write_bytes(model_file.read_bytes()[:1000])  # truncated
    done = subprocess.run(cmd + ["--resume"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "skipped unreadable checkpoint(s)" in done.stderr and "step_000004" in done.stderr
    assert "resumed d from" in done.stderr and "after step 2" in done.stderr
    assert _steps(db) == list(range(1, 9))
    with Store(db, create=False).read() as con:
        assert con.execute("select count(*) - count(distinct (step, name)) from train_metrics").fetchall() == [(0,)]
    assert Store(db, create=False).rows("get_run", run_id="d")[0][4] == "finished"

    # Every checkpoint unreadable: a one-line error naming them, nothing stored touched.
    for f in (small_disk / "ckpt").glob("step_*/mp_rank_00_model_states.pt"):
        f.write_bytes(b"garbage")
    bad = subprocess.run(cmd + ["--resume", "--steps", "10"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert bad.returncode == 2 and "no checkpoint could be loaded" in bad.stderr, bad.stderr[-3000:]
    assert "Traceback" not in bad.stderr
    assert _steps(db) == list(range(1, 9))
