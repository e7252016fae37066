"""Training on DeepSpeed (gloo on CPU) with the tiny model: real rollouts, real verification,
real optimizer steps, the real store; SIGKILL + resume; world size 2 under the launcher."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from procs import kill_when

from prl.store.db import Store
from hypothesis import given, settings
from hypothesis import strategies as st

from prl.training.batches import MicroBatch, pack, split_rows
from prl.training.forward import response_logprobs
from prl.training.train import prompt_indices
from prl.training.config import RunConfig, TrainConfig, train_from_dict
from prl_core.config import AlgorithmConfig, ConfigError

ROOT = Path(__file__).resolve().parents[1]
METRIC_NAMES_PPO = {"reward/mean", "reward/accuracy", "reward/all_equal_group_frac", "response/length", "actor/kl_ref",
                    "prl/rho_mean", "prl/rho_std", "actor/loss", "actor/pg_loss", "actor/clipfrac", "actor/entropy",
                    "actor/approx_kl", "actor/grad_norm", "actor/lr", "time/generate", "time/verify",
                    "time/logprobs", "time/update", "time/step", "actor/drift", "actor/kl_ref_seq",
                    "rollout/is_weight_mean", "rollout/is_weight_max", "rollout/is_clipped_frac", "rollout/mismatch_kl"}


# ─── config ────────────────────────────────────────────────────────────────────────────────

@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "train").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_validate(path):
    from prl.training.distributed import ds_config

    cfg = RunConfig.from_yaml(path)
    world = 4 if "paper" in path.name else 1
    cfg.train.validate(cfg.algorithm, world)  # raises ConfigError on any contradiction
    ds = ds_config(cfg.train, world)
    assert ds["train_batch_size"] == ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * world
    per_rank = cfg.train.prompts_per_step // world * cfg.algorithm.n_samples
    assert per_rank % cfg.train.mini_batch_size == 0
    assert (cfg.algorithm.step_split is not None) == (cfg.algorithm.estimator == "prl")
    if "paper" in path.name:  # Table 6
        assert (cfg.algorithm.n_samples, cfg.train.prompts_per_step, cfg.train.lr, cfg.train.max_tokens) == (5, 128, 1e-6, 3072)
        assert cfg.algorithm.kl_loss_coef == 0 and 100 <= cfg.algorithm.eta <= 300 and cfg.algorithm.step_split == "fixed:256"


def test_contradictions_are_refused_with_a_fix(tmp_path):
    base = {"model": "m", "prompts_per_step": 4, "mini_batch_size": 8, "micro_batch_size": 4}
    algo = AlgorithmConfig(estimator="grpo", n_samples=4)
    TrainConfig(**base).validate(algo)
    for bad, msg in [
        ({"mini_batch_size": 6}, r"mini_batch_size: 6 does not divide the 16 rollouts"),
        ({"micro_batch_size": 3}, "micro_batch_size: 3 does not divide mini_batch_size 8"),
        ({"temperature": 0.0}, "rollouts must be sampled"),
        ({"prompts_per_step": 3, "mini_batch_size": 4}, "do not shard evenly over 2 ranks"),
        ({"zero_stage": 4}, "zero_stage"),
        ({"model": ""}, "give the starting model"),
        ({"max_tokens_per_micro_batch": 96}, "cannot hold one response of max_tokens 96"),
        ({"logprob_chunk_tokens": 0}, "logprob_chunk_tokens: expected an integer >= 1"),
        ({"rollout_memory_utilization": 1.0}, r"a share of the device in \(0, 1\)"),
        ({"rollout_kv_cache_gib": 2.0, "engine": "hf"}, "only the 'vllm' engine has a KV cache"),
        ({"rollout_sleep_level": 3}, "expected 0 \\(off\\), 1 or 2"),
        ({"gradient_checkpointing": "yes"}, "gradient_checkpointing: expected true or false"),
    ]:
        with pytest.raises(ConfigError, match=msg):
            TrainConfig(**{**base, **bad}).validate(algo, 2 if "prompts_per_step" in bad else 1)
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump({"algorithm": {"estimator": "grpo", "step_split": "fixed:256"}, "train": base}))
    with pytest.raises(ConfigError, match="step_split"):  # the authors' script silently trained GRPO this way
        RunConfig.from_yaml(f)
    with pytest.raises(ConfigError, match="unknown key.*batch_size"):
        train_from_dict({"batch_size": 3})


# ─── pure pieces against slow, obvious loops ─────────────────────────────────────────────────

def test_data_order_is_a_pure_function_of_the_step():
    a = [prompt_indices(10, s, 4, seed=0) for s in range(5)]
    assert a == [prompt_indices(10, s, 4, seed=0) for s in range(5)]
    flat = [i for step in a for i in step]
    assert sorted(flat[:10]) == list(range(10)) and sorted(flat[10:20]) == list(range(10))  # epochs cover all
    assert prompt_indices(10, 0, 4, seed=1) != a[0]


def test_response_logprobs_match_a_per_row_forward(tiny_model_dir):
    from types import SimpleNamespace

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    prompts = [[5, 9, 13], [7, 8, 9, 10, 11]]
    samples = [SimpleNamespace(prompt_index=0, token_ids=[20, 21, 22, 23]),
               SimpleNamespace(prompt_index=1, token_ids=[30]),
               SimpleNamespace(prompt_index=0, token_ids=[40, 41])]
    p = pack(prompts, samples, pad_id=0)
    with torch.no_grad():
        mb = MicroBatch(torch.arange(3), p["input_ids"], p["prompt_len"], p["response_ids"], p["mask"])
        logp, _ = response_logprobs(model, mb, temperature=0.7, chunk_tokens=2)
        for b, s in enumerate(samples):
            seq = torch.tensor([prompts[s.prompt_index] + s.token_ids])
            logits = model(input_ids=seq).logits[0].float() / 0.7
            P = len(prompts[s.prompt_index])
            for t, tok in enumerate(s.token_ids):
                expected = torch.log_softmax(logits[P - 1 + t], -1)[tok]
                assert logp[b, t].item() == pytest.approx(expected.item(), abs=1e-5)
            assert (logp[b, len(s.token_ids):] == 0).all()


# ─── micro-batches: cut to their own length, or to a token budget ──────────────────────────────

@settings(max_examples=200, deadline=None)
@given(lengths=st.lists(st.integers(1, 60), min_size=1, max_size=24), budget=st.integers(60, 400),
       extra=st.integers(0, 5), data=st.data())
def test_a_token_budget_cuts_every_row_once_in_order_within_the_budget(lengths, budget, extra, data):
    rows = torch.tensor(data.draw(st.permutations(range(len(lengths)))))
    lens = torch.tensor(lengths)
    parts = split_rows(rows, lens, size=4, budget=budget)
    assert torch.cat(parts).tolist() == rows.tolist()  # every row once, in the order given
    assert all(len(p) * int(lens[p].max()) <= budget for p in parts)
    at_least = min(len(parts) + extra, len(lengths))  # another rank needs more: as many here
    again = split_rows(rows, lens, size=4, budget=budget, at_least=at_least)
    assert len(again) >= at_least and torch.cat(again).tolist() == rows.tolist()
    assert all(len(p) * int(lens[p].max()) <= budget for p in again)
    with pytest.raises(ValueError, match="raise the budget"):
        split_rows(rows, lens + budget, size=4, budget=budget)


def _old_logprobs(model, input_ids, attention, prompt_len, response_ids, mask, temperature):
    """The computation this replaced (git 2b56519~1:prl/training/train.py): the whole batch's logits, padded
    to the step's longest sequence, gathered, upcast and log-softmaxed (the reference here)."""
    logits = model(input_ids=input_ids, attention_mask=attention.long()).logits
    B, T = response_ids.shape
    cols = (prompt_len.unsqueeze(1) - 1 + torch.arange(T).unsqueeze(0)).clamp_max(input_ids.shape[1] - 1)
    picked = torch.gather(logits, 1, cols.unsqueeze(-1).expand(B, T, logits.shape[-1])).float() / temperature
    logp = torch.log_softmax(picked, dim=-1).gather(-1, response_ids.unsqueeze(-1)).squeeze(-1)
    return torch.where(mask, logp, 0.0)


