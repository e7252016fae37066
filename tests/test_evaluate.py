"""The evaluation flow end to end on the tiny model: real Prefect, real engines, real
Math-Verify workers, a real DuckDB file; a real SIGKILL mid-run, then resumption."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from procs import kill_when

from prl.evaluation.config import EvalConfig, EvalError
from prl.grading.verifier import verify_one
from prl.store.db import Store

ROOT = Path(__file__).resolve().parents[1]


def test_config_is_validated_up_front(tmp_path):
    ok = dict(model=str(tmp_path), datasets=("synth_test",))
    EvalConfig(**ok)
    for bad, msg in [
        (dict(datasets=("mathh500",)), "datasets: unknown 'mathh500'"),
        (dict(datasets=()), "datasets: give at least one"),
        (dict(datasets=("amc23", "amc23")), "listed twice"),
        (dict(n=0), "n: expected an integer >= 1"),
        (dict(limit=0), "limit: expected an integer >= 1"),
        (dict(engine="tgi"), "engine: expected one of vllm, hf"),
        (dict(temperature=0.0, n=4), "greedy decoding"),
        (dict(top_p=0.0), "top_p"),
        (dict(parent_run_id="train-1"), "give parent_run_id and train_step together"),
    ]:
        with pytest.raises(EvalError, match=msg):
            EvalConfig(**{**ok, **bad})


def test_run_id_is_stable_for_the_same_settings(tmp_path):
    a = EvalConfig(model=str(tmp_path), datasets=("amc23",))
    assert a.resolved_run_id() == EvalConfig(model=str(tmp_path), datasets=("amc23",), limit=3).resolved_run_id()
    assert a.resolved_run_id() != EvalConfig(model=str(tmp_path), datasets=("amc23",), seed=1).resolved_run_id()
    assert a.resolved_run_id() != EvalConfig(model=str(tmp_path), datasets=("math500",)).resolved_run_id()  # issue 29


def _with_dtype(model_dir, out, **entries) -> Path:
    """A copy of ``model_dir`` whose config.json names only ``entries`` of dtype / torch_dtype (none: neither)."""
    shutil.copytree(model_dir, out)
    config = json.loads((out / "config.json").read_text())
    for key in ("dtype", "torch_dtype"):
        config.pop(key, None)
    (out / "config.json").write_text(json.dumps({**config, **entries}))
    return out


def test_dtype_auto_is_the_checkpoints_own_resolved_when_the_config_is_made(tiny_model_dir, tmp_path):
    assert EvalConfig(model=str(tiny_model_dir), datasets=("synth_test",)).dtype == "float32"  # the tiny model's own
    bf16 = _with_dtype(tiny_model_dir, tmp_path / "bf16", dtype="bfloat16")
    assert EvalConfig(model=str(bf16)).dtype == "bfloat16"
    assert EvalConfig(model=str(bf16), dtype="auto").to_dict()["dtype"] == "bfloat16"
    assert EvalConfig(model=str(bf16), dtype="float32").dtype == "float32"  # an explicit dtype wins
    assert EvalConfig(model=str(bf16), dtype="float16").identity()["dtype"] == "float16"
    older = _with_dtype(tiny_model_dir, tmp_path / "older", torch_dtype="bfloat16")  # files before transformers 4.56
    assert EvalConfig(model=str(older)).dtype == "bfloat16"
    assert EvalConfig(model=str(_with_dtype(tiny_model_dir, tmp_path / "none"))).dtype == "float32"
    assert EvalConfig(model=str(_with_dtype(tiny_model_dir, tmp_path / "null", dtype=None))).dtype == "float32"
    assert EvalConfig(model=str(tmp_path / "absent")).dtype == "float32"  # the model checks report the directory
    resolved = EvalConfig(model=str(bf16))
    assert EvalConfig(**resolved.__dict__) == resolved  # a resolved config rebuilds unchanged (resumes, shards)
    odd = _with_dtype(tiny_model_dir, tmp_path / "f64", torch_dtype="float64")
    with pytest.raises(EvalError, match=r"^dtype: .*config.json says torch_dtype 'float64'.*pass --dtype"):
        EvalConfig(model=str(odd))
    assert EvalConfig(model=str(odd), dtype="float32").dtype == "float32"
    with pytest.raises(EvalError, match=r"^dtype: expected one of auto, float32, bfloat16, float16, got 'fp16'"):
        EvalConfig(model=str(bf16), dtype="fp16")
    # the resolved dtype is what the run id hashes: a float32 model's default run id is the float32 one it always had
    base = dict(datasets=("synth_test",), n=1)
    assert (EvalConfig(model=str(tiny_model_dir), **base).resolved_run_id()
            == EvalConfig(model=str(tiny_model_dir), dtype="float32", **base).resolved_run_id())
    assert (EvalConfig(model=str(bf16), **base).resolved_run_id()
            == EvalConfig(model=str(bf16), dtype="bfloat16", **base).resolved_run_id()
            != EvalConfig(model=str(bf16), dtype="float32", **base).resolved_run_id())


def _prl_eval(capsys, model, db, *extra) -> dict:
    """`prl eval` in this process (its flow on the session's Prefect API); the summary it prints."""
    from prl_cli.main import main

    capsys.readouterr()
    rc = main(["eval", "--model", str(model), "--dataset", "synth_test", "--limit", "2", "--n", "1", "--max-tokens",
               "8", "--engine", "hf", "--verifier-workers", "1", "--db", str(db), "--quiet", *extra])
    out = capsys.readouterr()
    assert rc == 0, out.err[-3000:]
    return json.loads(out.out)


def _stored_dtypes(db, run_id) -> tuple[str, str, str]:
    """(the run's config dtype, its manifest's config dtype, the dtype its manifest's engine ran in)."""
    [row] = Store(db, create=False).rows("get_run", run_id=run_id)
    config, manifest = json.loads(row[5]), json.loads(row[6])
    return config["dtype"], manifest["config"]["dtype"], manifest["engine"]["dtype"]


def test_prl_eval_runs_a_bf16_checkpoint_in_bf16_and_a_float32_one_under_its_old_run_id(tiny_model_dir, tmp_path,
                                                                                        prefect_harness, capsys):
    """`prl eval` end to end: a checkpoint whose config.json says bfloat16 is generated in bfloat16 and stored so;
    --dtype overrides; a float32 model's default run is the --dtype float32 run (the second command resumes it)."""
    db = tmp_path / "store.duckdb"
    bf16 = _with_dtype(tiny_model_dir, tmp_path / "bf16", dtype="bfloat16")
    auto = _prl_eval(capsys, bf16, db)
    assert auto["samples_added"] == 2
    assert _stored_dtypes(db, auto["run_id"]) == ("bfloat16", "bfloat16", "bfloat16")
    forced = _prl_eval(capsys, bf16, db, "--dtype", "float32")
    assert forced["run_id"] != auto["run_id"] and forced["samples_added"] == 2
    assert _stored_dtypes(db, forced["run_id"]) == ("float32", "float32", "float32")
    from prl.evaluation.stages import preflight

    with pytest.raises(EvalError, match=r"dtype 'bfloat16' → 'float32'.*--dtype bfloat16 resumes this run"):
        preflight(EvalConfig(model=str(bf16), datasets=("synth_test",), n=1, max_tokens=8, engine="hf", db=str(db),
                             run_id=auto["run_id"], dtype="float32"))

    f32 = _prl_eval(capsys, tiny_model_dir, db)
    assert f32["run_id"] == EvalConfig(model=str(tiny_model_dir), datasets=("synth_test",), n=1, max_tokens=8,
                                       engine="hf", dtype="float32").resolved_run_id()
    again = _prl_eval(capsys, tiny_model_dir, db, "--dtype", "float32")
    assert again["run_id"] == f32["run_id"] and again["samples_added"] == 0 and again["skipped_complete"] == 2
    assert _stored_dtypes(db, f32["run_id"]) == ("float32", "float32", "float32")


def _counts(db, run_id):
    return {(d, p): c for d, p, c in Store(db, create=False).rows("stored_counts_for_run", run_id=run_id)}


def test_flow_stores_every_sample_and_resumes_idempotently(tiny_model_dir, tmp_path, prefect_harness):
    from flows.evaluate import evaluate

    db = str(tmp_path / "store.duckdb")
    cfg = EvalConfig(model=str(tiny_model_dir), datasets=("synth_test", "amc23", "minerva_math"), n=2, db=db,
                     engine="hf", limit=3, max_tokens=12, chunk_problems=4)
    summary = evaluate(cfg, progress=False)
    assert summary["problems"] == 9 and summary["samples_added"] == 18 and summary["stored_samples"] == 18
    counts = _counts(db, summary["run_id"])
    assert len(counts) == 9 and set(counts.values()) == {2}
    store = Store(db, create=False)
    [(run_id, kind, model, _created, status, config, manifest, *_)] = store.rows("get_run", run_id=summary["run_id"])
    manifest = json.loads(manifest)
    assert (kind, status) == ("eval", "finished")
    assert manifest["seed"] == 0 and manifest["sampling"]["n"] == 2 and manifest["engine"]["engine"] == "hf"
    assert len(manifest["prompt"]["template_sha256"]) == 64 and manifest["git"]["commit"]
    assert manifest["packages"]["duckdb"] and manifest["verifier"]["math_verify"]
    assert manifest["problems"] == {"synth_test": 3, "amc23": 3, "minerva_math": 3}
    # problems are stored with raw and normalised gold; minerva's gold is the inner boxed answer
    with store.read() as con:
        rows = con.execute("select problem_id, gold, gold_normalized from problems where dataset='minerva_math'").fetchall()
        stored = con.execute("select s.response, p.gold_normalized, s.verdict, s.extracted_answer from samples s "
                             "join problems p using (dataset, problem_id) order by all").fetchall()
        rel = con.execute("select count(*) from samples where relevance is null or answer_only is null").fetchall()
    assert len(rows) == 3 and all("boxed" in json.loads(g) and "boxed" not in gn for _, g, gn in rows)
    # each stored verdict is the verifier's on that very response against its own problem's gold (the flow's
    # worker pool, its cache and its ordering change nothing), not merely one of the six the schema allows
    direct = [verify_one(response, gold) for response, gold, _, _ in stored]
    assert [(v, e) for *_, v, e in stored] == [(d.verdict, d.extracted) for d in direct]
    assert rel == [(0,)]

    again = evaluate(cfg, progress=False)  # same command: nothing to do, nothing duplicated
    assert again["run_id"] == summary["run_id"] and again["skipped_complete"] == 9 and again["samples_added"] == 0
    assert _counts(db, summary["run_id"]) == counts
    assert json.loads(store.rows("get_run", run_id=summary["run_id"])[0][6])["engine"]["engine"] == "hf"

    more = evaluate(EvalConfig(**{**cfg.__dict__, "limit": 4}), progress=False)  # extend the same run
    assert more["samples_added"] == 6 and more["skipped_complete"] == 9
    with pytest.raises(EvalError, match=r"already exists .* other settings \(n 2 → 3\)"):
        evaluate(EvalConfig(**{**cfg.__dict__, "n": 3, "run_id": summary["run_id"]}), progress=False)


def test_prompts_longer_than_the_context_are_refused_before_generating(tiny_model_dir, tmp_path, prefect_harness):
    from flows.evaluate import evaluate

    db = str(tmp_path / "s.duckdb")
    cfg = EvalConfig(model=str(tiny_model_dir), datasets=("olympiad_bench",), n=1, db=db, engine="hf",
                     max_model_len=256, max_tokens=4)
    with pytest.raises(EvalError, match=r"prompt\(s\) do not fit the model's context of 256 tokens: olympiad_bench/"):
        evaluate(cfg, progress=False)
    assert Store(db, create=False).rows("count_samples") == [(0,)]
    assert Store(db, create=False).rows("get_run", run_id=cfg.resolved_run_id())[0][4] == "failed"


@pytest.mark.e2e
def test_sigkill_mid_run_then_resume_gives_exact_counts(tiny_model_dir, tmp_path, prefect_api_env):
    """`prl eval` with vLLM is SIGKILLed after some chunks are stored; rerunning the same command
    completes the run with exactly n samples per problem and no duplicates."""
    db = tmp_path / "store.duckdb"
    n, limit, chunk = 4, 48, 4
    cmd = [sys.executable, "-m", "prl_cli", "eval", "--model", str(tiny_model_dir), "--dataset", "synth_test,amc23",
           "--n", str(n), "--limit", str(limit // 2), "--max-tokens", "48", "--chunk", str(chunk), "--db", str(db),
           "--run", "killme", "--quiet"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    kill_when(cmd, lambda: Store(db, create=False, lock_timeout_s=5).rows("count_samples")[0][0] >= 2 * chunk * n,
              cwd=ROOT, env=env, timeout_s=300)  # the CLI and its verifier workers
    store = Store(db, create=False)
    after_kill = store.rows("count_samples")[0][0]
    assert 0 < after_kill < limit * n and after_kill % n == 0  # whole problems (whole chunks) only
    assert store.rows("get_run", run_id="killme")[0][4] == "running"

    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["skipped_complete"] == after_kill // n
    assert summary["samples_added"] == limit * n - after_kill
    counts = _counts(db, "killme")
    assert len(counts) == limit and set(counts.values()) == {n}
    with store.read() as con:
        assert con.execute("select count(*), count(distinct (dataset, problem_id, sample_idx)) from samples "
                           "where run_id = 'killme'").fetchall() == [(limit * n, limit * n)]
    assert store.rows("get_run", run_id="killme")[0][4] == "finished"

    report = subprocess.run([sys.executable, "-m", "prl_cli", "report", "--db", str(db)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr[-2000:]
    assert "run killme: 48 problems, n=4" in report.stdout and "micro" in report.stdout
    assert report.stdout.count("MISMATCH") == 1
