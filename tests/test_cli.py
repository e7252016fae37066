"""The `prl` console script, run as a user runs it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]
PRL = [sys.executable, "-m", "prl_cli"]


def run(*args):
    return subprocess.run([*PRL, *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_selfcheck_prints_the_worked_example_and_passes():
    r = run("selfcheck")
    assert r.returncode == 0, r.stderr
    assert "p_11                           0.475367" in r.stdout
    assert "V_prefix1[11]                  0.620115" in r.stdout
    assert "C_closed_form                  0.357374" in r.stdout
    assert "selfcheck: all checks passed" in r.stdout
    assert "MISMATCH" not in r.stdout and "FAILED" not in r.stdout


def test_help_explains_the_commands():
    r = run("--help")
    assert r.returncode == 0 and "selfcheck" in r.stdout and "config" in r.stdout
    r = run("selfcheck", "--help")
    assert "worked example" in r.stdout


def test_config_check_reports_the_fix(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("algorithm:\n  estimator: grpo\n  step_split: fixed:256\n")
    r = run("config", "check", str(bad))
    assert r.returncode == 2
    assert "bad.yaml: step_split: only used by the prl, frpo estimators" in r.stderr
    r = run("config", "check", "configs/algorithm/prl.yaml")
    assert r.returncode == 0 and '"step_split": "fixed:256"' in r.stdout


def test_data_synth_and_build_tiny(tmp_path):
    r = run("data", "synth", "--out", str(tmp_path / "data"), "--train", "30", "--test", "12")
    assert r.returncode == 0, r.stderr
    lines = (tmp_path / "data" / "synth_test.jsonl").read_text().splitlines()
    assert len(lines) == 12 and '"answer"' in lines[0]
    r = run("model", "build-tiny", "--out", str(tmp_path / "tiny"))
    assert r.returncode == 0, r.stderr
    assert "model.safetensors" in r.stdout and "round trip verified" in r.stdout
    assert "\r" not in r.stderr  # transformers' "Writing model shards" bar: not into a pipe (issue 29)
    assert (tmp_path / "tiny" / "config.json").exists()


def test_report_flags_the_one_paper_row():
    r = run("report")
    assert r.returncode == 0
    assert "reproduces 27; flagged: Table 1 Qwen2.5-Math-1.5B RAFT (62.2945 vs 62.23)" in r.stdout


def test_every_subcommand_help_explains_defaults_and_gives_an_example():
    import argparse

    from prl_cli.main import build_parser

    def leaves(parser, path=()):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield path, parser
            return
        for name, sub in subs[0].choices.items():
            yield from leaves(sub, (*path, name))

    found = dict(leaves(build_parser()))
    assert {("eval",), ("train",), ("report",), ("sql",), ("dashboard",), ("demo",), ("model", "sft")} <= set(found)
    for path, parser in found.items():
        text = parser.format_help()
        assert "xample" in text, f"prl {' '.join(path)} --help has no example"
        assert len(parser.description or "") > 60, f"prl {' '.join(path)} --help does not explain itself"


# ─── flags, defaults and help come from the typed configs (one source) ─────────────────────────

def _options(command: list[str]):
    import argparse

    from prl_cli.main import build_parser

    parser = build_parser()
    for name in command:  # walk down to the subcommand's parser
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return {a.dest: a for a in parser._actions if a.help is not argparse.SUPPRESS}  # not the hidden old spellings


def test_eval_sft_demo_and_train_options_are_their_configs_fields():
    import dataclasses

    from flows.config import PipelineConfig
    from prl.evaluation.config import EvalConfig
    from prl.options import field_docs, flag_names, option_string
    from prl.training.config import OVERRIDES, TrainConfig
    from prl.training.sft import SFTConfig

    cases = [(["eval"], EvalConfig, flag_names(EvalConfig), "value"),
             (["model", "sft"], SFTConfig, flag_names(SFTConfig), "value"),
             (["demo"], PipelineConfig, flag_names(PipelineConfig), None), (["train"], TrainConfig, OVERRIDES, None)]
    for command, cls, names, defaults in cases:
        options, docs = _options(command), field_docs(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for name in names:
            action = options[name]
            if action.option_strings[0] != option_string(fields[name]):  # a negating switch (--lenient)
                assert len(action.option_strings) == 1 and action.const is False and action.default is True
                continue
            assert docs[name].rstrip(".").replace("``", "`")[:30] in (action.help or ""), (command, name)
            want = fields[name].default if defaults else None  # demo and train: only what is given overrides
            if want is dataclasses.MISSING:  # a required option
                want = None
            if name == "datasets":
                want = tuple(want)
            assert action.default == want, (command, name, action.default, want)


def test_given_options_reach_the_config():
    from prl_cli.demo import demo_config
    from prl_cli.main import build_parser

    args = build_parser().parse_args(["eval", "--model", "m", "--dataset", "amc23,math500:5", "--chunk", "4",
                                      "--lenient", "--n", "3", "--dtype", "bfloat16"])
    assert (args.datasets, args.chunk_problems, args.strict, args.n) == (("amc23", "math500:5"), 4, False, 3)
    assert args.dtype == "bfloat16" and build_parser().parse_args(["eval", "--model", "m"]).dtype == "auto"
    cfg = demo_config(build_parser().parse_args(["demo", "--small", "--out", "x", "--engine", "hf", "--eta", "5"]))
    assert (cfg.out_dir, cfg.engine, cfg.eta, cfg.train_steps) == ("x", "hf", 5.0, 3)  # --small's budget, overridden


def test_every_commands_options_are_the_fields_of_its_records():
    """No hand-kept option lists: each command's options are exactly the fields of the records it is built from
    (its config and its own options record), with their defaults."""
    import argparse
    import dataclasses

    from flows.config import PipelineConfig
    from prl.evaluation.config import EvalConfig, RescoreConfig
    from prl.generation.engines.base import SamplingConfig
    from prl.imports.run import ImportConfig
    from prl.options import flag_names
    from prl.training.config import ALGORITHM_OVERRIDES, OVERRIDES, SFTConfig
    from prl_cli import (common, config, dashboard, data, demo, generate, model, report, selfcheck, sql, study,
                         train, verify)

    out, verbosity = common.OutputOptions, common.Verbosity
    cases = {("eval",): (EvalConfig, out), ("import",): (ImportConfig, out), ("rescore",): (RescoreConfig, out),
             ("generate",): (generate.GenerateOptions, SamplingConfig, out),
             ("demo",): (PipelineConfig, demo.DemoOptions, out), ("study",): (study.StudyOptions, out),
             ("report",): (report.ReportOptions, verbosity), ("sql",): (sql.SqlOptions, verbosity),
             ("verify",): (verify.VerifyOptions, verbosity), ("dashboard",): (dashboard.DashboardOptions, verbosity),
             ("selfcheck",): (selfcheck.SelfcheckOptions, verbosity), ("config", "check"): (config.CheckOptions, verbosity),
             ("data", "synth"): (data.SynthOptions, verbosity), ("model", "build-tiny"): (model.BuildTinyOptions, verbosity),
             ("model", "sft"): (model.SFTPaths, SFTConfig, out),
             ("model", "import"): (model.ImportSource, model.ImportTarget, out)}
    for command, records in cases.items():
        options = {d: a for d, a in _options(list(command)).items() if d != "help"}
        want = {n for r in records for n in flag_names(r)}
        assert set(options) == want, (command, set(options) ^ want)
        if command[0] in ("demo",):
            continue  # every default None: only the options given override --small's or the default budget
        for record in records:
            for f in dataclasses.fields(record):
                if f.name in options and f.default is not dataclasses.MISSING and options[f.name].default is not None:
                    got = options[f.name].default
                    assert (tuple(got) if isinstance(got, list) else got) == f.default, (command, f.name)
    train_options = {d for d in _options(["train"]) if d != "help"}
    assert train_options == {"config", "resume", *OVERRIDES, *ALGORITHM_OVERRIDES, *flag_names(common.OutputOptions),
                             *flag_names(train.DryRunOptions)}
    assert all(isinstance(a, argparse.Action) for a in _options(["eval"]).values())


def test_the_verifier_settings_defaults_reach_eval_import_rescore_and_train(tmp_path):
    """One record of the verifier's knobs: its fields and defaults are those of every config that verifies, and of
    `prl eval`, `prl import` and `prl rescore`'s options."""
    import dataclasses

    from prl.evaluation.config import EvalConfig, RescoreConfig
    from prl.grading.verifier import VerifierPool, VerifierSettings
    from prl.imports.run import ImportConfig
    from prl.training.config import TrainConfig

    record = {f.name: f.default for f in dataclasses.fields(VerifierSettings)}
    assert set(record) >= {"verifier_workers", "verify_timeout_s"}
    configs = {"eval": EvalConfig(model=str(tmp_path)), "import": ImportConfig(files=("f",), dataset="amc23"),
               "rescore": RescoreConfig(db="s", run="r"), "train": TrainConfig(model="m")}
    for name, cfg in configs.items():
        assert VerifierSettings.of(cfg) == VerifierSettings(), name
        assert {k: getattr(cfg, k) for k in record} == record, name
    for command in ("eval", "import", "rescore"):
        options = _options([command])
        assert {k: options[k].default for k in record} == record, command
    s = VerifierSettings(verifier_workers=1, verify_timeout_s=2)
    assert s.wall_s == VerifierSettings.WALL_FACTOR * 2 and s.manifest()["wall_s"] == 6
    assert VerifierSettings.of(EvalConfig(model=str(tmp_path), verifier_workers=1, verify_timeout_s=2)) == s
    import inspect

    pool = inspect.signature(VerifierPool).parameters
    assert (pool["workers"].default, pool["timeout_s"].default) == (record["verifier_workers"],
                                                                     record["verify_timeout_s"])