def _rollouts(seed=0, B=8, vocab=500):
    """Packed rollouts of varied prompt and response lengths, and advantages."""
    from types import SimpleNamespace

    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(5, vocab, (int(n),), generator=g).tolist() for n in torch.randint(3, 9, (B,), generator=g)]
    samples = [SimpleNamespace(prompt_index=b, token_ids=torch.randint(5, vocab, (int(n),), generator=g).tolist())
               for b, n in enumerate(torch.randint(1, 20, (B,), generator=g))]
    p = pack(prompts, samples, pad_id=0)
    attention = torch.zeros_like(p["input_ids"], dtype=torch.bool)
    for b in range(B):
        attention[b, : int(p["prompt_len"][b] + p["mask"][b].sum())] = True
    return p, attention, torch.randn(p["mask"].shape, generator=g)


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_micro_batches_cut_to_their_own_length_give_todays_loss_and_gradients(tiny_model_dir):
    """Micro-batches of micro_batch_size rows, each cut to its own longest sequence, through the chunked log-probs:
    the same per-micro-batch losses and the same accumulated gradient as the whole step padded and its full
    logits (each micro-batch's token-mean divided by the accumulation steps, as DeepSpeed does)."""
    from transformers import AutoModelForCausalLM

    from prl_core.losses import ppo_clip_loss
    from prl.training.batches import Rollouts, micro_batch

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).train()
    p, attention, adv = _rollouts()
    B = p["mask"].shape[0]
    r = Rollouts(**p, group_ids=torch.zeros(B, dtype=torch.long), rewards=torch.zeros(B), texts=[""] * B,
                 golds=[""] * B, prompt_index=list(range(B)), verdicts=[""] * B)
    with torch.no_grad():
        old = _old_logprobs(model, p["input_ids"], attention, p["prompt_len"], p["response_ids"], p["mask"], 0.7)
    micros = torch.randperm(B, generator=torch.Generator().manual_seed(1)).split(3)
    ga = len(micros)
    before = []
    for rows in micros:  # today's: the step's full width, full logits
        logp = _old_logprobs(model, p["input_ids"][rows], attention[rows], p["prompt_len"][rows],
                             p["response_ids"][rows], p["mask"][rows], 0.7)
        loss, _ = ppo_clip_loss(logp, old[rows], adv[rows], p["mask"][rows])
        (loss / ga).backward()
        before.append(float(loss.detach()))
    expected = _grads(model)
    model.zero_grad()
    after = []
    for rows in micros:  # now: each micro-batch to its own longest sequence, chunked log-probs
        mb = micro_batch(r, rows)
        assert mb.input_ids.shape[1] == int(r.lengths[rows].max()) <= p["input_ids"].shape[1]
        logp, _ = response_logprobs(model, mb, temperature=0.7, chunk_tokens=5)
        T = mb.mask.shape[1]
        loss, _ = ppo_clip_loss(logp, old[rows, :T], adv[rows, :T], mb.mask)
        (loss / ga).backward()
        after.append(float(loss.detach()))
    assert after == pytest.approx(before, abs=1e-6)
    got = _grads(model)
    assert got.keys() == expected.keys()
    for name, g in got.items():
        torch.testing.assert_close(g, expected[name], atol=1e-6, rtol=1e-4, msg=name)


