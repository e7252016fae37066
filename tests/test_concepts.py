"""One home per concept: every other place that uses a concept derives from its home or is tied to
it here, on given rows.

    verdict names       prl.grading.verifier.VERDICTS        ← sql/schema.sql CHECK, eval manifest, Failures page
    suspicious pass     prl.grading.relevance (SUSPICION_RULES, flagged_by, 0.15)
                                                             ← sql/schema.sql view (flagged_by), Failures page caption,
                                                               prl report
    judgement values    prl.grading.relevance.JUDGEMENTS     ← sql/schema.sql CHECK on judgements, Failures page
    shows its working   prl.data.synthetic.shows_working     ← sql/queries.sql answer_styles_for_run
    default store path  prl.store.db.DEFAULT_STORE           ← EvalConfig, TrainConfig, the CLI, the dashboard
    OUT_DIR store path  prl.store.db.store_path              ← the demo (PipelineConfig), a study (StudySettings)
    warm start          prl.training.config.WarmStart        ← the demo, a study (prl.training.sft.warm_start)
    training problems   prl.data.synthetic.TRAIN_SIZE        ← TrainConfig, SFTConfig, the demo's data
    manifest prompt     prl.generation.prompts.prompt_record ← eval manifest, prl generate
    estimator names     prl_core.estimators.ESTIMATORS       ← AlgorithmConfig (names, group size, PRL keys, order)
    run manifest        prl.manifest.run_manifest            ← eval, generate, SFT, train
    maj@n               prl_core.metrics.maj_at_k            ← prl report (answers clustered by equivalence)
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import duckdb
import pytest

from prl.data.synthetic import shows_working
from prl.evaluation.config import EvalConfig
from prl.evaluation.report import run_scores
from prl.evaluation.stages import eval_manifest
from prl.generation.prompts import prompt_record
from prl.grading.relevance import JUDGEMENTS, RULE_NAMES, SUSPICION_RULES, SUSPICIOUS_BELOW, flagged_by, is_suspicious_pass
from prl.grading.verifier import VERDICTS
from prl.manifest import MANIFEST_KEYS
from prl.store.db import DEFAULT_STORE, Store, sql_dir
from prl.training.config import TrainConfig

ROOT = Path(__file__).resolve().parents[1]


def _sample(run, pid, idx, verdict, response="x", **kw):
    return dict(run_id=run, dataset="d", problem_id=pid, sample_idx=idx, response=response,
                extracted_answer=kw.pop("answer", None), verdict=verdict, score=1.0 if verdict == "correct" else 0.0,
                n_tokens=3, finish_reason="stop", verify_ms=1.0, **kw)


@pytest.fixture
def store():
    with Store(":memory:") as s:
        yield s


# ─── verdicts ──────────────────────────────────────────────────────────────────────────────────

def test_the_schema_accepts_exactly_the_verdict_names(store):
    check = re.search(r"verdict\s+VARCHAR NOT NULL CHECK \(verdict IN \(([^)]*)\)\)", (sql_dir() / "schema.sql").read_text())
    assert tuple(v.strip().strip("'") for v in check.group(1).split(",")) == VERDICTS
    assert store.insert_samples([_sample("r", f"d/{i}", 0, v) for i, v in enumerate(VERDICTS)]) == len(VERDICTS)
    with pytest.raises(duckdb.ConstraintException):
        store.insert_samples([_sample("r", "d/x", 0, "maybe")])


def test_the_failures_page_lists_every_verdict_but_correct():
    tree = ast.parse((ROOT / "dashboard" / "pages" / "failures.py").read_text())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert "VERDICTS" in names  # derived from the home, not a second list
    assert not re.search(r"['\"]gold_unparsable['\"]", (ROOT / "dashboard" / "pages" / "failures.py").read_text())


# ─── suspicious pass ───────────────────────────────────────────────────────────────────────────

def test_the_suspicious_pass_view_is_the_python_rule(store):
    rows, want = [], {}
    grid = [(v, rel, only, other) for v in ("correct", "wrong") for rel in (None, 0.0, SUSPICIOUS_BELOW - 1e-9,
            SUSPICIOUS_BELOW, 0.5) for only in (False, True) for other in (None, "own", "d/x")]
    for i, (verdict, rel, only, other) in enumerate(grid):
        best = f"d/{i}" if other == "own" else other
        rows.append(_sample("r", f"d/{i}", 0, verdict, relevance=rel, answer_only=only, best_fit=best))
        if is_suspicious_pass(verdict, rel, only, best, f"d/{i}"):
            want[f"d/{i}"] = ", ".join(flagged_by(verdict, rel, only, best, f"d/{i}"))
    store.insert_samples(rows)
    with store.read() as con:
        got = dict(con.execute("select problem_id, flagged_by from suspicious_passes where run_id = 'r'").fetchall())
    assert got == want and 0 < len(want) < len(grid)
    assert {r for v in want.values() for r in v.split(", ")} == set(RULE_NAMES)  # every rule fires somewhere


def _view_sql() -> str:
    text = (sql_dir() / "schema.sql").read_text()
    return text[text.index("CREATE OR REPLACE VIEW suspicious_passes"):].split(";")[0]


def test_the_view_names_the_rules_of_the_home_in_order():
    assert tuple(re.findall(r"THEN '(\w+)' END", _view_sql())) == RULE_NAMES
    assert re.findall(r"relevance < ([\d.]+)", _view_sql()) == [str(SUSPICIOUS_BELOW)] * 2


def test_the_failures_page_and_the_report_state_every_rule_from_the_home(store):
    from prl.evaluation.report import render_suspicious

    text = (ROOT / "dashboard" / "pages" / "failures.py").read_text()
    assert "SUSPICION_RULES" in text and "JUDGEMENTS" in text
    constants = {n.value for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Constant)}
    assert not constants & {*JUDGEMENTS, "fits_another", "low_relevance", 0.15, 2.5, 3.5}  # nothing restated
    assert not re.search(r"0\.15|\b[23]\.5\b", text)
    store.insert_samples([_sample("r", "d/1", 0, "correct", relevance=0.9, answer_only=False, best_fit="d/2")])
    report = render_suspicious(store, "r")
    assert all(f"rule {r.name}: {r.says}" in report for r in SUSPICION_RULES)
    assert "d/1 sample 0: fits_another (d/2)" in report


def test_the_judgements_table_takes_exactly_the_judgement_values(store):
    check = re.search(r"judgement\s+VARCHAR NOT NULL CHECK \(judgement IN \(([^)]*)\)\)", (sql_dir() / "schema.sql").read_text())
    assert tuple(v.strip().strip("'") for v in check.group(1).split(",")) == JUDGEMENTS
    store.insert_samples([_sample("r", "d/1", 0, "correct", relevance=0.9, answer_only=True, best_fit="d/1")])
    for j in JUDGEMENTS:
        store.set_judgement("r", "d", "d/1", 0, j)
        assert store.rows("judgements_for_runs", run_ids=["r"])[0][4] == j
    from prl.store.db import StoreError

    with pytest.raises(StoreError, match="'maybe' is not one the judgements table takes"):
        store.set_judgement("r", "d", "d/1", 0, "maybe")


# ─── shows its working ─────────────────────────────────────────────────────────────────────────

@pytest.mark.parametrize("response", [
    "Mia has 7.\n\n7 + 5 = 12\n\nThe answer is \\boxed{12}.", "The answer is \\boxed{12}.",
    "12 = 12", "The answer is \\boxed{3 = 3}.", "", "no equals here \\boxed{4}",
])
def test_sql_and_python_agree_on_showing_the_working(store, response):
    store.insert_samples([_sample("r", "d/1", 0, "wrong", response=response)])
    [(_dataset, samples, share, _w, _d)] = store.rows("answer_styles_for_run", run_id="r")
    assert samples == 1 and share == float(shows_working(response))


# ─── the default store ─────────────────────────────────────────────────────────────────────────

def test_every_default_store_path_is_the_one_home():
    from dashboard import data
    from prl_cli.main import build_parser

    assert EvalConfig.__dataclass_fields__["db"].default == DEFAULT_STORE
    assert TrainConfig.__dataclass_fields__["db"].default == DEFAULT_STORE
    parser = build_parser()
    for command in ("eval", "dashboard"):
        assert parser.parse_args([command, "--model", "m"] if command == "eval" else [command]).db == DEFAULT_STORE
    assert data.db_path() == DEFAULT_STORE
    literal = re.compile(r"['\"]runs/store\.duckdb['\"]")
    offenders = [str(p.relative_to(ROOT)) for d in ("prl", "prl_cli", "flows", "dashboard")
                 for p in (ROOT / d).rglob("*.py") if literal.search(p.read_text()) and p.name != "db.py"]
    assert offenders == []


def test_an_out_dir_store_is_the_one_rule():
    from flows.config import PipelineConfig
    from prl.store.db import store_path
    from prl.studies.config import StudySettings

    assert PipelineConfig(out_dir="x/demo").store == store_path("x/demo") == str(Path("x/demo") / "store.duckdb")
    assert StudySettings(id="s", out_dir="x/s").store == store_path("x/s")
    assert StudySettings(id="s", out_dir="x/s", db="y.duckdb").store == "y.duckdb"
    literal = re.compile(r"['\"]store\.duckdb['\"]")
    offenders = [str(p.relative_to(ROOT)) for d in ("prl", "prl_cli", "flows", "dashboard")
                 for p in (ROOT / d).rglob("*.py") if literal.search(p.read_text()) and p.name != "db.py"]
    assert offenders == []


# ─── the warm start and the training split ─────────────────────────────────────────────────────

def test_the_demo_and_a_study_share_one_warm_start():
    from flows.config import PipelineConfig
    from prl.studies.config import StudySettings
    from prl.training.config import SFTConfig, WarmStart

    assert StudySettings.__dataclass_fields__["warm_start"].type in ("WarmStart | None", WarmStart | None)
    assert PipelineConfig().warm_start() == WarmStart()
    assert PipelineConfig(seed=3, sft_steps=7).warm_start() == WarmStart(seed=3, sft_steps=7)
    assert WarmStart().sft_config() == SFTConfig(direct_frac=WarmStart.direct_frac)
    homes = [str(p.relative_to(ROOT)) for d in ("prl", "flows") for p in (ROOT / d).rglob("*.py")
             if re.search(r"^(def|class) (build_tiny|run_sft)\(|build_tiny\(|run_sft\(", p.read_text(), re.M)
             and p.parent.name != "models"]
    assert homes == ["prl/training/sft.py"]


def test_the_training_split_size_has_one_home():
    from prl.data.synthetic import TRAIN_SIZE
    from prl.training.config import SFTConfig

    assert TrainConfig.train_size == SFTConfig.train_size == TRAIN_SIZE
    offenders = [str(p.relative_to(ROOT)) for d in ("prl", "flows") for p in (ROOT / d).rglob("*.py")
                 if re.search(r"\b20_?000\b", p.read_text().replace("response[-20000:]", ""))
                 and p.name != "synthetic.py"]
    assert offenders == []


# ─── the estimator registry ────────────────────────────────────────────────────────────────────

def test_the_estimator_registry_owns_names_and_constraints():
    from prl_core import estimators
    from prl_core.advantages import ORDERS
    from prl_core.config import AlgorithmConfig, ConfigError

    try:
        @estimators.register("test_only", needs_group=True)
        def only_for_this_test(rewards, group_ids, logp_old, logp_ref, mask, *, cfg, boundaries=None):
            raise AssertionError("not called")

        assert AlgorithmConfig(estimator="test_only", n_samples=2).estimator == "test_only"
        with pytest.raises(ConfigError, match="n_samples: test_only needs a group"):
            AlgorithmConfig(estimator="test_only", n_samples=1)
        with pytest.raises(ConfigError, match=r"train\.n_samples: test_only needs a group"):
            algo = AlgorithmConfig(estimator="test_only", n_samples=2)
            algo.n_samples = 1
            TrainConfig(model="m").validate(algo)
    finally:
        estimators.ESTIMATORS.pop("test_only", None)
    with pytest.raises(ConfigError, match="unknown 'test_only'"):
        AlgorithmConfig(estimator="test_only")
    assert AlgorithmConfig(eta=1.0).order == ORDERS[0]
    assert {AlgorithmConfig(eta=1.0, order=o).order for o in ORDERS} == set(ORDERS)
    literals = [str(p.relative_to(ROOT)) for d in ("prl", "prl_core", "flows", "prl_cli", "dashboard")
                for p in (ROOT / d).rglob("*.py")
                if re.search(r"\(\s*['\"]grpo['\"],\s*['\"]dr_grpo['\"]|['\"]process_first['\"]\)", p.read_text())]
    assert literals == ["prl_core/advantages.py"]


# ─── the run manifest ──────────────────────────────────────────────────────────────────────────

def test_the_eval_manifest_is_the_run_manifest_plus_its_own_keys(tmp_path):
    cfg = EvalConfig(model=str(tmp_path), datasets=("amc23",), n=2, seed=7)
    m = eval_manifest(cfg, [])
    assert set(MANIFEST_KEYS) <= set(m) and m["kind"] == "eval" and m["seed"] == 7
    assert m["config"]["n"] == 2 and m["machine"]["cores"] and m["packages"]["torch"]
    assert m["verifier"]["verdicts"] == "|".join(VERDICTS)
    assert m["prompt"] == prompt_record()
    assert eval_manifest(cfg, [], template={"format": "chat"})["prompt"] == prompt_record({"format": "chat"})


def test_no_second_home_for_versions_or_git_state():
    defs = re.compile(r"^def (package_versions|git_state|machine)\(", re.M)
    homes = [str(p.relative_to(ROOT)) for d in ("prl", "prl_cli", "flows", "dashboard")
             for p in (ROOT / d).rglob("*.py") if defs.search(p.read_text())]
    assert homes == ["prl/manifest.py"]


# ─── maj@n ─────────────────────────────────────────────────────────────────────────────────────

def test_report_maj_clusters_answers_by_equivalence(store):
    answers = ["1/2", "0.5", "3", "3", "\\frac{1}{2}"]  # the 1/2 cluster has 3 members, "3" has 2
    store.insert_samples([_sample("r", "d/1", i, "correct" if a != "3" else "wrong", answer=a)
                          for i, a in enumerate(answers)])
    with store.write() as con:
        con.execute("insert into runs (run_id, kind, model, status) values ('r', 'eval', 'm', 'finished')")
    scores = run_scores(store, "r", iters=10)
    [row] = scores["datasets"]
    assert row["maj@5"]["value"] == 1.0  # by string, "3" would win and maj@5 would be 0
    assert row["average@5"]["value"] == pytest.approx(0.6)