# ─── quick answers: building the parser loads no heavy library (issue 29) ─────────────────────

def test_building_every_commands_parser_imports_no_torch_prefect_or_vllm():
    """`prl --help` and `prl sql` answer at once (bench/cli.py times them): building the whole parser imports none
    of the libraries that take seconds to load."""
    code = ("import sys; from prl_cli.main import build_parser; build_parser(); build_parser('sql'); "
            "print(sorted(m for m in ('torch', 'prefect', 'vllm', 'transformers', 'duckdb', 'pandas', 'math_verify') "
            "if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_help_lists_each_command_once_and_one_commands_parser_holds_only_it():
    from prl_cli.main import COMMANDS, build_parser, command_list

    text = run("--help").stdout
    for name in ("sql", "eval", "report", "verify"):
        assert len([line for line in text.splitlines() if line.split()[:1] == [name]]) == 1, (name, text)
    assert "positional arguments" not in text and text.startswith("usage: prl [-h] [-v] COMMAND ...")
    import argparse

    sub = next(a for a in build_parser("sql")._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == ["sql"]
    full = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert list(full.choices) == list(COMMANDS) and command_list(full) in text


def test_the_log_chunk_default_of_the_training_config_is_prl_cores():
    """TrainConfig writes the number out (prl_core.logprobs imports torch; the CLI's options come from TrainConfig)."""
    from prl.training.config import TrainConfig
    from prl_core.logprobs import DEFAULT_CHUNK_TOKENS

    assert TrainConfig().logprob_chunk_tokens == DEFAULT_CHUNK_TOKENS


# ─── one vocabulary across commands ──────────────────────────────────────────────────────────

RETIRED = {"--runs": "--run", "--run-id": "--run", "--datasets": "--dataset", "--timeout": "--timeout-s",
           "--no-progress": "--quiet", "--json": "--format json", "--study-id": "--study"}
"""Spellings of before issue 29 and what replaces them (rescore's --run-id: --new-run; verify's --timeout:
--verify-timeout-s)."""


def _leaves():
    import argparse

    from prl_cli.main import build_parser

    def walk(parser, path=()):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield path, parser
            return
        for name, sub in subs[0].choices.items():
            yield from walk(sub, (*path, name))

    return dict(walk(build_parser()))


def test_one_spelling_per_concept_in_every_command():
    """Shown options use one word per concept; the retired spellings are hidden; every command takes -v after its
    name; every command with a store calls it --db, defaulting to the same file (or to it when it exists)."""
    import argparse

    from prl.store.db import DEFAULT_STORE

    for path, parser in _leaves().items():
        shown = {s for a in parser._actions if a.help is not argparse.SUPPRESS for s in a.option_strings}
        assert not shown & set(RETIRED), (path, shown & set(RETIRED))
        assert {"-v", "--verbose"} <= shown, path
        db = next((a for a in parser._actions if "--db" in a.option_strings), None)
        if db is not None and path != ("demo",):  # the demo's store is OUT_DIR/store.duckdb
            assert db.default in (DEFAULT_STORE, None) and not db.required, path
            if db.default is None:
                assert DEFAULT_STORE in db.help or "runs/store.duckdb" in db.help or path == ("train",), path
        fmt = next((a for a in parser._actions if "--format" in a.option_strings), None)
        if path in (("sql",), ("report",)):
            assert fmt.choices == ("table", "csv", "json") and fmt.help, path


def test_old_spellings_still_work_and_say_the_new_one(capsys):
    from prl_cli.main import build_parser

    old = build_parser("eval").parse_args(["eval", "--model", "m", "--datasets", "amc23", "--run-id", "x",
                                           "--no-progress"])
    err = capsys.readouterr().err
    new = build_parser("eval").parse_args(["eval", "--model", "m", "--dataset", "amc23", "--run", "x", "--quiet"])
    assert (old.datasets, old.run_id, old.quiet) == (new.datasets, new.run_id, new.quiet) == (("amc23",), "x", True)
    assert "prl eval: --datasets is now --dataset" in err and "prl eval: --run-id is now --run" in err
    assert "prl eval: --no-progress is now --quiet" in err and capsys.readouterr().err == ""  # the new ones: silent
    cases = [(["report", "--runs", "a,b"], "run", "a,b", "--runs is now --run"),
             (["report", "--json"], "format", "json", "--json is now --format json"),
             (["sql", "--timeout", "3", "select 1"], "timeout_s", 3.0, "--timeout is now --timeout-s"),
             (["verify", "--gold", "1", "--response", "1", "--timeout", "2"], "verify_timeout_s", 2,
              "--timeout is now --verify-timeout-s"),
             (["rescore", "--run", "r", "--run-id", "n"], "new_run", "n", "--run-id is now --new-run"),
             (["study", "--config", "c", "--study-id", "s"], "study", "s", "--study-id is now --study"),
             (["train", "--config", "c", "--run-id", "t"], "run_id", "t", "--run-id is now --run"),
             (["train", "--config", "c", "--dry-run", "--json"], "format", "json", "--json is now --format json")]
    for argv, dest, value, said in cases:
        args = build_parser(argv[0]).parse_args(argv)
        assert getattr(args, dest) == value, argv
        assert f"prl {argv[0]}: {said} (the old spelling still works)" in capsys.readouterr().err, argv


def test_verbose_and_quiet_after_the_command_reach_the_log_routing(monkeypatch):
    from prl import log_routing
    from prl_cli import main as cli

    seen = {}
    real = log_routing.configure

    def spy(*a, **k):
        seen.update(verbose=k.get("verbose"), quiet=k.get("quiet"))
        return real(*a, **k)

    monkeypatch.setattr(log_routing, "configure", spy)
    for argv, want in ((["-v", "selfcheck"], (True, False)), (["selfcheck", "-v"], (True, False)),
                       (["selfcheck"], (False, False)), (["data", "synth", "--out", "/nonexistent/x", "-v"],
                                                         (True, False))):
        seen.clear()
        try:
            cli.main(argv)
        except OSError:
            pass  # data synth into a folder that cannot exist: only the switches matter here
        assert (seen["verbose"], seen["quiet"]) == want, argv
    args = cli.build_parser("eval").parse_args(["eval", "--model", "m", "-q", "-v"])
    assert args.quiet and args.verbose


# ─── verify: an unknown data set is refused; no verdict is exit status 1 ───────────────────────

def test_verify_refuses_an_unknown_data_set_and_says_when_it_reached_no_verdict():
    r = run("verify", "--dataset", "math5000", "--gold", "1", "--response", "\\boxed{1}")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "invalid choice: 'math5000'" in r.stderr and "math500" in r.stderr
    r = run("verify", "--dataset", "math500", "--gold", "1", "--response", "so \\boxed{1}")
    assert r.returncode == 0 and '"verdict": "correct"' in r.stdout
    r = run("verify", "--gold", "2", "--response", "so \\boxed{1}")
    assert r.returncode == 0 and '"verdict": "wrong"' in r.stdout
    from prl_cli.verify import UNDECIDED

    assert UNDECIDED == ("error", "timeout")


# ─── bad input: one line, exit status 2, before any flow starts ───────────────────────────────

def _no_flow_env(tmp_path) -> dict:
    """An environment in which a flow that started would fail differently (no Prefect API at this address)."""
    import os

    return {**os.environ, "PREFECT_API_URL": "http://127.0.0.1:9/api", "PREFECT_HOME": str(tmp_path / "prefect")}


def test_bad_inputs_are_one_line_and_exit_2_before_any_flow(tiny_model_dir, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    bad_rows = tmp_path / "rows.jsonl"
    bad_rows.write_text('{"problem": "1+1?"}\n{"problem": "2+2?"}\n')
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    parquet = tmp_path / "details.parquet"
    parquet.write_bytes(b"PAR1 not a store")
    model = str(tiny_model_dir)
    cases = [
        (["eval", "--model", model, "--dataset", str(empty), "--db", str(tmp_path / "s1" / "store.duckdb")],
         f"{empty}: no usable problems: it holds no rows", tmp_path / "s1"),
        (["eval", "--model", model, "--dataset", str(bad_rows), "--lenient", "--db", str(tmp_path / "s2" / "x.duckdb")],
         f"{bad_rows}: no usable problems: all 2 rows were bad and skipped (--lenient)", tmp_path / "s2"),
        (["eval", "--model", model, "--db", str(blocker / "sub" / "store.duckdb")],
         f"its folder {blocker / 'sub'} cannot be created ({blocker} is a file)", None),
        (["eval", "--model", model, "--db", str(tmp_path / "out.parquet")],
         "a store is a DuckDB file (e.g. runs/store.duckdb), not a .parquet file", None),
        (["eval", "--model", model, "--db", str(tmp_path / "out.jsonl")], "not a .jsonl file", None),
        (["sql", "--db", str(parquet), "select 1"], "not a .parquet file", None),
        (["report", "--db", str(parquet)], "not a .parquet file", None),
        (["eval", "--model", "Qwen/Qwen2.5-Math-1.5B"],
         "looks like a Hugging Face hub id, and prl downloads nothing: download it once (`hf download "
         "Qwen/Qwen2.5-Math-1.5B --local-dir models/Qwen2.5-Math-1.5B`)", None),
    ]
    for argv, said, folder in cases:
        r = subprocess.run([*PRL, *argv], capture_output=True, text=True, cwd=tmp_path, env=_no_flow_env(tmp_path),
                           timeout=120)
        assert r.returncode == 2, (argv, r.stderr)
        assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, (argv, r.stderr)
        assert said in r.stderr, (argv, r.stderr)
        assert r.stdout == "" and "Traceback" not in r.stderr
        if folder is not None:
            assert not (folder / "logs").exists() and not (folder / "store.duckdb").exists(), argv  # nothing left
    assert not (tmp_path / "out.parquet").exists() and not (tmp_path / "logs").exists()
    assert parquet.read_bytes() == b"PAR1 not a store"


# ─── run ids and formats on data the pipeline itself produced ────────────────────────────────

EXTERNAL = ROOT / "tests" / "data" / "external"


@pytest.fixture(scope="module")
def imported_store(tmp_path_factory):
    """The lighteval AIME 2024 file of tests/data/external imported by `prl import` with its default run id."""
    from prl_cli.main import main

    db = tmp_path_factory.mktemp("cli-import") / "store.duckdb"
    aime = next((EXTERNAL / "lighteval-saturn-1.5b").glob("details_*.parquet"))
    assert main(["import", str(aime), "--dataset", "aime24", "--db", str(db), "--quiet"]) == 0
    return db


def test_imported_run_ids_read_as_the_model_and_data_set(imported_store):
    import duckdb

    with duckdb.connect(str(imported_store), read_only=True) as con:
        (run_id, model), = con.execute("select run_id, model from runs").fetchall()
    assert re.fullmatch(r"import-saturn-1\.5b-aime24-[0-9a-f]{8}", run_id), run_id
    from prl.imports.run import default_run_id

    assert default_run_id([{"sha256": "0" * 64}], "_SATURN-1.5B", "aime24").startswith("import-saturn-1.5b-aime24-")


def test_report_prints_tables_csv_and_json_of_the_same_figures(imported_store):
    import csv
    import io
    import json

    r_csv, r_json, r_table = (run("report", "--db", str(imported_store), "--format", f) for f in ("csv", "json", "table"))
    assert r_csv.returncode == r_json.returncode == r_table.returncode == 0, r_csv.stderr
    rows = list(csv.DictReader(io.StringIO(r_csv.stdout)))
    scores = json.loads(r_json.stdout)["runs"][0]
    from prl.evaluation.report import SCORE_COLUMNS

    assert tuple(rows[0]) == SCORE_COLUMNS
    got = {(r["dataset"], r["metric"]): float(r["value"]) for r in rows}
    assert got[("aime24", "average@1")] == scores["datasets"][0]["average@1"]["value"]
    assert got[("micro", "pass@1")] == scores["aggregates"]["micro"]["pass@1"]["value"]
    assert len(rows) == len(scores["datasets"]) * 3 + 2 * 3  # average@1, pass@1, maj@1 per data set and aggregate
    assert f"{100 * got[('aime24', 'average@1')]:5.1f}" in r_table.stdout
    run_id = scores["run_id"]
    agree = run("report", "--db", str(imported_store), "--agreement", run_id, "--format", "csv")
    assert agree.returncode == 0 and agree.stdout.splitlines()[0].startswith("dataset,problem_id,sample_idx,verdict")
    paper = run("report", "--format", "csv")
    assert paper.returncode == 0 and paper.stdout.splitlines()[0].startswith("table,metric,base_model,method")
    assert len(paper.stdout.splitlines()) == 1 + 28


def test_sql_formats_and_default_store(imported_store, tmp_path):
    import json

    q = "select dataset, count(*) as n from samples group by 1"
    outs = {f: run("sql", "--db", str(imported_store), "--format", f, q) for f in ("table", "csv", "json")}
    assert all(r.returncode == 0 for r in outs.values())
    assert json.loads(outs["json"].stdout) == [{"dataset": "aime24", "n": 30}]
    assert outs["csv"].stdout.splitlines() == ["dataset,n", "aime24,30"]
    assert outs["table"].stdout.splitlines()[-1] == "(1 row)"
    r = subprocess.run([*PRL, "sql", q], capture_output=True, text=True, cwd=tmp_path, timeout=120)  # no runs/ here
    assert r.returncode == 2 and r.stderr == "error: runs/store.duckdb: no such store (create one with `prl eval " \
                                             "--db runs/store.duckdb …`)\n"


def test_the_default_eval_run_id_names_the_model_and_data_sets(tiny_model_dir, tmp_path):
    from prl.evaluation.config import EvalConfig

    data = tmp_path / "My Problems.jsonl"
    data.write_text('{"problem": "1+1?", "answer": "2"}\n')
    one = EvalConfig(model=str(tiny_model_dir), datasets=("math500", "amc23"), n=4)
    assert re.fullmatch(r"model-amc23\+math500-vllm-n4-[0-9a-f]{8}", one.resolved_run_id()), one.resolved_run_id()
    assert one.resolved_run_id() == EvalConfig(model=str(tiny_model_dir), datasets=("amc23", "math500:5"),
                                               n=4).resolved_run_id()  # order and :K do not make another run
    other = EvalConfig(model=str(tiny_model_dir), datasets=(str(data),), n=4).resolved_run_id()
    assert other.startswith("model-my-problems-vllm-n4-") and other != one.resolved_run_id()
    five = EvalConfig(model=str(tiny_model_dir), datasets=("math500", "minerva_math", "olympiad_bench", "aime24",
                                                           "amc23"), n=4).resolved_run_id()
    assert five.startswith("model-aime24+amc23+3more-vllm-n4-")


# ─── progress bars: only on a terminal, none with --quiet ────────────────────────────────────

def test_progress_bars_only_on_a_terminal(monkeypatch):
    import argparse
    import io

    from prl_cli.common import show_progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not show_progress(argparse.Namespace(quiet=False))  # a pipe or a log file: no \r lines
    monkeypatch.setattr(sys, "stderr", Tty())
    assert show_progress(argparse.Namespace(quiet=False)) and not show_progress(argparse.Namespace(quiet=True))


# ─── Ctrl-C during `prl eval`, as a terminal sends it: SIGINT to the whole process group ──────────

@pytest.mark.e2e
def test_ctrl_c_during_eval_is_one_line_exit_130_and_the_rerun_resumes(tiny_model_dir, tmp_path):
    """The terminal's SIGINT reaches the command, Prefect's temporary server and the verifier workers alike. The
    helpers ignore it (prl.signals); the command records the crashed flow run, stops them and prints one line.
    (bench/cli.py times it; measured here: the exit status, the console, no helper left, nothing stored lost.)"""
    import os
    import signal
    import time

    import psutil
    from procs import cmdline

    from prl.store.db import Store

    pytest.importorskip("vllm")
    db = tmp_path / "store" / "s.duckdb"
    cmd = [*PRL, "eval", "--model", str(tiny_model_dir), "--dataset", "synth_test:12", "--n", "2", "--max-tokens",
           "16", "--chunk", "4", "--db", str(db), "--run", "ctrlc"]
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}  # the temporary server, as users get it
    env["PREFECT_LOGGING_LEVEL"] = "INFO"

    def stored() -> list[tuple]:
        return Store(db, create=False).rows("samples_with_gold_for_run", run_id="ctrlc") if db.exists() else []

    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 500
        before: list[tuple] = []
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                before = stored()
            except Exception:  # the store is being created
                before = []
            if before:
                break
            time.sleep(0.1)
        assert before and proc.poll() is None, "the run ended before a chunk was stored"
        helpers = psutil.Process(proc.pid).children(recursive=True)
        names = " ".join(" ".join(cmdline(p)) for p in helpers)
        assert "uvicorn" in names and "spawn_main" in names, names  # the API server and the verifier workers
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    assert err.rstrip("\n").splitlines()[-1] == "interrupted (rerun the same command to resume)"
    for noise in ("Traceback", "KeyboardInterrupt", "Crash detected", "Connection refused", "Error"):
        assert noise not in err, err
    gone, alive = psutil.wait_procs(helpers, timeout=30)
    assert alive == [], [p.cmdline() for p in alive]
    after = stored()
    assert set(before) <= set(after) and len(after) % 8 == 0  # whole chunks (4 problems × 2 samples), none lost
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=500)
    assert r.returncode == 0, r.stderr
    assert "run ctrlc (resumed)" in r.stderr
    final = stored()
    assert len(final) == 24 and set(after) <= set(final)


def test_the_warm_starts_sft_bar_follows_progress(tiny_model_dir, tmp_path, monkeypatch):
    """`--quiet` (progress False) silences the SFT bar of the warm start; with progress it is drawn on a terminal
    only (tqdm's own check), never as \\r lines into a log. The real training loop runs (3 steps); the held-out
    accuracy before and after, which has no bar and costs a minute of generation on a busy machine, is 0 here."""
    import io

    from prl.training import sft
    from prl.training.sft import SFTConfig, run_sft

    monkeypatch.setattr(sft, "held_out_accuracy", lambda *a, **k: 0.0)

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    cfg = SFTConfig(steps=3, batch_size=4, warmup_steps=1, train_size=16, eval_size=2)
    drawn = {}
    for progress, stream in ((True, Terminal()), (False, Terminal()), (True, io.StringIO())):
        monkeypatch.setattr(sys, "stderr", stream)
        run_sft(tiny_model_dir, tmp_path / f"out-{progress}-{type(stream).__name__}", cfg, log=lambda m: None,
                progress=progress)
        drawn[(progress, type(stream).__name__)] = "sft:" in stream.getvalue() or "step/s" in stream.getvalue()
    assert drawn == {(True, "Terminal"): True, (False, "Terminal"): False, (True, "StringIO"): False}


def _readme_commands() -> list[list[str]]:
    """Every `prl …` command line of README.md's code blocks (continuations joined, comments dropped), split as a
    shell splits it; placeholders (`...`) left out."""
    import shlex

    commands, block, line_so_far = [], False, ""
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            block = not block
            continue
        if not block:
            continue
        line_so_far += line.strip()
        if line_so_far.endswith("\\"):
            line_so_far = line_so_far[:-1] + " "
            continue
        text, line_so_far = line_so_far, ""
        for part in text.split("&&"):
            if not part.strip().startswith(("prl ", ".venv/bin/prl ")):
                continue  # other shell lines and the code of other languages
            words = shlex.split(part, comments=True)
            if "..." not in words:
                commands.append(words[1:])
    return commands


def test_every_prl_command_of_the_readme_parses_in_todays_spelling(capsys):
    from prl_cli.main import build_parser

    commands = _readme_commands()
    assert len(commands) >= 25 and ["report", "--db", "runs/store.duckdb", "--run", "A,B"] in commands
    for argv in commands:
        build_parser(argv[0]).parse_args(argv)  # an unknown option: SystemExit
        said = capsys.readouterr().err
        assert said == "", (argv, said)  # no old spelling ("… is now …")
