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
    from prl.options import field_docs
    from prl.training.config import OVERRIDES, TrainConfig
    from prl.training.sft import SFTConfig
    from prl_cli import demo, eval_, model

    cases = [(["eval"], EvalConfig, eval_.OPTIONS, "value"), (["model", "sft"], SFTConfig, model.SFT_OPTIONS, "value"),
             (["demo"], PipelineConfig, demo.OPTIONS, None), (["train"], TrainConfig, OVERRIDES, None)]
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