def test_a_token_budget_gives_the_mini_batchs_own_loss_and_gradient_however_it_is_cut(tiny_model_dir):
    """With a budget the micro-batches' losses are divided by the mini-batch's token count: summed, they are the
    mini-batch's token-mean, and the gradient is the one of the whole mini-batch in one pass."""
    from transformers import AutoModelForCausalLM

    from prl_core.losses import ppo_clip_loss
    from prl.training.batches import Rollouts, micro_batch

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).train()
    p, _attention, adv = _rollouts(seed=2)
    B = p["mask"].shape[0]
    r = Rollouts(**p, group_ids=torch.zeros(B, dtype=torch.long), rewards=torch.zeros(B), texts=[""] * B,
                 golds=[""] * B, prompt_index=list(range(B)), verdicts=[""] * B)
    old = torch.zeros(p["mask"].shape)
    rows = torch.arange(B)
    whole = micro_batch(r, rows)
    logp, _ = response_logprobs(model, whole, chunk_tokens=7)
    loss_whole, _ = ppo_clip_loss(logp, old[:, : whole.mask.shape[1]], adv[:, : whole.mask.shape[1]], whole.mask)
    loss_whole.backward()
    expected = _grads(model)
    model.zero_grad()
    norm = float(p["mask"].sum())
    parts = split_rows(rows, r.lengths, size=B, budget=int(r.lengths.max()) * 2)
    assert len(parts) > 2
    total = 0.0
    for part in parts:
        mb = micro_batch(r, part)
        T = mb.mask.shape[1]
        logp, _ = response_logprobs(model, mb, chunk_tokens=7)
        loss, _ = ppo_clip_loss(logp, old[part, :T], adv[part, :T], mb.mask, norm=norm)
        loss.backward()
        total += float(loss.detach())
    assert total == pytest.approx(float(loss_whole), abs=1e-6)
    for name, g in _grads(model).items():
        torch.testing.assert_close(g, expected[name], atol=1e-6, rtol=1e-4, msg=name)


