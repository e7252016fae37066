"""Load: several dashboard clients run every page's queries while an evaluation writes to the store.

Each client is a process looping over the data calls the dashboard's pages make (``dashboard.data``
and the SQL box's ``run_query``, recorded by rendering every page once on the same store:
:func:`page_calls`), timing each call and counting errors; it also reads the
writer's sample count on every round, so fresh rows must become visible while it runs. The
writer is a real ``prl eval`` of the embedded tiny model (vLLM) into the same store file.
Baselines in the same run: the same clients with no writer (query latency), and the same
evaluation with no clients (the writer's wall time).

    python bench/load.py [--clients 8] [--rows 200000] [--seconds 30]

Writes bench/results/load.json and re-renders the figures (bench/render.py). tests/test_load.py runs a short version.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The repository root first: bench/dashboard.py must not shadow the `dashboard` package.
sys.path[:] = [str(HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != HERE] + [str(HERE)]

CODE = ("bench/load.py", "bench/dashboard_pages.py", "bench/store.py", "dashboard", "prl/store", "sql/schema.sql",
        "sql/queries.sql", "prl/evaluation", "prl/studies/report.py", "prl/generation", "prl/grading", "prl/data",
        "prl/models/tiny.py", "prl/models/build.py", "prl_core/metrics.py", "prl_cli/eval_.py", "flows/evaluate.py")
"""The code this benchmark measures: its results file records these paths (bench/common.py's write_json),
and ``python bench/render.py --check`` fails once one of them changes after the recorded commit."""

WRITER_RUN = "load-writer"


def page_calls(db: str) -> list[tuple[str, str, tuple, dict]]:
    """(label, ``dashboard.data`` function or "sql", args, kwargs) of every distinct data call and SQL-box query the
    dashboard's pages make on the store ``db``: recorded by rendering each page once (bench/dashboard_pages.py), so
    the list is the pages' own, whatever they become."""
    import dashboard_pages as dp

    main = sys.modules["__main__"]
    try:
        rec = dp.trace_pages(db)
    finally:
        # Streamlit runs each page as the module ``__main__`` and leaves the last one there; the clients are
        # started with spawn, which pickles :func:`client` by its name in this script's ``__main__``
        sys.modules["__main__"] = main
    calls: dict[tuple, tuple[str, str, tuple, dict]] = {}
    for c in rec.calls:
        if c.kind == "data":
            calls.setdefault((c.name, repr(c.args), repr(c.params)), (c.name, c.name, c.args, c.params))
        elif c.kind == "sql":
            calls.setdefault(("sql", c.name), ("sql_box", "sql", (c.name,), {}))
    return list(calls.values())


def _callable(db: str, fn: str, args: tuple, kwargs: dict):
    from dashboard import data
    from prl.store.readonly import run_query

    if fn == "sql":
        return lambda: run_query(db, *args)
    return lambda: getattr(data, fn)(*args, **kwargs)


def client(db: str, calls: list[tuple[str, str, tuple, dict]], seconds: float, stop, out) -> None:
    """One dashboard user: every page's data calls in a loop for at least ``seconds`` and until ``stop`` is set,
    then one last round (so the writer's final rows are seen)."""
    from prl.store.readonly import run_query

    calls = [(label, _callable(db, fn, args, kwargs)) for label, fn, args, kwargs in calls]
    lat: dict[str, list[float]] = {name: [] for name, _ in calls}
    errors: list[str] = []
    seen: list[int] = []
    t_end = time.monotonic() + seconds
    last = False
    while True:
        last = stop.is_set() and time.monotonic() >= t_end
        for name, call in calls:
            t = time.perf_counter()
            try:
                call()
            except Exception as e:  # noqa: BLE001 - counted and reported
                errors.append(f"{name}: {type(e).__name__}: {str(e)[:200]}")
            lat[name].append((time.perf_counter() - t) * 1e3)
        try:
            seen.append(run_query(db, f"select count(*) from samples where run_id = '{WRITER_RUN}'")[1][0][0])
        except Exception as e:  # noqa: BLE001
            errors.append(f"count: {type(e).__name__}: {e}")
        if last:
            break
    out.put({"latency_ms": lat, "errors": errors, "seen": seen})


def run_clients(db: str, calls: list, clients: int, seconds: float, during=None) -> dict:
    """Start ``clients`` processes, each looping over ``calls`` (:func:`page_calls`); ``during()`` runs meanwhile and
    may return a process (the writer): the clients go on until it has exited (and for at least ``seconds``)."""
    ctx = mp.get_context("spawn")
    q, stop = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=client, args=(db, calls, seconds, stop, q)) for _ in range(clients)]
    for p in procs:
        p.start()
    t_during = time.monotonic()
    writer = during() if during else None
    if writer is not None:
        writer.wait()
    during_s = time.monotonic() - t_during  # the writer's wall time (the clients then finish their round)
    stop.set()
    results = [q.get(timeout=seconds + 900) for _ in procs]
    for p in procs:
        p.join()
    all_ms = [x for r in results for v in r["latency_ms"].values() for x in v]
    per_query = {}
    for name in results[0]["latency_ms"]:
        xs = sorted(x for r in results for x in r["latency_ms"][name])
        per_query[name] = {"calls": len(xs), "p50_ms": _pct(xs, 50), "p95_ms": _pct(xs, 95)}
    seen = [r["seen"] for r in results]
    return {"clients": clients, "seconds": seconds, "calls": len(all_ms), "errors": [e for r in results for e in r["errors"]],
            "p50_ms": _pct(sorted(all_ms), 50), "p95_ms": _pct(sorted(all_ms), 95), "per_query": per_query,
            "seen_first": min(s[0] for s in seen if s), "seen_last": max(s[-1] for s in seen if s),
            "monotonic": all(all(a <= b for a, b in zip(s, s[1:])) for s in seen), "during_s": round(during_s, 1)}


