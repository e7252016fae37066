"""Studies: the config's checks, the report's figures against a hand computation on given rows, and a
small study end to end through the CLI (trained, evaluated, killed with SIGKILL, rerun to finish only
what was missing)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from prl_core.config import ConfigError
from prl_core.metrics import seed_ci

from prl.store.db import Store
from prl.studies.config import config_differences, load_study
from prl.studies.report import render_html, render_markdown, study_report

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from dashboard_seed import add_study  # noqa: E402
from tests.study_configs import small_study  # noqa: E402

BASE = {"algorithm": {"n_samples": 2}, "train": {"model": "m", "steps": 2, "prompts_per_step": 2,
                                                  "mini_batch_size": 4, "micro_batch_size": 4}}


def _write(tmp_path, cells, study=None, base=None) -> Path:
    doc = {"study": {"id": "s", "seeds": [0, 1], **(study or {})}, "base": base or BASE, "cells": cells}
    p = tmp_path / "study.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


GRPO = {"name": "grpo", "algorithm": {"estimator": "grpo"}}
PRL = {"name": "prl", "algorithm": {"estimator": "prl", "eta": 10}}


def test_grid_expands_into_named_cells_that_differ_only_where_it_says(tmp_path):
    st = load_study(_write(tmp_path, [GRPO, {"name": "prl", "algorithm": {"estimator": "prl", "step_split": "token"},
                                             "grid": {"algorithm.eta": [5, 20]}}]))
    assert [c.name for c in st.cells] == ["grpo", "prl-eta5", "prl-eta20"]
    assert st.baseline == "grpo"
    assert [c.run.algorithm.eta for c in st.cells[1:]] == [5.0, 20.0]
    assert [(c.name, s) for c, s in st.jobs()][:3] == [("grpo", 0), ("prl-eta5", 0), ("prl-eta20", 0)]
    planned = {c.name: st.cell_config(c, 0, "m").to_dict() for c in st.cells}
    # exactly what the file sets, plus what PRL trains with by default: the paper's advantage_first order and
    # its reverse-KL divergence (README); GRPO reads neither
    cells = ("grpo", "prl-eta5", "prl-eta20")
    assert config_differences(planned) == {
        "algorithm.estimator": dict(zip(cells, ("grpo", "prl", "prl"))),
        "algorithm.eta": dict(zip(cells, (None, 5.0, 20.0))),
        "algorithm.step_split": dict(zip(cells, (None, "token", "token"))),
        "algorithm.order": dict(zip(cells, (None, "advantage_first", "advantage_first"))),
        "algorithm.divergence": dict(zip(cells, (None, "reverse_kl", "reverse_kl")))}
    rc = st.cell_config(st.cells[1], 1, "/models/warm")
    assert (rc.train.run_id, rc.train.seed, rc.train.model) == ("s.prl-eta5.s1", 1, "/models/warm")
    assert rc.train.out_dir.endswith(str(Path("cells") / "prl-eta5" / "s1"))


@pytest.mark.parametrize("cells, study, needle", [
    ([{"name": "grpo", "algorithm": {"estimator": "grpo", "eta": 5}}, PRL], None,
     "algorithm.eta: only used by the prl, frpo, grpo_fused_kl estimators, but this cell trains grpo"),
    ([GRPO, {"name": "grpo-split", "algorithm": {"estimator": "grpo"}, "grid": {"algorithm.step_split": ["token"]}}],
     None, "estimators, but this cell trains grpo"),
    ([], None, "the study has no cells"),
    ([GRPO, {"name": "prl", "algorithm": {"estimator": "prl"}, "grid": {"algorithm.eta": []}}], None,
     "a grid with an empty list has no cells"),
    ([GRPO, {"name": "prl", "algorithm": {"estimator": "prl"}, "grid": {}}], None, "a grid expands into no cells"),
    ([GRPO, PRL], {"seeds": [0, 1, 0]}, "seed(s) [0] appear more than once"),
    ([GRPO, PRL], {"seeds": []}, "give a list of one or more integer seeds"),
    ([GRPO, {"name": "grpo2", "algorithm": {"estimator": "grpo"}}], None, "trains exactly what cell 'grpo' trains"),
    ([GRPO, PRL], {"baseline": "dr_grpo"}, "'dr_grpo' is not a cell"),
    ([PRL, {"name": "prl2", "algorithm": {"estimator": "prl", "eta": 20}}], None, "no cell trains grpo"),
    ([GRPO, {"name": "prl", "algorithm": {"estimator": "prl", "eta": 10}, "train": {"seed": 3}}], None,
     "set by the study for every cell"),
    ([GRPO, {"name": "prl", "algorithm": {"estimator": "prl"}, "grid": {"train.seed": [1, 2]}}], None,
     "seeds are the study's replication"),
    ([GRPO, {"name": "prl", "algorithm": {"estimator": "prl", "eta": 10}, "train": {"mini_batch_size": 3}}], None,
     "cell 'prl': train.mini_batch_size"),
])
def test_contradictory_study_is_refused_before_anything_runs(tmp_path, cells, study, needle):
    with pytest.raises(ConfigError) as e:
        load_study(_write(tmp_path, cells, study))
    assert needle in str(e.value), str(e.value)
    assert str(tmp_path / "study.yaml") in str(e.value)
    assert not (tmp_path / "runs").exists()


def test_report_figures_equal_a_hand_computation_on_given_rows(tmp_path):
    store = Store(add_study(tmp_path / "s.duckdb"))
    rep = study_report(store, "st")
    by = {(r["cell"], r["metric"]): r for r in rep["per_cell"]}
    # average@2 per seed: grpo (0+.5+1)/3 = .5, (.5+.5+1)/3 = .6667; t_{0.975,1} = 12.7062 (tables)
    g = by[("grpo", "average@2")]
    assert g["per_seed"] == pytest.approx({"0": 0.5, "1": 2 / 3})
    mean, sd = (0.5 + 2 / 3) / 2, math.sqrt(((0.5 - 7 / 12) ** 2 + (2 / 3 - 7 / 12) ** 2) / 1)
    assert g["mean"] == pytest.approx(mean)
    assert g["seed_hi"] - g["mean"] == pytest.approx(12.7062047 * sd / math.sqrt(2), rel=1e-6)
    # pass@1 = average@n; pass@2 with n = 2: problem solved by either sample: grpo s0 = (0+1+1)/3
    assert by[("grpo", "pass@1")]["mean"] == pytest.approx(g["mean"])
    assert by[("grpo", "pass@2")]["per_seed"] == pytest.approx({"0": 2 / 3, "1": 1.0})
    # paired: prl − grpo per seed: s0 (.5+1+1)/3 − .5 = .3333, s1 (1+.5+1)/3 − .6667 = .1667
    p = rep["paired"][0]
    d = [2.5 / 3 - 0.5, 2.5 / 3 - 2 / 3]
    assert p["per_seed"] == pytest.approx({"0": d[0], "1": d[1]})
    half = 12.7062047 * math.sqrt((d[0] - sum(d) / 2) ** 2 + (d[1] - sum(d) / 2) ** 2) / math.sqrt(2)
    assert (p["lo"], p["hi"]) == pytest.approx((sum(d) / 2 - half, sum(d) / 2 + half), rel=1e-6)
    assert p["includes_zero"] and "includes 0" in p["note"]
    # the stored configs differ in estimator and eta (declared); nothing else
    assert rep["config_differences"] == {"algorithm.estimator": {"grpo": "grpo", "prl": "prl"},
                                         "algorithm.eta": {"grpo": None, "prl": 10.0}}
    assert rep["undeclared_differences"] == []
    assert len(rep["curves"]) == 8
    md = render_markdown(rep)
    assert "| prl | 2 |" in md and "Every difference is one the study declares" in md


def test_report_flags_a_difference_the_study_does_not_declare(tmp_path):
    store = Store(add_study(tmp_path / "s.duckdb"))
    cfg = {"algorithm": {"estimator": "prl", "eta": 10.0}, "train": {"lr": 3e-5, "seed": 1}}  # lr changed by hand
    store.execute("upsert_run", run_id="st.prl.s0", kind="train", model="m", status="finished", config=cfg,
                  manifest={}, parent_run_id=None, train_step=None)
    rep = study_report(store, "st")
    assert rep["undeclared_differences"] == ["train.lr"]
    assert "WARNING: train.lr differ between cells" in render_markdown(rep)


def test_report_html_escapes_config_values(tmp_path):
    store = Store(add_study(tmp_path / "s.duckdb"))
    cfg = {"algorithm": {"estimator": "prl", "eta": 10.0}, "train": {"lr": 1e-5, "train_data": "<script>x</script>"}}
    store.execute("upsert_run", run_id="st.prl.s0", kind="train", model="m", status="finished", config=cfg,
                  manifest={}, parent_run_id=None, train_step=None)
    page = render_html(study_report(store, "st"), [])
    assert "<script>x</script>" not in page and "&lt;script&gt;" in page
    assert "<script" not in page  # without charts, no script at all


def assert_only_plotly_scripts(page: str, titles: list[str]) -> None:
    """The report page's scripts are Plotly's and nothing else: its config line, its library inlined once,
    and one newPlot per chart (``titles``, in order); no other script, whatever the stored values hold."""
    import re

    scripts = re.findall(r"<script[^>]*>(.*?)</script>", page, re.S)
    assert page.count("<script") == len(scripts) == 2 + len(titles), [x[:60] for x in scripts]
    assert scripts[0].strip().startswith("window.PlotlyConfig")
    assert scripts[1].startswith("/**\n* plotly.js v") and len(re.findall(r"\* plotly\.js v\d", page)) == 1
    for script, title in zip(scripts[2:], titles):
        assert "Plotly.newPlot(" in script and json.dumps(title)[1:-1] in script, title


def test_report_html_holds_plotly_once_and_one_chart_per_figure(tmp_path):
    """The seeded study has one η (10), so its report has two charts: pass@k and reward against KL."""
    from prl.studies.charts import report_figures

    rep = study_report(Store(add_study(tmp_path / "s.duckdb")), "st")
    assert rep["eta_sweep"] == []
    assert_only_plotly_scripts(render_html(rep, report_figures(rep)), [
        "pass@k per cell (95% CI across seeds)", "Reward against KL to the reference over training (mean over seeds)"])


def _cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                             "MASTER_PORT", "LOCAL_WORLD_SIZE")}
    return {**env, "OMP_NUM_THREADS": "1"}


@pytest.mark.e2e
def test_small_study_end_to_end_killed_and_finished_by_a_rerun(tmp_path, warm_model, prefect_api_env):
    """2 cells × 2 seeds: SIGKILL while the second job trains; the rerun skips the finished job, resumes the
    killed one from its checkpoint, runs the rest, and the report's figures come from the stored rows."""
    config = small_study(tmp_path, warm_model[0])
    cmd = [sys.executable, "-m", "prl_cli", "study", "--config", str(config)]
    log = tmp_path / "first.log"
    with log.open("w") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=_cli_env(), stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and proc.poll() is None:
            if str(Path("cells") / "prl" / "s0" / "exports" / "step_000001") in log.read_text(errors="replace"):
                break  # the second job has checkpointed its first step
            time.sleep(0.2)
        assert proc.poll() is None, f"the study ended before it could be killed:\n{log.read_text()[-3000:]}"
        os.killpg(proc.pid, signal.SIGKILL)  # the study, its trainer and everything they started
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    store = Store(tmp_path / "study" / "store.duckdb", create=False)
    status = {(j["cell"], j["seed"]): j["status"] for j in store.records("study_cells_for_study", study_id="mini")}
    assert status == {("grpo", 0): "finished", ("prl", 0): "running", ("grpo", 1): "pending", ("prl", 1): "pending"}

    r = subprocess.run(cmd, cwd=ROOT, env={**_cli_env(), "PREFECT_LOGGING_LEVEL": "INFO"}, capture_output=True,
                       text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "grpo seed 0: finished, skipped" in out
    assert "training mini.grpo.s0" not in out  # the finished job is not launched again
    assert "resumed mini.prl.s0" in out and "after step 1" in out  # the killed one continues from its checkpoint
    result = json.loads(r.stdout[r.stdout.index("{"):])
    assert (result["jobs"], result["ran"], result["skipped"]) == (4, 3, 1)

    jobs = store.records("study_cells_for_study", study_id="mini")
    assert [(j["cell"], j["seed"], j["status"], j["train_status"], j["eval_status"]) for j in jobs] == [
        ("grpo", 0, "finished", "finished", "finished"), ("prl", 0, "finished", "finished", "finished"),
        ("grpo", 1, "finished", "finished", "finished"), ("prl", 1, "finished", "finished", "finished")]
    with store.read() as con:
        steps = con.execute("SELECT run_id, list(DISTINCT step ORDER BY step), count(*) FILTER (name = 'reward/mean') "
                            "FROM train_metrics GROUP BY run_id ORDER BY run_id").fetchall()
        samples = dict(con.execute("SELECT run_id, count(*) FROM samples GROUP BY run_id").fetchall())
        averages = dict(con.execute("SELECT run_id, avg(score) FROM samples GROUP BY run_id").fetchall())
        links = con.execute("SELECT run_id, parent_run_id, train_step FROM runs WHERE kind = 'eval' ORDER BY run_id"
                            ).fetchall()
    assert [(s[0], s[1], s[2]) for s in steps] == [(f"mini.{c}.s{s}", [1, 2], 2) for c, s in
                                                   (("grpo", 0), ("grpo", 1), ("prl", 0), ("prl", 1))]
    assert {j["eval_run_id"]: samples[j["eval_run_id"]] for j in jobs} == {
        f"mini.{c}.s{s}@step2": 12 for c in ("grpo", "prl") for s in (0, 1)}  # 6 problems × n = 2, none twice
    assert links == [(f"mini.{c}.s{s}@step2", f"mini.{c}.s{s}", 2) for c, s in
                     (("grpo", 0), ("grpo", 1), ("prl", 0), ("prl", 1))]

    rep = json.loads((tmp_path / "study" / "study_report.json").read_text())
    by = {(r["cell"], r["metric"]): r for r in rep["per_cell"]}
    for cell in ("grpo", "prl"):
        per_seed = by[(cell, "average@2")]["per_seed"]
        assert per_seed == pytest.approx({str(s): averages[f"mini.{cell}.s{s}@step2"] for s in (0, 1)})
    assert rep["undeclared_differences"] == []
    # the claims: per-seed differences from the per-cell figures and from the runs' stored held-out metrics, and the
    # verdict the CI rule gives them
    claims = {c["id"]: c for c in rep["claims"]}
    assert set(claims) == {"pass2", "entropy"}
    cmp = claims["pass2"]["comparisons"][0]
    assert cmp["per_seed"] == pytest.approx({str(s): by[("prl", "pass@2")]["per_seed"][str(s)]
                                             - by[("grpo", "pass@2")]["per_seed"][str(s)] for s in (0, 1)})
    with store.read() as con:
        ent = dict(con.execute(
            "SELECT run_id, value FROM train_metrics WHERE name = 'heldout/entropy' AND step = 2").fetchall())
    cmp = claims["entropy"]["comparisons"][0]
    assert cmp["per_seed"] == pytest.approx({str(s): ent[f"mini.prl.s{s}"] - ent[f"mini.grpo.s{s}"] for s in (0, 1)})
    for c in claims.values():
        ci = seed_ci(list(c["comparisons"][0]["per_seed"].values()))
        assert c["verdict"] == ("holds here" if ci["lo"] > 0 else "contradicted" if ci["hi"] < 0
                                else "not shown at this scale")
    # exactly what the study file sets, plus what PRL trains with by default (advantage_first, reverse KL; README)
    assert rep["config_differences"] == {"algorithm.estimator": {"grpo": "grpo", "prl": "prl"},
                                         "algorithm.eta": {"grpo": None, "prl": 10.0},
                                         "algorithm.step_split": {"grpo": None, "prl": "text:\\n\\n"},
                                         "algorithm.order": {"grpo": None, "prl": "advantage_first"},
                                         "algorithm.divergence": {"grpo": None, "prl": "reverse_kl"}}
    assert_only_plotly_scripts((tmp_path / "study" / "study_report.html").read_text(), [  # one η: no sweep chart
        "pass@k per cell (95% CI across seeds)", "Reward against KL to the reference over training (mean over seeds)"])
    r = subprocess.run([sys.executable, "-m", "prl_cli", "report", "--study", "mini", "--db",
                        str(tmp_path / "study" / "store.duckdb")], cwd=ROOT, env=_cli_env(), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "# Study `mini`" in r.stdout and "Each cell against `grpo`, seed by seed" in r.stdout
    assert "## Claims tested" in r.stdout and "PRL keeps a higher held-out entropy" in r.stdout


@pytest.mark.parametrize("claim, needle", [
    ({"metric": "pass@9"}, "claims[0].metric: 'pass@9' is not one of pass@1..pass@2, average@2"),
    ({"cell": "frpo"}, "claims[0]: 'frpo' is not a cell; cells: grpo, prl"),
    ({"higher": "yes"}, "claims[0].higher: expected true or false, got 'yes'"),
    ({"against": None, "metric": "heldout/entropy"}, "claims[0]: None is not a cell"),
])
def test_a_claim_that_cannot_be_tested_is_refused(tmp_path, claim, needle):
    good = {"id": "c", "text": "t", "metric": "pass@2", "higher": True, "cell": "prl", "against": ["grpo"]}
    doc = {"study": {"id": "s", "seeds": [0, 1], "eval": {"n": 2}}, "base": BASE, "cells": [GRPO, PRL],
           "claims": [{**good, **claim}]}
    p = tmp_path / "study.yaml"
    p.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as e:
        load_study(p)
    assert needle in str(e.value), str(e.value)
    p.write_text(yaml.safe_dump({**doc, "claims": [good]}))
    assert [c.id for c in load_study(p).claims] == ["c"]