def test_needs_reference_follows_the_estimator_the_kl_loss_and_the_metric():
    t = TrainConfig(model="m", ref_kl_metric=False)
    assert not t.needs_reference(AlgorithmConfig(estimator="grpo", n_samples=4))
    assert not t.needs_reference(AlgorithmConfig(estimator="raft", n_samples=4))
    assert t.needs_reference(AlgorithmConfig(estimator="prl", eta=10, step_split="token", n_samples=4))  # ρ reads it
    assert t.needs_reference(AlgorithmConfig(estimator="grpo", n_samples=4, kl_loss_coef=0.1))
    assert TrainConfig(model="m").needs_reference(AlgorithmConfig(estimator="grpo", n_samples=4))  # actor/kl_ref logged


# ─── real training ─────────────────────────────────────────────────────────────────────────────

def _easy_problems(tmp_path) -> str:
    """Level-1 and -2 problems of the synthetic training split, where the warm start has mixed rewards."""
    from prl.data import synthetic

    path = tmp_path / "easy.jsonl"
    if not path.exists():
        rows = [r for r in synthetic.generate("train", 600, seed=0) if r["level"] <= 2][:200]
        path.write_text("".join(json.dumps({"problem": r["problem"], "answer": r["answer"]}) + "\n" for r in rows))
    return str(path)


