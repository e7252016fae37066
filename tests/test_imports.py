"""``prl import``, ``prl rescore`` and ``prl report --agreement`` on real files other tools wrote.

The files under tests/data/external/ are real generations with their authors' published accuracy
(sources in its README); those under tests/data/formats/ were produced here by the tools
themselves (lm-eval, Inspect, verl; provenance in each folder).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import duckdb
import pytest

from prl.imports.formats import FormatError, label_correct, read_source
from prl.imports.matching import ProblemIndex, text_key
from prl_cli.main import main as prl_main

from tests.procs import kill_when

ROOT = Path(__file__).resolve().parents[1]
EXTERNAL = ROOT / "tests" / "data" / "external"
AIME = next((EXTERNAL / "lighteval-saturn-1.5b").glob("details_*.parquet"))
AMC = EXTERNAL / "amc-json-deepseek-r1-distill-qwen-1.5b" / "amc_output.json"
MATH = EXTERNAL / "jsonl-qwen2.5-math-1.5b-r1zero" / "results.jsonl"
MATH_FIELDS = "problem=prompt,response=response,label=metrics.answer_reward,gold=ground_truth"
AMC_FIELDS = "problem=question,response=generated_output,label=correct,gold=expected_expected_answer"


def cli(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = prl_main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def sql(db: Path, query: str, *params):
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(query, list(params)).fetchall()
    finally:
        con.close()


def store_snapshot(db: Path) -> list[tuple]:
    return sql(db, "SELECT run_id, dataset, problem_id, sample_idx, verdict, source_label FROM samples "
                   "ORDER BY ALL") + sql(db, "SELECT run_id, status FROM runs ORDER BY ALL")


@pytest.fixture(scope="module")
def aime_store(tmp_path_factory):
    """The lighteval AIME 2024 file imported once (the CLI's own output kept)."""
    db = tmp_path_factory.mktemp("imports") / "store.duckdb"
    rc = prl_main(["import", str(AIME), "--dataset", "aime24", "--db", str(db), "--quiet",
                   "--run", "saturn-aime"])
    assert rc == 0
    return db


def test_lighteval_aime_gives_our_accuracy_beside_the_reported_one(aime_store, capsys):
    db = aime_store
    (kind, model, manifest), = sql(db, "SELECT kind, model, manifest FROM runs WHERE run_id = 'saturn-aime'")
    manifest = json.loads(manifest)
    assert kind == "imported" and model == "_SATURN-1.5B"
    src, = manifest["sources"]
    assert src["sha256"] == __import__("hashlib").sha256(AIME.read_bytes()).hexdigest()
    assert src["size"] == AIME.stat().st_size and src["format"] == "lighteval" and src["rows"] == 30
    assert src["tool_version"] == "git 9c05a83ad795e37efdc89ac60943f6623b9ae633"
    assert src["reported_accuracy"] == pytest.approx(0.3) and src["reported_metric"] == "extractive_match"
    assert manifest["matched_by"] == {"contained": 30} and manifest["unmatched"] == []
    # every one of the 30 AIME problems, once, sample 0, each with lighteval's own label beside our verdict
    rows = sql(db, "SELECT problem_id, sample_idx, verdict, source_label, source_answer FROM samples "
                   "WHERE run_id = 'saturn-aime'")
    assert len(rows) == 30 and len({r[0] for r in rows}) == 30 and {r[1] for r in rows} == {0}
    assert sum(r[3] for r in rows) == 9  # lighteval: 9/30 = 0.3000, the reported number
    rc, out, _ = cli(capsys, "report", "--db", str(db), "--agreement", "saturn-aime")
    assert rc == 0
    assert "accuracy: ours 0.3000, theirs 0.3000, reported by the source 0.3000" in out
    assert "agree on 30/30 (100.0%), Cohen's κ 1.000" in out and "disagreements: 0" in out


def test_reimporting_adds_nothing_and_other_files_under_the_same_id_are_refused(aime_store, capsys, tmp_path):
    db = aime_store
    before = store_snapshot(db)
    rc, out, err = cli(capsys, "import", str(AIME), "--dataset", "aime24", "--db", str(db), "--run", "saturn-aime")
    assert rc == 0 and json.loads(out)["samples_added"] == 0 and "30 already stored" in err
    assert store_snapshot(db) == before
    rc, _, err = cli(capsys, "import", str(AMC), "--dataset", "amc23", "--db", str(db), "--run", "saturn-aime")
    assert rc == 2 and "was imported from other files" in err
    assert store_snapshot(db) == before


def test_amc_json_matches_the_40_amc23_problems_and_lists_the_43_others(tmp_path, capsys):
    db = tmp_path / "s.duckdb"
    rc, out, err = cli(capsys, "import", str(AMC), "--format", "json", "--dataset", "amc23", "--db", str(db),
                       "--fields", AMC_FIELDS, "--reported-accuracy", "0.6506", "--run", "r1")
    assert rc == 0
    s = json.loads(out)
    assert (s["rows"], s["rows_matched"], s["rows_unmatched"], s["samples"]) == (83, 40, 43, 40)
    assert "43 unmatched" in err and "unmatched " in err and "… and 33 more" in err
    (manifest,), = sql(db, "SELECT manifest FROM runs WHERE run_id = 'r1'")
    unmatched = json.loads(manifest)["unmatched"]
    assert len(unmatched) == 43 and all(u["reason"].startswith("no problem of amc23") for u in unmatched)
    # the source's labels on the 40: 30 true (the file's 0.6506 is over all 83 rows: 54/83)
    assert sum(json.loads(AMC.read_text())[i]["correct"] for i in range(83)) == 54
    assert sql(db, "SELECT sum(source_label), count(*) FROM samples WHERE run_id = 'r1'") == [(30.0, 40)]
    rc, out, _ = cli(capsys, "report", "--db", str(db), "--agreement", "r1", "--format", "json")
    res = json.loads(out)
    assert res["table"] == {"both_correct": 29, "ours_only": 0, "theirs_only": 1, "both_wrong": 10}
    assert res["kappa"] == pytest.approx(0.935, abs=5e-4) and len(res["unmatched"]) == 43
    d, = res["disagreements"]
    # the one disagreement: the response's answer is 1/7, the gold (AMC 2023 12A #?) is 1; their grader passed it
    assert (d["problem_id"], d["extracted_answer"], d["gold"], d["other_gold"]) == ("amc23/10", "\\dfrac{1}{7}", "1", "1.0")


def test_math500_jsonl_by_fields_the_prompt_wraps_the_problem(tmp_path, capsys):
    part = tmp_path / "results.jsonl"  # the first 40 rows of the real file
    part.write_text("".join(MATH.read_text().splitlines(keepends=True)[:40]))
    db = tmp_path / "s.duckdb"
    rc, out, _ = cli(capsys, "import", str(part), "--dataset", "math500", "--db", str(db), "--fields", MATH_FIELDS,
                     "--run", "qwen-math", "--quiet")
    assert rc == 0
    s = json.loads(out)
    assert s["rows_matched"] == 40 and s["rows_unmatched"] == 0
    # the short problems ("Simplify $\sqrt{242}$.") are found inside the r1-zero prompt too
    assert sql(db, "SELECT count(DISTINCT problem_id) FROM samples") == [(40,)]
    labels = [json.loads(l)["metrics"]["answer_reward"] for l in part.read_text().splitlines()]
    assert sql(db, "SELECT sum(source_label) FROM samples")[0][0] == sum(labels)


def test_bad_files_are_one_clear_error_and_change_nothing(aime_store, capsys, tmp_path):
    db = aime_store
    before = store_snapshot(db)
    truncated = tmp_path / AIME.name
    truncated.write_bytes(AIME.read_bytes()[: AIME.stat().st_size // 2])
    rc, _, err = cli(capsys, "import", str(truncated), "--dataset", "aime24", "--db", str(db))
    assert rc == 2 and f"{truncated}: not a readable Parquet file" in err
    bad_line = tmp_path / "bad.jsonl"
    lines = MATH.read_text().splitlines(keepends=True)[:5]
    lines[3] = lines[3][:50] + "\n"
    bad_line.write_text("".join(lines))
    rc, _, err = cli(capsys, "import", str(bad_line), "--dataset", "math500", "--db", str(db), "--fields", MATH_FIELDS)
    assert rc == 2 and f"{bad_line}:4: not JSON" in err
    rc, _, err = cli(capsys, "import", str(AMC), "--format", "lm-eval", "--dataset", "amc23", "--db", str(db))
    assert rc == 2 and f"{AMC}: a JSON array, not a lm-eval --log_samples file" in err
    rc, _, err = cli(capsys, "import", str(AIME), "--dataset", "amc23", "--db", str(db))
    assert rc == 2 and "none of its 30 rows matches a problem of amc23" in err
    rc, _, err = cli(capsys, "import", str(MATH), "--dataset", "math500", "--db", str(db), "--fields", "label=nope.x,"
                     "problem=prompt,response=response")
    assert rc == 2 and f"{MATH}:1: field 'nope.x' (label) missing" in err
    assert store_snapshot(db) == before


def test_a_killed_import_resumes_to_the_same_store(tmp_path):
    part = tmp_path / "results.jsonl"
    part.write_text("".join(MATH.read_text().splitlines(keepends=True)[:48]))
    args = [str(part), "--dataset", "math500", "--fields", MATH_FIELDS, "--run", "q", "--chunk-samples", "8",
            "--verifier-workers", "1", "--quiet"]
    killed, whole = tmp_path / "killed.duckdb", tmp_path / "whole.duckdb"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "prl_cli", "import", *args]

    def stored() -> int:
        return sql(killed, "SELECT count(*) FROM samples")[0][0] if killed.exists() else 0

    kill_when(cmd + ["--db", str(killed)], lambda: stored() >= 8, cwd=ROOT, env=env)
    partial = stored()
    assert 8 <= partial < 48 and sql(killed, "SELECT status FROM runs") == [("running",)]
    assert partial % 8 == 0  # whole chunks only
    assert prl_main(["import", *args, "--db", str(killed)]) == 0
    assert prl_main(["import", *args, "--db", str(whole)]) == 0
    q = "SELECT dataset, problem_id, sample_idx, verdict, source_label, response FROM samples ORDER BY ALL"
    assert sql(killed, q) == sql(whole, q) and len(sql(whole, q)) == 48
    assert sql(killed, "SELECT status FROM runs") == [("finished",)]


def test_rescore_makes_a_new_run_and_measures_a_normalisation_fix(tmp_path, capsys):
    """An older version stored the raw gold 4.5e33 as the verifier's gold (Math-Verify reads 4.5·e·33);
    the rescore normalises it afresh, flips the verdict, and leaves the old run as it was."""
    data = tmp_path / "physics.jsonl"
    data.write_text(json.dumps({"id": "p1", "problem": "What is the Sun's luminosity in erg/s, to two digits?",
                                "answer": "4.5e33"}) + "\n"
                    + json.dumps({"id": "p2", "problem": "What is two plus two, as a plain number?", "answer": "4"}) + "\n")
    gen = tmp_path / "gen.jsonl"
    gen.write_text(json.dumps({"id": "p1", "question": "What is the Sun's luminosity in erg/s, to two digits?",
                               "output": "So $L = \\boxed{4.5\\times10^{33}}$ erg/s.", "correct": True}) + "\n"
                   + json.dumps({"id": "p2", "question": "What is two plus two, as a plain number?",
                                 "output": "\\boxed{4}", "correct": True}) + "\n")
    db = tmp_path / "s.duckdb"
    rc, _, _ = cli(capsys, "import", str(gen), "--dataset", str(data), "--db", str(db), "--run", "old", "--quiet")
    assert rc == 0
    assert sql(db, "SELECT gold_normalized FROM problems WHERE problem_id = 'physics/p1'") == [("4.5 \\times 10^{33}",)]
    con = duckdb.connect(str(db))  # what a store written before the normalisation applied to user files holds
    con.execute("UPDATE problems SET gold_normalized = '4.5e33' WHERE problem_id = 'physics/p1'")
    con.execute("UPDATE samples SET verdict = 'wrong', score = 0 WHERE problem_id = 'physics/p1'")
    con.close()
    old = sql(db, "SELECT * FROM samples WHERE run_id = 'old' ORDER BY ALL")
    rc, out, _ = cli(capsys, "rescore", "--db", str(db), "--run", "old", "--quiet")
    assert rc == 0
    s = json.loads(out)
    assert (s["run_id"], s["samples"], s["verdicts_changed"], s["now_correct"], s["gold_changes"]) == \
        ("old.rescore", 2, 1, 1, 1)
    assert sql(db, "SELECT * FROM samples WHERE run_id = 'old' ORDER BY ALL") == old  # never changed
    (kind, parent, manifest), = sql(db, "SELECT kind, parent_run_id, manifest FROM runs WHERE run_id = 'old.rescore'")
    assert (kind, parent) == ("rescore", "old")
    assert json.loads(manifest)["gold_changes"] == {"physics/p1": {"old": "4.5e33", "new": "4.5 \\times 10^{33}"}}
    rc, out, _ = cli(capsys, "report", "--db", str(db), "--agreement", "old.rescore", "--against", "old", "--format", "json")
    res = json.loads(out)
    assert res["table"] == {"both_correct": 1, "ours_only": 1, "theirs_only": 0, "both_wrong": 0}
    assert res["disagreements"][0]["gold"] == "4.5 \\times 10^{33}"
    # the same command again adds nothing; an id that is not a rescore of this run is refused
    rc, out, _ = cli(capsys, "rescore", "--db", str(db), "--run", "old", "--quiet")
    assert rc == 0 and json.loads(out)["samples_added"] == 0
    rc, _, err = cli(capsys, "rescore", "--db", str(db), "--run", "old", "--new-run", "old")
    assert rc == 2 and "needs a new id" in err


# ─── units: matching, labels, the SQL rule ─────────────────────────────────────────────────

def _problems(*texts):
    from prl.data.datasets import Problem

    return [Problem("d", f"d/{i}", t, "1", "1") for i, t in enumerate(texts)]


def test_text_key_survives_what_tools_do_to_a_problem():
    a = "Find $\\frac{m}{n}$ where  m+n = 3."
    assert text_key(a) == text_key("'FIND \\\\frac{m}{n} where m+n=3.'") == "findfracmnwheremn3"


def test_matching_by_text_containment_ambiguity_and_ids():
    from prl.imports.formats import SourceRow

    ps = _problems("Compute the sum of the first ten primes.", "Compute the sum of the first ten primes, squared.",
                   "Same text", "Same text")
    idx = ProblemIndex(ps)
    row = lambda text, pid=None: SourceRow("f:1", pid, text, ["x"], [None], [None])  # noqa: E731
    assert idx.match(row("Compute the sum of the first ten primes.")).problem.problem_id == "d/0"
    wrapped = "System: think.\nUser: Compute the sum of the first ten primes, squared.\nAssistant:"
    m = idx.match(row(wrapped))
    assert (m.problem.problem_id, m.how) == ("d/1", "contained")  # the longest problem inside the prompt
    assert "ambiguous" in idx.match(row("same TEXT")).reason
    # an id the text contradicts (another tool's own numbering) loses to the text; without text it is used
    assert idx.match(row("Compute the sum of the first ten primes.", pid="1")).problem.problem_id == "d/0"
    assert idx.match(row(None, pid="1")).problem.problem_id == "d/1"
    assert idx.match(row("Prove Fermat's last theorem for n = 3.")).problem is None


def test_source_labels_and_the_sql_rule_agree(tmp_path):
    from prl.imports.formats import to_label
    from prl.store.db import Store

    values = [True, False, "C", "I", "P", 1, 0, -1.0, 0.5, 0.51, "correct", "False"]
    labels = [to_label(v, "f:1") for v in values]
    assert labels == [1.0, 0.0, 1.0, 0.0, 0.5, 1.0, 0.0, -1.0, 0.5, 0.51, 1.0, 0.0]
    with pytest.raises(FormatError, match="f:1: label 'maybe'"):
        to_label("maybe", "f:1")
    store = Store(":memory:")
    store.insert_samples([{"run_id": "r", "dataset": "d", "problem_id": f"d/{i}", "sample_idx": 0, "response": "",
                           "verdict": "correct" if i % 2 else "wrong", "score": float(i % 2), "source_label": lab}
                          for i, lab in enumerate(labels)])
    (samples, correct, labelled, source_correct, agree), = store.rows("import_summary_for_run", run_id="r")
    assert source_correct == sum(bool(label_correct(l)) for l in labels) == 5
    assert agree == sum(bool(label_correct(l)) == bool(i % 2) for i, l in enumerate(labels))


def test_every_format_name_is_read_and_auto_detected():
    assert read_source(AIME).format == "lighteval"
    assert read_source(AMC).format == "json"
    assert read_source(MATH, fields={"label": "metrics.answer_reward"}).format == "json"
    with pytest.raises(FormatError, match="--fields applies to --format json only"):
        read_source(AIME, fields={"problem": "x"})
    with pytest.raises(FormatError, match="is a directory"):
        read_source(EXTERNAL)


@pytest.mark.parametrize("folder", ["lm_eval", "inspect", "verl"])
def test_files_the_tools_wrote_here_import(folder, tmp_path, capsys):
    from prl.imports.formats import detect_format

    files = sorted(p for p in (ROOT / "tests" / "data" / "formats" / folder).iterdir()
                   if p.suffix in (".jsonl", ".eval") and not p.name.startswith("results_"))
    assert files, f"tests/data/formats/{folder}: the file its tool wrote is missing"
    fmt = {"lm_eval": "lm-eval", "inspect": "inspect", "verl": "verl"}[folder]
    assert detect_format(files[0]) == fmt
    db = tmp_path / "s.duckdb"
    rc, out, _ = cli(capsys, "import", *map(str, files), "--dataset", "synth_test", "--db", str(db), "--quiet",
                     "--run", folder)
    assert rc == 0
    s = json.loads(out)
    assert s["rows_unmatched"] == 0 and s["samples"] == 40  # 20 problems x 2 responses each
    assert sql(db, "SELECT count(DISTINCT problem_id), min(sample_idx), max(sample_idx) FROM samples") == [(20, 0, 1)]
    # the source's own labels, as its tool reports them: lm-eval scores the first of each doc's two responses
    # (take_first filter) and reports their mean; Inspect reports the mean over all 40; verl reports nothing,
    # its rows' scores are +1/-1
    if fmt == "verl":
        scores = [json.loads(line)["score"] for line in files[0].read_text(encoding="utf-8").splitlines()]
        assert s["labelled"] == 40 and s["source_accuracy"] == sum(x > 0 for x in scores) / 40
        assert s["reported_accuracy"] is None
    else:
        assert s["labelled"] == (20 if fmt == "lm-eval" else 40)
        assert s["reported_accuracy"] is not None and s["source_accuracy"] == pytest.approx(s["reported_accuracy"])
    # on these short arithmetic answers our verifier and theirs agree on every labelled response
    assert s["agree"] == s["labelled"]


def test_a_report_piped_into_head_ends_quietly(tmp_path):
    """`prl report --agreement RUN --full | head -2` on the MATH-500 import (~100 disagreements, far more
    than a pipe buffer): the reader closes the pipe early; no traceback."""
    import subprocess

    db = tmp_path / "s.duckdb"
    assert prl_main(["import", str(MATH), "--dataset", "math500", "--db", str(db), "--fields", MATH_FIELDS,
                     "--run", "m", "--quiet"]) == 0
    r = subprocess.run(f"{sys.executable} -m prl_cli report --db {db} --agreement m --full | head -2",
                       shell=True, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.stdout.startswith("agreement: run m (ours)") and len(r.stdout.splitlines()) == 2
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr


def test_the_agreement_report_never_prints_terminal_control_sequences():
    """A response is untrusted text: an ANSI escape in it reaches the terminal as a visible replacement."""
    from prl.evaluation.agreement import render_agreement

    evil = "\x1b[2J\x1b]0;pwned\x07 \\boxed{1}"
    result = {"run_id": "r", "against": "source labels", "samples": 1, "unlabelled": 0, "agree": 0, "kappa": None,
              "table": {"both_correct": 0, "ours_only": 1, "theirs_only": 0, "both_wrong": 0},
              "ours_accuracy": 1.0, "theirs_accuracy": 0.0, "reported_accuracy": None, "unmatched": [],
              "disagreements": [{"problem_id": "d/1", "sample_idx": 0, "source_ref": "f:1", "verdict": "correct",
                                 "extracted_answer": "1", "verdict_detail": None, "other_verdict": "wrong",
                                 "other_answer": evil, "gold": "1", "other_gold": None, "problem": evil,
                                 "response": evil}]}
    text = render_agreement(result, full=True)
    assert "\x1b" not in text and "\x07" not in text and "\ufffd[2J" in text
