"""Two training ranks on the CPU under DeepSpeed's launcher (gloo), each with its own vLLM engine in its own
process (issue 26): the code path a GPU run takes, with ZeRO-2 and ZeRO-3 (bf16 where the CPU has bf16).

Each rank's engine is vLLM's external-launcher executor in the rank's process; vLLM's own worker reports
where it runs (its local rank is the device index on GPUs). After every update the new weights reach each
engine from memory through vLLM's weight-transfer API (the engine's log-probs of its samples equal the
trainer's recomputation), the engine sleeps around the update and wakes in the right order, the ranks hold
the same parameters after every update, and the final evaluation — every rank generating a share — stores
the samples a one-process evaluation of the same weights stores.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ranks import ROOT, STEPS, cached_run, cpu_has_bf16

from prl.store.db import Store

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module", params=[(2, "float32"), (3, "bfloat16" if cpu_has_bf16() else "float32")],
                ids=lambda p: f"zero{p[0]}-{p[1]}")
def two_ranks(request, warm_model, tmp_path_factory):
    zero_stage, dtype = request.param
    return cached_run(warm_model, tmp_path_factory, zero_stage, dtype)


def test_two_nodes_of_one_rank_train_what_one_node_of_two_ranks_trains(warm_model, tmp_path_factory):
    """Two torchrun "nodes" of one rank each (RANK != LOCAL_RANK on the second), node-local scratch, the store
    and checkpoints on the shared path: the same config and seed give, by value, every stored training metric,
    every evaluation sample, and the checkpoint's weights of one node of two ranks under DeepSpeed's launcher."""
    one = cached_run(warm_model, tmp_path_factory, 2, "float32")
    two = cached_run(warm_model, tmp_path_factory, 2, "float32", nodes=2)
    assert [e["rank"] for e in two["engines"]] == [0, 1] and [e["local_rank"] for e in two["engines"]] == [0, 0]
    assert two["manifest"]["world_size"] == 2
    assert sorted(two["metrics"]) == sorted(one["metrics"]) == list(range(1, STEPS + 1))
    timing = ("time/", "memory/", "perf/")  # wall-clock and resident-memory readings differ run to run
    for step in one["metrics"]:
        a = {k: v for k, v in one["metrics"][step].items() if not k.startswith(timing)}
        b = {k: v for k, v in two["metrics"][step].items() if not k.startswith(timing)}
        assert a == b and len(a) > 10, step

    def samples(run):
        with run["db"].read() as con:
            return con.execute("select problem_id, sample_idx, response, verdict from samples where run_id = ? "
                               "order by 1, 2", [f"{run['name']}@step{STEPS}"]).fetchall()
    assert samples(one) == samples(two) and len(samples(one)) == 12
    assert [u["after"] for u in one["updates"][0]] == [u["after"] for u in two["updates"][0]]  # every update's weights
    for run in (one, two):  # the checkpoint on the shared path holds both ranks' partitions
        ckpt = sorted((run["out"] / "checkpoints").glob("step_*"))[-1]
        assert len(list(ckpt.glob("*zero_pp_rank_*_optim_states.pt"))) == 2, sorted(p.name for p in ckpt.iterdir())


def test_each_rank_builds_its_own_engine_on_its_own_device_index(two_ranks):
    for k, engine in enumerate(two_ranks["engines"]):
        assert engine["rank"] == k and engine["local_rank"] == k  # the launcher's LOCAL_RANK
        placement = engine["placement"]  # as vLLM's own worker reports it
        assert placement["executor"] == "ExecutorWithExternalLauncher"  # in this process, joined to the ranks' group
        assert placement["rank"] == k and placement["local_rank"] == k  # cuda:<local_rank> on GPUs
        assert placement["device"] == "cpu"  # vLLM's CPU build; its GPU worker takes cuda:<local_rank>
        assert engine["info"]["colocate"] == "True" and engine["info"]["in_process"] == "True"
        # the config's engine limits, as vLLM's own scheduler and model config hold them
        assert (engine["info"]["max_num_seqs"], engine["info"]["max_num_batched_tokens"],
                engine["info"]["max_model_len"]) == ("24", "1024", "256")


def test_weights_reach_every_engine_from_memory_after_every_update(two_ranks):
    m = two_ranks["metrics"]
    assert sorted(m) == list(range(1, STEPS + 1))
    assert two_ranks["manifest"]["weight_sync"] == "memory" and two_ranks["manifest"]["world_size"] == 2
    # step 2 was sampled after the first update (the policy has left the reference: the trainer sees it), and
    # each engine's log-probs of its own samples equal the trainer's recomputation: it held the new weights
    assert m[2]["actor/kl_ref"] != 0.0
    tolerance = 1e-3 if two_ranks["manifest"]["config"]["train"]["dtype"] == "float32" else 0.1
    for step, values in m.items():
        assert values["rollout/logprob_diff_max"] < tolerance, (step, values["rollout/logprob_diff_max"])
    for engine in two_ranks["engines"]:
        loads = [e for e in engine["events"] if e.startswith("load_weight_groups")]
        assert len(loads) == STEPS  # one in-memory sync per update, none from disk
        assert not any(e.startswith("update_weights(disk)") for e in engine["events"])
    assert not (two_ranks["out"] / "policy.tmp").exists()


def test_the_engine_sleeps_around_the_update_and_wakes_in_order(two_ranks):
    step = ["generate -> asleep: -", "sleep(2) -> asleep: kv_cache,weights", "wake_up(weights) -> asleep: kv_cache",
            "load_weight_groups -> asleep: kv_cache", "wake_up(kv_cache) -> asleep: -"]
    for engine in two_ranks["engines"]:
        # what vLLM's executor reports asleep after each call, read back; then the final evaluation's generation
        # and the held-out diagnostics' (train.heldout_problems), with the weights of the last update
        assert engine["events"] == step * STEPS + ["generate -> asleep: -"] * 2


def test_the_ranks_train_on_their_own_rollouts_and_stay_identical(two_ranks):
    ranks = two_ranks["updates"]
    assert [[(u["step"], u["rank"], u["world"]) for u in rk] for rk in ranks] == [
        [(s, k, 2) for s in range(1, STEPS + 1)] for k in (0, 1)]
    for u0, u1 in zip(*ranks):
        assert u0["rollouts"] != u1["rollouts"], "the ranks trained on the same rollouts: the check proves nothing"
        assert [n for n in u0["after"] if u0["after"][n] != u0["before"][n]], "the update moved nothing"
        assert u0["before"] == u1["before"] and u0["after"] == u1["after"]  # gradients all-reduced


def test_the_checkpoint_export_holds_the_ranks_final_weights(two_ranks):
    """The export at the last step is written from DeepSpeed's module-by-module gather under ZeRO-3
    (prl.training.weight_sync.policy_state_dict), from the whole module at ZeRO-2: every tensor in it equals,
    bit for bit in float32, what both ranks held after the last update."""
    from safetensors.torch import load_file

    sys.path.insert(0, str(ROOT / "tests"))
    from ws2_probe import param_digests

    export = two_ranks["out"] / "exports" / f"step_{STEPS:06d}"
    weights = {}
    for f in sorted(export.glob("*.safetensors")):
        weights.update(load_file(str(f)))
    final = two_ranks["updates"][0][-1]["after"]
    assert two_ranks["updates"][1][-1]["after"] == final
    written = param_digests(weights.items())
    assert written and set(written) <= set(final)  # a tied LM head is written once, as the embedding
    assert {n: final[n] for n in written} == written
    assert len(written) >= len(final) - 1


def test_the_evaluation_shared_by_the_ranks_stores_what_one_process_stores(two_ranks, tmp_path):
    """Both ranks generated a share of the final evaluation and rank 0 stored it; a one-process evaluation of
    the same exported weights with the same settings stores the same samples."""
    from prl.evaluation.config import EvalConfig
    from prl.evaluation.evaluate import run_evaluation

    run_id = f"{two_ranks['name']}@step{STEPS}"
    [run] = two_ranks["db"].rows("get_run", run_id=run_id)
    manifest = json.loads(run[6])
    with two_ranks["db"].read() as con:
        shared = con.execute("select problem_id, sample_idx, response, verdict from samples where run_id = ? "
                             "order by 1, 2", [run_id]).fetchall()
    assert len(shared) == 6 * 2
    export = Path(manifest["config"]["model"])
    train = two_ranks["manifest"]["config"]["train"]
    cfg = EvalConfig(model=str(export), datasets=("synth_test",), n=2, limit=6, db=str(tmp_path / "one.duckdb"),
                     run_id="one-process", engine="vllm", max_tokens=train["max_tokens"], temperature=1.0,
                     seed=train["seed"], dtype=train["dtype"], verifier_workers=1)
    run_evaluation(cfg, progress=False, log=lambda _m: None)
    with Store(tmp_path / "one.duckdb", create=False).read() as con:
        alone = con.execute("select problem_id, sample_idx, response, verdict from samples order by 1, 2").fetchall()
    assert alone == shared
    shards = list((Path(train["db"]).parent / "shards" / run_id).glob("*.parquet"))
    assert len(shards) == 2  # one share per rank