def _config(model, tmp_path, name, algorithm, **train):
    data = {"algorithm": algorithm,
            "train": {"model": str(model), "out_dir": str(tmp_path / name), "db": str(tmp_path / "store.duckdb"),
                      "train_data": _easy_problems(tmp_path),
                      "steps": 2, "prompts_per_step": 4, "max_tokens": 48, "engine": "hf", "lr": 1e-3,
                      "mini_batch_size": 8, "micro_batch_size": 4, "checkpoint_every": 1, "eval_datasets": [],
                      "segments_per_step": 2, "seed": 0, **train}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _weights(d):
    from safetensors.torch import load_file

    return load_file(str(next(Path(d).glob("*.safetensors"))))


def _metrics(db, run_id):
    rows = Store(db, create=False).rows("train_metrics_for_runs", run_ids=[run_id])
    out: dict[int, dict[str, float]] = {}
    for _run, step, name, value in rows:
        out.setdefault(step, {})[name] = value
    return out


@pytest.fixture(scope="module")
def trained(warm_model, tmp_path_factory):
    """Two steps of each estimator from the same warm start and seed (in-process, hf rollouts)."""
    from prl.training.train import Trainer

    model, _ = warm_model
    tmp = tmp_path_factory.mktemp("train")
    algos = {"grpo": {"estimator": "grpo", "n_samples": 4},
             "dr_grpo": {"estimator": "dr_grpo", "n_samples": 4},
             "prl": {"estimator": "prl", "eta": 5, "step_split": "text:\n\n", "n_samples": 4},
             "prl_inf": {"estimator": "prl", "eta": "inf", "step_split": "fixed:8", "n_samples": 4},
             "raft": {"estimator": "raft", "n_samples": 4}}
    results, trainers = {}, {}
    for name, algo in algos.items():
        cfg = RunConfig.from_yaml(_config(model, tmp, name, algo, steps=2 if name != "prl_inf" else 1,
                                          prompts_per_step=8, mini_batch_size=16))
        if name == "prl_inf":
            grpo_one = RunConfig.from_yaml(_config(model, tmp, "grpo_one", algos["grpo"], steps=1,
                                                   prompts_per_step=8, mini_batch_size=16))
            Trainer(grpo_one, log=lambda _m: None, progress=False).run()
        trainers[name] = Trainer(cfg, log=lambda _m: None, progress=False)
        trainers[name].run()
        results[name] = tmp / name
    results["prl_trainer"] = trainers["prl"]
    return model, tmp, results


def test_a_run_that_reads_no_reference_loads_none_and_logs_no_kl(tiny_model_dir, tmp_path):
    from prl.training.train import Trainer

    cfg = RunConfig.from_yaml(_config(tiny_model_dir, tmp_path, "noref", {"estimator": "grpo", "n_samples": 4},
                                      steps=1, ref_kl_metric=False, checkpoint_every=1, export_checkpoints=False))
    trainer = Trainer(cfg, log=lambda _m: None, progress=False)
    assert trainer.ref is None
    trainer.run()
    m = _metrics(str(tmp_path / "store.duckdb"), "noref")[1]
    assert "actor/kl_ref" not in m and {"reward/mean", "actor/loss", "actor/grad_norm"} <= set(m)
    with Store(tmp_path / "store.duckdb", create=False).read() as con:
        assert con.execute("select count(*), count(kl_to_go) from prl_segments where run_id = 'noref'").fetchone()[1] == 0


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "prl", "raft"])
def test_each_estimator_trains(trained, name):
    model, tmp, results = trained
    db = str(tmp / "store.duckdb")
    metrics = _metrics(db, name)
    assert sorted(metrics) == [1, 2]
    for step, m in metrics.items():
        assert math.isfinite(m["actor/loss"]) and math.isfinite(m["actor/grad_norm"])
        assert 0 <= m["reward/accuracy"] <= 1 and m["response/length"] > 0
        if name != "raft":
            assert METRIC_NAMES_PPO <= set(m)
    before, after = _weights(model), _weights(results[name] / "policy")
    assert any(not torch.equal(before[k], after[k]) for k in before), "parameters did not change"
    store = Store(db, create=False)
    [(run_id, kind, _m, _c, status, config, manifest, _p, step)] = store.rows("get_run", run_id=name)
    assert (kind, status, step) == ("train", "finished", 2)
    manifest = json.loads(manifest)
    assert manifest["seed"] == 0 and manifest["git"]["commit"] and manifest["deepspeed"]["zero_optimization"]
    assert json.loads(config)["algorithm"]["estimator"] == name
    segs = store.rows("segments_for_run", run_id=name)
    assert {s[0] for s in segs} == {1, 2} and {s[1] for s in segs} == {0, 1}
    if name == "prl":  # ρ differs from the outcome advantage where the policy has moved from the reference
        assert any(abs(s[5]) > 0 for s in segs if s[0] == 2)
    assert (results[name] / "checkpoints" / "latest").read_text().strip() == "step_000002"
    rollouts = store.rows("rollouts_for_run_step", run_id=name, step=2)
    assert [r[0] for r in rollouts] == [0, 1]
    for _idx, problem, gold, response, reward, tokens in rollouts:
        tokens = json.loads(tokens)
        assert problem and gold and reward in (0.0, 1.0) and len(tokens) >= 1
        assert "".join(tokens).replace("\ufffd", "") .strip()[:10] == response.strip()[:10]


