"""The SFT warm start: it learns the task, and the saved model keeps its accuracy."""

from __future__ import annotations

import json

import pytest

from prl.manifest import MANIFEST_KEYS
from prl.training.sft import SFTConfig, held_out_accuracy, held_out_records

pytestmark = pytest.mark.e2e

from conftest import WARM_SFT as CFG  # noqa: E402


@pytest.fixture(scope="module")
def warm(warm_model):
    return warm_model


def test_warm_start_raises_held_out_accuracy(warm):
    out, report = warm
    # The random model never writes a boxed answer; 300 steps measured 0.165 greedy on 200 problems.
    assert report["accuracy_before_greedy"] <= 0.02
    assert report["accuracy_after_greedy"] >= report["accuracy_before_greedy"] + 0.07
    assert report["steps"] == CFG.steps and report["final_loss"] < 1.0
    saved = json.loads((out / "sft_report.json").read_text())
    assert saved["accuracy_after_greedy"] == report["accuracy_after_greedy"]
    assert json.loads((out / "prl_model.json").read_text())["sft"]["steps"] == CFG.steps


def test_saved_and_reloaded_model_keeps_its_accuracy(warm):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, report = warm
    model = AutoModelForCausalLM.from_pretrained(str(out))
    tok = AutoTokenizer.from_pretrained(str(out))
    assert held_out_accuracy(model, tok, held_out_records(CFG)) == report["accuracy_after_greedy"]


def test_report_records_what_reproduces_the_run(warm):
    _, report = warm
    assert report["config"]["seed"] == CFG.seed and report["config"]["steps"] == CFG.steps
    manifest = report["manifest"]
    assert set(MANIFEST_KEYS) <= set(manifest) and manifest["kind"] == "sft" and manifest["seed"] == CFG.seed
    assert manifest["packages"]["torch"] and manifest["packages"]["transformers"]
    assert len(manifest["git"]["commit"] or "") in (0, 40)
    assert manifest["machine"]["torch_threads"] and manifest["machine"]["torch_cpu_capability"]


def test_direct_frac_writes_that_share_of_solutions_without_the_working(tiny_model_dir):
    from transformers import AutoTokenizer

    from prl.data import synthetic
    from prl.training.sft import _examples

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    records = synthetic.generate("train", 400, seed=0)
    responses = [tok.decode(r, skip_special_tokens=True) for _, r in _examples(tok, records, 0.5, seed=0)]
    direct = [resp for resp in responses if not synthetic.shows_working(resp)]
    assert 160 <= len(direct) <= 240  # Binomial(400, 0.5): outside this range has probability < 1e-4
    by_answer = {synthetic.direct_solution(r) for r in records}
    assert all(d.strip() in by_answer for d in direct)  # exactly "The answer is \boxed{N}."
    again = [tok.decode(r, skip_special_tokens=True) for _, r in _examples(tok, records, 0.5, seed=0)]
    assert again == responses  # seeded
    plain = [tok.decode(r, skip_special_tokens=True) for _, r in _examples(tok, records)]
    assert all(synthetic.shows_working(p) for p in plain)
    with pytest.raises(Exception, match="direct_frac: expected a fraction in"):
        SFTConfig(direct_frac=1.0)