WAIT_ROWS = 16  # rows per write transaction in write_waits
HOT_ROWS = 64  # rows per transaction of reader_waits' back-to-back writer


def write_waits(db: str, calls: list, clients: int, rounds: int = 12) -> dict:
    """Seconds per small write transaction (WAIT_ROWS rows) under ``clients`` readers, the writer's turnstile on and off
    alternately (the same load for both): how long a waiting writer is kept out."""
    import prl.store.db as store_mod

    waits: dict[str, list[float]] = {"writers_first": [], "no_priority": []}

    def during():
        stores = {m: store_mod.Store(db, create=False, lock_timeout_s=600, turnstile=m == "writers_first")
                  for m in waits}
        time.sleep(10)  # every client in its loop
        for k in range(2 * rounds):
            mode = "writers_first" if k % 2 == 0 else "no_priority"
            rows = [dict(run_id="load-wait", dataset="d", problem_id=f"d/{k}", sample_idx=i, response="x",
                         extracted_answer="1", verdict="correct", score=1.0, n_tokens=5, finish_reason="stop",
                         verify_ms=1.0) for i in range(WAIT_ROWS)]
            t = time.perf_counter()
            stores[mode].insert_samples(rows)
            waits[mode].append(time.perf_counter() - t)
            time.sleep(2)

    run_clients(db, calls, clients, 1.0, during=during)
    return {**{m: {"median_s": round(statistics.median(w), 3), "max_s": round(max(w), 3), "n": len(w)}
               for m, w in waits.items()}, "rows_per_write": WAIT_ROWS}


HOT_WRITER = r"""
import sys
import prl.store.db as store
s = store.Store(sys.argv[1], create=False, turnstile=sys.argv[3] == "on")
print("ready", flush=True)
for chunk in range(int(sys.argv[2])):
    s.insert_samples([dict(run_id="w", dataset="d", problem_id=f"d/{chunk}", sample_idx=i, response="x" * 200,
                           extracted_answer="1", verdict="correct", score=1.0, n_tokens=5, finish_reason="stop",
                           verify_ms=1.0) for i in range(int(sys.argv[4]))])
"""


def reader_waits(chunks: int = 150, rounds: int = 3) -> dict:
    """The mirror of :func:`write_waits`: one reader querying in a loop while a writer commits
    ``chunks`` transactions back to back, the turnstile on and off alternately (both sides).
    Per mode: read latency p50/p95/max, reads completed, and the writer's wall time."""
    import prl.store.db as store_mod

    out: dict[str, dict] = {}
    lat: dict[str, list[float]] = {"turnstile": [], "no_turnstile": []}
    wall: dict[str, list[float]] = {"turnstile": [], "no_turnstile": []}
    for k in range(2 * rounds):
        mode = "turnstile" if k % 2 == 0 else "no_turnstile"
        path = Path(tempfile.mkdtemp(prefix="prl-hot-")) / "hot.duckdb"
        reader = store_mod.Store(path, lock_timeout_s=600, turnstile=mode == "turnstile")
        w = subprocess.Popen([sys.executable, "-c", HOT_WRITER, str(path), str(chunks),
                              "on" if mode == "turnstile" else "off", str(HOT_ROWS)], cwd=HERE.parent, stdout=subprocess.PIPE, text=True)
        assert w.stdout.readline().strip() == "ready"
        t0 = time.perf_counter()
        while w.poll() is None:
            t = time.perf_counter()
            reader.rows("count_samples")
            lat[mode].append(time.perf_counter() - t)
        wall[mode].append(time.perf_counter() - t0)
        if w.wait() != 0 or reader.rows("count_samples") != [(chunks * HOT_ROWS,)]:
            raise SystemExit(f"the hot writer failed ({mode}): exit {w.returncode}")
    for mode, xs in lat.items():
        xs = sorted(xs)
        out[mode] = {"reads": len(xs), "p50_ms": _pct([x * 1e3 for x in xs], 50), "p95_ms": _pct([x * 1e3 for x in xs], 95),
                     "max_ms": round(xs[-1] * 1e3, 1), "writer_s": round(statistics.median(wall[mode]), 2)}
    out["chunks"], out["rounds"], out["rows_per_chunk"] = chunks, rounds, HOT_ROWS
    return out