@pytest.mark.e2e
def test_reference_stays_frozen(trained):
    model, _tmp, results = trained
    trainer = results["prl_trainer"]
    start = _weights(model)
    ref = dict(trainer.ref.named_parameters())
    assert all(not p.requires_grad and p.grad is None for p in ref.values())
    for name, p in ref.items():
        if name in start:
            assert torch.equal(p.detach(), start[name]), name


@pytest.mark.e2e
def test_prl_with_infinite_eta_is_grpo(trained):
    """Same seed, same rollouts: PRL at η = ∞ and GRPO make identical updates."""
    model, tmp, results = trained
    a, b = _weights(results["prl_inf"] / "policy"), _weights(tmp / "grpo_one" / "policy")
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-7)
    ma, mb = _metrics(str(tmp / "store.duckdb"), "prl_inf")[1], _metrics(str(tmp / "store.duckdb"), "grpo_one")[1]
    assert ma["reward/mean"] == mb["reward/mean"] and ma["actor/loss"] == pytest.approx(mb["actor/loss"], abs=1e-7)
    # the comparison means something: some groups had mixed rewards and the update moved the weights
    assert mb["reward/all_equal_group_frac"] < 1 and mb["actor/grad_norm"] > 0
    start = _weights(model)
    assert any(not torch.equal(start[k], b[k]) for k in b)


def _clean_env() -> dict[str, str]:
    """This process's environment without the process-group variables an in-process Trainer set."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                              "MASTER_PORT", "LOCAL_WORLD_SIZE")}
    return {**env, "OMP_NUM_THREADS": "1"}


# ─── crash and resume, several processes ────────────────────────────────────────────────────────

@pytest.mark.e2e
def test_sigkill_mid_run_then_resume(warm_model, tmp_path, prefect_api_env):
    """`prl train` (vLLM rollouts) killed after step 3 of 6 with checkpoints every 2 steps resumes from
    step 2: steps 1-6 each once, step 3 redone, checkpoint loadable, run finished."""
    model, _ = warm_model
    cfg = _config(model, tmp_path, "killed", {"estimator": "prl", "eta": 10, "step_split": "fixed:8", "n_samples": 4},
                  steps=6, checkpoint_every=2, engine="vllm", max_tokens=32)
    db = str(tmp_path / "store.duckdb")
    env = _clean_env()
    cmd = [sys.executable, "-m", "prl_cli", "train", "--config", str(cfg), "--quiet"]
    kill_when(cmd, lambda: len(_metrics(db, "killed")) >= 3, cwd=ROOT, env=env, timeout_s=400, poll_s=0.1)
    steps_before = sorted(_metrics(db, "killed"))
    assert steps_before[:3] == [1, 2, 3]
    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode != 0 and "pass --resume" in again.stderr  # refuses to overwrite silently
    done = subprocess.run(cmd + ["--resume"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = _metrics(db, "killed")
    assert sorted(metrics) == [1, 2, 3, 4, 5, 6]
    assert all(METRIC_NAMES_PPO <= set(m) for m in metrics.values())
    with Store(db, create=False).read() as con:
        assert con.execute("select count(*) = count(distinct (step, name)) from train_metrics "
                           "where run_id = 'killed'").fetchall() == [(True,)]
    assert Store(db, create=False).rows("get_run", run_id="killed")[0][4] == "finished"
    assert json.loads(done.stdout)["resumed_from_step"] == 2
