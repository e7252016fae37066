"""The `prl` console script, run as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


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
    assert "bad.yaml: step_split: only used by the PRL estimator" in r.stderr
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
    return {a.dest: a for a in parser._actions}


def test_eval_sft_demo_and_train_options_are_their_configs_fields():
    import dataclasses

    from flows.config import PipelineConfig
    from prl.evaluation.config import EvalConfig
    from prl.options import field_docs, flag_names
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
            if action.option_strings[0] != "--" + name.replace("_", "-"):  # a negating switch (--lenient)
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

    args = build_parser().parse_args(["eval", "--model", "m", "--datasets", "amc23,math500:5", "--chunk", "4",
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
    from prl.training.config import OVERRIDES, SFTConfig
    from prl_cli import (common, config, dashboard, data, demo, generate, model, report, selfcheck, sql, study,
                         train, verify)

    cases = {("eval",): (EvalConfig, common.ProgressOptions), ("import",): (ImportConfig, common.ProgressOptions),
             ("rescore",): (RescoreConfig, common.ProgressOptions),
             ("generate",): (generate.GenerateOptions, SamplingConfig), ("demo",): (PipelineConfig, demo.DemoOptions),
             ("study",): (study.StudyOptions,), ("report",): (report.ReportOptions,), ("sql",): (sql.SqlOptions,),
             ("verify",): (verify.VerifyOptions,), ("dashboard",): (dashboard.DashboardOptions,),
             ("selfcheck",): (selfcheck.SelfcheckOptions,), ("config", "check"): (config.CheckOptions,),
             ("data", "synth"): (data.SynthOptions,), ("model", "build-tiny"): (model.BuildTinyOptions,),
             ("model", "sft"): (model.SFTPaths, SFTConfig),
             ("model", "import"): (model.ImportSource, model.ImportTarget)}
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
    assert train_options == {"config", "resume", *OVERRIDES, *flag_names(common.ProgressOptions),
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