def _pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    return round(xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))], 1)


def start_writer(db: str, model: str, problems: int, env: dict[str, str] | None = None,
                 run_id: str = WRITER_RUN) -> subprocess.Popen:
    """A real evaluation writing samples into ``db`` (chunks of 4 problems, one transaction each)."""
    cmd = [sys.executable, "-m", "prl_cli", "eval", "--model", model, "--dataset", f"synth_test:{problems}",
           "--n", "4", "--max-tokens", "48", "--chunk", "4", "--db", db, "--run", run_id,
           "--verifier-workers", "1", "--quiet"]
    log = tempfile.TemporaryFile("w+")  # not a pipe: nobody reads it while the clients run
    proc = subprocess.Popen(cmd, cwd=HERE.parent, env=env or os.environ.copy(), stdout=subprocess.PIPE,
                            stderr=log, text=True)
    proc.log = log  # type: ignore[attr-defined]
    return proc


def writer_log(proc: subprocess.Popen) -> str:
    proc.log.seek(0)  # type: ignore[attr-defined]
    return proc.log.read()  # type: ignore[attr-defined]


def main() -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--rows", type=int, default=200_000, help="sample rows in the store before the writer starts")
    ap.add_argument("--seconds", type=float, default=40.0, help="how long each client runs")
    ap.add_argument("--problems", type=int, default=20, help="problems the writer evaluates (n=4; default 20: under 8 clients the writer gets a small share of the 2 cores)")
    args = ap.parse_args()
    from common import machine_info, render_all, write_json
    from store import build_store

    from prl.models.tiny import build_tiny

    work = Path(tempfile.mkdtemp(prefix="prl-load-"))
    db = str(work / "store.duckdb")
    rows = build_store(Path(db), args.rows)
    model = str(build_tiny(work / "tiny", seed=0))
    calls = page_calls(db)
    print(f"store with {rows:,} samples; {args.clients} clients × {args.seconds:.0f} s, each looping over "
          f"{len(calls)} data calls of the dashboard's pages", file=sys.stderr)
    t0 = time.monotonic()
    alone = start_writer(db, model, args.problems, run_id=WRITER_RUN + "-alone")
    out, _ = alone.communicate()
    if alone.returncode != 0:
        raise SystemExit(f"the writer (prl eval) failed alone with exit {alone.returncode}:\n{writer_log(alone)[-3000:]}")
    writer_alone = {"samples_added": json.loads(out).get("samples_added"), "seconds": round(time.monotonic() - t0, 1)}
    print(f"writer alone: {writer_alone['samples_added']} samples in {writer_alone['seconds']:.0f} s", file=sys.stderr)
    quiet = run_clients(db, calls, args.clients, args.seconds)
    holder = {}

    def during():
        holder["proc"] = start_writer(db, model, args.problems)
        return holder["proc"]

    loaded = run_clients(db, calls, args.clients, args.seconds, during=during)
    proc = holder["proc"]
    out, _ = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"the writer (prl eval) failed with exit {proc.returncode}:\n{writer_log(proc)[-3000:]}")
    summary = json.loads(out)
    loaded["writer"] = {"returncode": proc.returncode, "samples_added": summary.get("samples_added"),
                        "seconds": loaded.pop("during_s")}
    waits = write_waits(db, calls, args.clients)
    hot = reader_waits()
    import dashboard_pages as dp

    result = {"machine": machine_info(), "rows": rows, "distinct_calls": len(calls),
              "dashboard_pages": [p.title for p in dp.pages()], "quiet": quiet, "with_writer": loaded, "writer_alone": writer_alone,
              "write_waits": waits, "reader_waits": hot,
              "writer_slowdown": round(loaded["writer"]["seconds"] / writer_alone["seconds"], 2),
              "p95_ratio_to_quiet": round(loaded["p95_ms"] / quiet["p95_ms"], 2),
              "p50_ratio_to_quiet": round(loaded["p50_ms"] / quiet["p50_ms"], 2)}
    write_json("load", result, code=CODE)
    print(f"{loaded['clients']} clients while prl eval wrote: {len(loaded['errors'])} errors, p50 {loaded['p50_ms']:.0f} ms, "
          f"p95 {loaded['p95_ms']:.0f} ms; re-rendered " + ", ".join(p.name for p in render_all()))
    return result


if __name__ == "__main__":
    main()
