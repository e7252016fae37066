"""Losing one node mid-run (issue 36), on this host: two torchrun "nodes" of one rank each (RANK != LOCAL_RANK on
the second), each with its own node-local scratch, the store and the checkpoints on the shared path.

Node 1 is killed whole — ``kill -9`` of its process group: its torchrun, its rank and the rank's vLLM engine — as
step 2 starts, after step 1's checkpoint and rows are stored. The surviving rank fails at its next collective and
its node exits. ``--resume`` on both nodes then finishes the run from the checkpoint on the shared path. The store
equals the uninterrupted one-node run's (tests/ranks.py, the same config and seed), key by key and value by value:
nothing lost, extra or duplicated. The last checkpoint's module is bit-identical, and so are the policy and
every export.
"""

from __future__ import annotations

import signal
import time

import pytest
import torch

from chain import MEASURED_METRICS, compare_rows, file_digest, store_rows, tensors_equal
from ranks import STEPS, cached_run, start_torchrun_nodes, wait_nodes, write_config

from prl.store.db import Store

pytestmark = pytest.mark.e2e
KILLED_AT = 2
"""The step whose start kills node 1: step 1 is checkpointed and stored; the rest is redone after the resume."""


def files(out) -> dict:
    ckpt = out / "checkpoints"
    latest = (ckpt / "latest").read_text().strip()
    return {"latest": latest, "tags": sorted(p.name for p in ckpt.glob("step_*")),
            "module": torch.load(ckpt / latest / "mp_rank_00_model_states.pt", map_location="cpu",
                                 weights_only=False)["module"],
            "policy": file_digest(out / "policy" / "model.safetensors"),
            "exports": {p.name: file_digest(p / "model.safetensors") for p in sorted((out / "exports").glob("step_*"))}}


@pytest.mark.timeout(1500)
def test_a_node_killed_mid_run_resumes_on_both_nodes_with_nothing_lost(warm_model, tmp_path_factory):
    ref = cached_run(warm_model, tmp_path_factory, 2, "float32")  # one node of two ranks, uninterrupted
    assert ref["name"] == "z2" and sorted(ref["metrics"]) == list(range(1, STEPS + 1))
    model, _ = warm_model
    d = tmp_path_factory.mktemp("killed-node")
    config = write_config(model, d, "z2", zero_stage=2, dtype="float32")
    db, out = d / "store.duckdb", d / "z2"

    t0 = time.monotonic()
    procs = start_torchrun_nodes(config, d, port=29543,
                                 node_env={1: {"PRL_FAULT_POINT": f"train/step_start@z2/{KILLED_AT}"}})
    (rc0, tail0), (rc1, tail1) = wait_nodes(procs, timeout=600)
    lost_after = time.monotonic() - t0
    # the fault point SIGKILLs node 1's rank with its engine; its torchrun then ends and is killed with its group
    assert rc1 != 0 and f"train/step_start@z2/{KILLED_AT}: SIGKILL" in tail1, f"node 1 was not killed (rc {rc1}):\n{tail1}"
    assert rc0 not in (0, -signal.SIGKILL), f"node 0 went on without node 1 (rc {rc0}):\n{tail0}"

    # what the kill left on the shared path: step 1 whole (its rows and its checkpoint), nothing of step 2
    store = Store(db, create=False)
    stored = {step for _run, step, _m, _v in store.rows("train_metrics_for_runs", run_ids=["z2"])}
    assert stored == set(range(1, KILLED_AT)), stored
    assert (out / "checkpoints" / "latest").read_text().strip() == f"step_{KILLED_AT - 1:06d}"
    assert store.records("get_run", run_id="z2")[0]["status"] != "finished"
    del store

    for rc, tail in wait_nodes(start_torchrun_nodes(config, d, port=29544, resume=True), timeout=600):
        assert rc == 0, tail
    want_rows = store_rows(ref["db_path"])
    measured = compare_rows(db, want_rows)
    assert measured["rows_lost"] == measured["rows_extra"] == measured["duplicates"] == 0, measured
    assert measured["values_differ"] == 0, measured["differences"]
    # every row compared by value but the measured metrics' (time/, memory/): rollouts, segments, metrics, samples
    by_value = sum(len(v) for t, rows in want_rows.items() for k, v in rows.items()
                   if not (t == "train_metrics" and str(k[2]).startswith(MEASURED_METRICS)))
    assert measured["rows_compared"] == by_value and want_rows["samples"] and want_rows["prl_segments"], measured
    assert Store(db, create=False).records("get_run", run_id="z2")[0]["status"] == "finished"

    got, want = files(out), files(ref["out"])
    assert got["latest"] == want["latest"] == f"step_{STEPS:06d}" and got["tags"] == want["tags"]
    assert tensors_equal(got["module"], want["module"]) == []
    assert got["policy"] == want["policy"] and got["exports"] == want["exports"] and got["exports"]
    print(f"\n[faults] kill one node: node 0 exited rc {rc0} {lost_after:.0f} s after the start; "
          f"resumed on both: {measured['rows_compared']} rows equal, 0 lost, 0 extra, 0 duplicated")
