"""Load and concurrency: 8 dashboard clients run every page's queries while a real `prl eval` writes
to the same store — no lock errors, fresh rows visible, p50/p95 reported (bench/load.py has the
longer version with a no-writer baseline)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from prl.store.db import Store

ROOT = Path(__file__).resolve().parents[1]


def _bench(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.e2e
@pytest.mark.skipif("PRL_LOAD_TEST" not in os.environ,
                    reason="load test (~3 min): run by bench/run_all.py (PRL_LOAD_TEST=1, then bench/load.py's longer "
                           "version); in CI, concurrent readers and a writer are tests/test_store.py's and the "
                           "dashboard's while-a-flow-writes test")
def test_eight_clients_while_an_evaluation_writes(tmp_path, tiny_model_dir, prefect_harness):
    from prefect.settings import PREFECT_API_URL

    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    import load  # importable by name: the client processes are spawned and import it again
    db = tmp_path / "store.duckdb"
    rows = _bench("dashboard").build_store(db, 30_000)
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "OMP_NUM_THREADS": "1"}
    holder = {}

    def during():
        holder["proc"] = load.start_writer(str(db), str(tiny_model_dir), problems=12, env=env)  # 3 chunks: rows arrive in steps
        return holder["proc"]

    calls = load.page_calls(str(db))  # every page's data calls, recorded by rendering each page
    assert {fn for _, fn, _, _ in calls} >= {"runs", "scores", "compare", "problem", "verdict_counts", "agreement",
                                             "train_metrics", "rollouts", "study", "sql"}
    result = load.run_clients(str(db), calls, clients=8, seconds=5, during=during)
    proc = holder["proc"]
    out, _ = proc.communicate()
    assert proc.returncode == 0, load.writer_log(proc)[-3000:]
    added = json.loads(out)["samples_added"]
    assert added == 48  # 12 problems × 4 samples
    assert result["errors"] == []  # no lock errors, no failed query, in any client
    assert result["calls"] >= 8 * len(calls)  # every client ran every page's calls at least once
    assert result["monotonic"] and result["seen_last"] == added  # fresh rows became visible, all of them
    assert Store(db, create=False).rows("count_samples")[0][0] == rows + added
    out_dir = ROOT / "artifacts" / "load"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "test_load.json").write_text(json.dumps({k: v for k, v in result.items() if k != "writer"}, indent=2))
    print(f"\n[load] 8 clients, {result['calls']} calls while prl eval wrote {added} samples: "
          f"p50 {result['p50_ms']:.0f} ms, p95 {result['p95_ms']:.0f} ms, 0 errors")
