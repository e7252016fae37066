"""The dashboard: pure chart functions, data functions on a seeded store with hand-computed
numbers, every page through Streamlit's AppTest (asserting what is shown), a concurrent writer,
and a real headless-Chromium check of the running app."""

from __future__ import annotations

import json

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dashboard_seed import REPEATED, SCRIPT, add_repeating_run, add_study, seed  # noqa: E402
from procs import listening_addresses  # noqa: E402

from dashboard import charts, data  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "dashboard" / "pages"


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return seed(tmp_path_factory.mktemp("dash") / "store.duckdb")


@pytest.fixture(scope="module")
def db_repeating(tmp_path_factory):
    """The seeded store plus a training run whose two inspected rollouts at step 2 are identical, and a study."""
    return add_study(add_repeating_run(seed(tmp_path_factory.mktemp("dash_rep") / "store.duckdb")))


FORMATS = ROOT / "tests" / "data" / "formats"


@pytest.fixture(scope="module")
def db_imports(tmp_path_factory):
    """The seeded store plus runs of every other kind made by the pipeline itself: two tool-made files imported
    (lm-eval's and Inspect's own outputs on the same 20 synthetic problems, 2 responses each) and a rescore of one."""
    from prl.evaluation.rescore import rescore_run
    from prl.grading.verifier import VerifierSettings
    from prl.imports.run import ImportConfig, run_import

    db = seed(tmp_path_factory.mktemp("dash_imports") / "store.duckdb")
    for run_id, path in (("lm_eval", next((FORMATS / "lm_eval").glob("samples_*.jsonl"))),
                         ("inspect", FORMATS / "inspect" / "prl_synth_tiny_warm.eval")):
        run_import(ImportConfig(files=(str(path),), dataset="synth_test", db=db, run_id=run_id, verifier_workers=1),
                   progress=False, log=lambda *_: None)
    rescore_run(db, "inspect", verifier=VerifierSettings(verifier_workers=1), progress=False, log=lambda *_: None)
    return db


def _app(db, monkeypatch, name: str, query: dict | None = None):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv(data.DB_ENV, db)
    at = AppTest.from_file(str(PAGES / f"{name}.py"), default_timeout=60)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.fixture
def page(db, monkeypatch):
    return lambda name, query=None: _app(db, monkeypatch, name, query)


# ─── charts: DataFrame → Figure ─────────────────────────────────────────────────────────────

def test_scores_chart_values_and_error_bars():
    df = pd.DataFrame({"run_id": ["a", "a", "b"], "dataset": ["x", "y", "x"], "metric": ["average"] * 3,
                       "k": [4] * 3, "value": [0.5, 0.25, 0.75], "lo": [0.4, 0.1, 0.7], "hi": [0.6, 0.3, 0.9]})
    fig = charts.scores_by_dataset(df, "average")
    assert [t.name for t in fig.data] == ["a", "b"]
    assert list(fig.data[0].y) == [50.0, 25.0] and list(fig.data[0].error_y.array) == pytest.approx([10.0, 5.0])
    assert list(fig.data[0].error_y.arrayminus) == pytest.approx([10.0, 15.0])
    empty = charts.scores_by_dataset(df, "pass")
    assert not empty.data and "no scores" in empty.layout.annotations[0].text


def test_comparison_and_training_charts():
    d = pd.DataFrame({"dataset": ["x", "y"], "diff": [0.1, -0.2], "lo": [0.0, -0.3], "hi": [0.2, -0.1]})
    fig = charts.deltas(d, "A", "B")
    assert list(fig.data[0].y) == pytest.approx([10.0, -20.0]) and fig.data[0].marker.color == ("#2a9d8f", "#e76f51")
    sets = pd.DataFrame({"dataset": ["x"], "gained": [2], "lost": [1], "both": [3], "neither": [4]})
    assert [t.name for t in charts.success_sets(sets).data] == ["gained", "lost", "both", "neither"]
    m = pd.DataFrame({"run_id": ["r"] * 3, "step": [1, 2, 3], "name": ["reward/mean"] * 3, "value": [0.1, 0.2, 0.3]})
    ev = pd.DataFrame({"run_id": ["r"], "step": [3], "dataset": ["synth_test"], "average": [0.4]})
    fig = charts.training_curves(m, "reward/mean", ev)
    assert list(fig.data[0].y) == [0.1, 0.2, 0.3] and list(fig.data[1].y) == [0.4]
    curve = charts.pass_at_k_curve(pd.DataFrame({"run_id": ["r", "r"], "k": [1, 2], "value": [0.2, 0.3]}))
    assert list(curve.data[0].y) == pytest.approx([20.0, 30.0])


def test_segment_chart_shows_each_segments_text_and_rho_scale():
    """One bar per segment, labelled by the segment's own text (escaped: plotly reads markup), of length ρ, on a
    diverging colour scale symmetric about 0 with a ρ colour bar."""
    segs = pd.DataFrame({"start_tok": [0, 2], "end_tok": [1, 3], "kl_to_go": [0.2, 0.1], "rho": [0.5, -0.25]})
    fig = charts.segment_weights(["<scr", "ipt>", " a", "b"], segs)
    bar = fig.data[0]
    assert len(fig.data) == 1 and list(bar.y) == ["0: &lt;script&gt;", "1: ab"] and list(bar.x) == [0.5, -0.25]
    assert "&lt;script&gt;" in bar.hovertext[0] and "<script>" not in bar.hovertext[0] and "S = 0.200" in bar.hovertext[0]
    assert (bar.marker.cmin, bar.marker.cmax) == (-0.5, 0.5) and bar.marker.colorbar.title.text == "ρ"
    same = charts.segment_weights(["x"] * 4, segs.assign(rho=[0.0, 0.0]))  # identical texts stay two bars
    assert len(set(same.data[0].y)) == 2


def test_runs_get_distinct_colours_and_verdicts_one_colour_everywhere():
    """Two runs are never drawn in two blues (Streamlit's palette starts dark blue, light blue), a run's evaluation
    points take its curve's colour, and a verdict has the same colour whichever verdicts a store holds."""
    from prl.grading.verifier import VERDICTS

    assert tuple(charts.VERDICT_COLORS) == VERDICTS
    m = pd.DataFrame({"run_id": ["a", "a", "b", "b"], "step": [1, 2, 1, 2], "name": ["reward/mean"] * 4,
                      "value": [0.1, 0.2, 0.3, 0.4]})
    ev = pd.DataFrame({"run_id": ["b"], "step": [2], "dataset": ["synth_test"], "average": [0.5]})
    fig = charts.training_curves(m, "reward/mean", ev)
    line_a, line_b, point_b = (t.line.color if t.mode == "lines" else t.marker.color for t in fig.data)
    assert line_a != line_b and point_b == line_b and {line_a, line_b} == set(charts.RUN_COLORS[:2])
    rgb = [tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)) for c in charts.RUN_COLORS]
    dist = lambda p, q: sum(abs(x - y) for x, y in zip(p, q))  # noqa: E731
    assert min(dist(p, q) for i, p in enumerate(rgb) for q in rgb[i + 1:]) > 60  # no two alike
    assert min(dist(p, q) for p, q in zip(rgb, rgb[1:])) > 200  # runs drawn one after the other: far apart
    one = pd.DataFrame({"run_id": ["r"] * 2, "dataset": ["d"] * 2, "verdict": ["correct", "wrong"], "samples": [3, 1]})
    two = pd.DataFrame({"run_id": ["r"] * 3, "dataset": ["d"] * 3, "verdict": ["no_answer", "timeout", "wrong"],
                        "samples": [1, 1, 2]})
    colour = lambda fig, v: next(t.marker.color for t in fig.data if t.name == v)  # noqa: E731
    assert colour(charts.verdict_bars(one), "wrong") == colour(charts.verdict_bars(two), "wrong") == "#e76f51"


def test_verdict_chart_shows_shares_per_data_set():
    """A data set of 1,600 samples and one of 40 read alike: each bar is the share of its (run, data set)."""
    df = pd.DataFrame({"run_id": ["r"] * 4, "dataset": ["big", "big", "small", "small"],
                       "verdict": ["correct", "wrong", "correct", "wrong"], "samples": [400, 1200, 30, 10]})
    fig = charts.verdict_bars(df)
    share = {t.name: dict(zip(t.x, t.y)) for t in fig.data}
    assert share["correct"] == {"r · big": 25.0, "r · small": 75.0} and share["wrong"] == {"r · big": 75.0,
                                                                                         "r · small": 25.0}
    assert [list(c) for c in fig.data[0].customdata] == [[400, 1600], [30, 40]]  # the counts, in the hover
    assert fig.layout.yaxis.range == (0, 100)


# ─── math typeset (dashboard.math_text) ─────────────────────────────────────────────────────

def _outside_texts() -> tuple[list[str], list[str]]:
    """(prose, answers): every bundled problem, raw gold field and response in tests/data/external; every
    normalised gold and raw gold field (typeset whole where it can be)."""
    import json as _json

    from dashboard.math_text import decode_gold
    from prl.data.datasets import BENCHMARKS, load_dataset

    texts, answers = [], []
    for name in BENCHMARKS:
        for p in load_dataset(name, flag_raw_only=False)[0]:
            texts += [p.problem, decode_gold(p.gold_raw)]
            answers += [p.gold_normalized, decode_gold(p.gold_raw)]
    ext = ROOT / "tests" / "data" / "external"
    for line in (ext / "jsonl-qwen2.5-math-1.5b-r1zero" / "results.jsonl").read_text().splitlines():
        texts.append(_json.loads(line)["response"])
    for row in _json.loads((ext / "amc-json-deepseek-r1-distill-qwen-1.5b" / "amc_output.json").read_text()):
        texts += list(row["generated_output"]) if isinstance(row["generated_output"], list) else [row["generated_output"]]
    details = pd.read_parquet(next((ext / "lighteval-saturn-1.5b").glob("details_*.parquet")))
    texts += [str(x) for preds in details["predictions"] for x in preds]
    return texts, answers


def _math_candidates(texts: list[str], answers: list[str]) -> list[tuple[str, bool]]:
    from dashboard import math_text

    out = [(a.strip(), False) for a in answers]
    for t in texts:
        out += [(value, display) for kind, value, display, _src in math_text._raw_fragments(t) if kind == "math"]
    return sorted(set(out))


needs_node = pytest.mark.skipif(not __import__("katex_oracle").available(),
                                reason="needs node (Streamlit's own KaTeX is the oracle)")


@needs_node
def test_katex_ok_never_passes_what_streamlits_katex_refuses():
    """Every math fragment of every bundled problem and gold and of the outside responses: each one
    katex_ok accepts renders in the KaTeX that st.markdown uses (no red ParseError), and it accepts
    nearly all that KaTeX takes (the rest is shown as text)."""
    from dashboard.math_text import katex_ok
    from katex_oracle import katex_errors

    items = _math_candidates(*_outside_texts())
    version, errors = katex_errors(items)
    accepted = [katex_ok(v, d) for v, d in items]
    false_pass = [(v, e) for (v, _d), ok, e in zip(items, accepted, errors) if ok and e]
    assert not false_pass, (version, false_pass[:5])
    renderable = sum(e is None for e in errors)
    typeset = sum(ok for ok in accepted)
    assert len(items) > 10_000 and typeset >= 0.99 * renderable, (typeset, renderable)
    assert len(items) - renderable > 100  # the check is not vacuous: KaTeX refuses some, and so do we


@needs_node
def test_katex_ok_on_broken_math():
    """Fragments of the bundled problems broken at random (a brace, a script, an environment, an ampersand, an
    infix operator … inserted or removed): none that katex_ok accepts makes KaTeX fail."""
    import random

    from dashboard import math_text
    from katex_oracle import katex_errors
    from prl.data.datasets import load_dataset

    good = [(v, d) for p in load_dataset("math500", flag_raw_only=False)[0] + load_dataset("olympiad_bench", flag_raw_only=False)[0]
            for kind, v, d, _s in math_text._raw_fragments(p.problem) if kind == "math" and math_text.katex_ok(v, d)]
    pieces = ["^", "_", "{", "}", "&", "\\\\", "\\left(", "\\right)", "'", "\\limits", "\\frac", "\\sqrt", "[", "]",
              "\\text{", "\\begin{matrix}", "\\end{matrix}", "\\over", "#", "%", "\\", " ", "\\mathrm", "\\not",
              "\\big", "\\hline", "\\tag{1}", "\\hspace{", "pt}", "\\\\[", "\\sum", "\\operatorname{", "\\middle|",
              "\\end{aligned}", "\\begin{aligned}", "$", "\\{", "\\}", "\\,", "\\AA", "\\iff", "''"]
    rng = random.Random(0)
    mutants = []
    for _ in range(6000):
        v, d = rng.choice(good)
        for _ in range(rng.randint(1, 3)):
            i = rng.randint(0, len(v))
            v = v[:i] + v[i + rng.randint(1, 3):] if rng.random() < 0.4 else v[:i] + rng.choice(pieces) + v[i:]
        mutants.append((v, d))
    accepted = [m for m in mutants if math_text.katex_ok(*m)]
    _version, errors = katex_errors(accepted)
    assert 1000 < len(accepted) < len(mutants) and not [(m, e) for m, e in zip(accepted, errors) if e][:5]


def test_fragments_split_prose_and_fall_back_per_fragment():
    from dashboard.math_text import fragments

    f = fragments("Costs $5 and $6; so $x^2$ and \\(y\\), \\[z\\] $$w$$ and \\boxed{\\frac{1}{2}} but $x^2^3$.")
    assert [(x.kind, x.value, x.display) for x in f if x.kind == "math"] == [
        ("math", "x^2", False), ("math", "y", False), ("math", "z", True), ("math", "w", True),
        ("math", "\\boxed{\\frac{1}{2}}", False)]
    assert "Costs $5 and $6; so " == f[0].value and f[-1] == fragments(" but $x^2^3$.")[0]  # refused: text as written
    env = fragments("We have\n\\begin{align*} a &= b \\\\ c &= d \\end{align*}\nso")
    assert [x.kind for x in env] == ["text", "math", "text"] and env[1].display
    # a whole minerva solution: the parts KaTeX takes are typeset, the rest is text; nothing is lost
    from prl.data.datasets import load_dataset

    from dashboard.math_text import decode_gold

    for p in load_dataset("minerva_math", flag_raw_only=False)[0][:40]:
        raw = decode_gold(p.gold_raw)
        assert "".join(x.source for x in fragments(raw)) == raw


def test_markdown_of_untrusted_text_is_that_text():
    """The Markdown made of hostile text renders (by a CommonMark + GFM renderer) as the same text: no HTML,
    emphasis, link, autolink, image, list, heading, table or code from it; math where it was math."""
    import html
    import re

    mdit = pytest.importorskip("markdown_it")
    dollarmath = pytest.importorskip("mdit_py_plugins.dollarmath").dollarmath_plugin
    from dashboard.math_text import NBSP, ZWSP, answer_markdown, escape_text, to_markdown

    md = mdit.MarkdownIt("commonmark", {"linkify": True}).enable(["table", "strikethrough", "linkify"]).use(
        dollarmath, allow_space=True, allow_digits=True, double_inline=True)
    hostile = ("<script>document.title='pwned'</script> <b>b</b> **s** _e_ [l](http://e.com) ![i](x.png) "
               "www.example.com a@b.com http://x.y :smile: :red[x] :material/home: -> >= `c` &amp; \\$ 5$ "
               "~~s~~ <!-- c -->")
    for text in (hostile, "# h\n1. one\n- two\n> q\n    code\n| a | b |\n|---|---|\n***\n\n```\nx\n```"):
        out = md.render(to_markdown(text))
        assert not re.search(r"<(?!/?(p|br)\b)[a-z]", out), out  # only paragraphs and line breaks
        shown = html.unescape(re.sub(r"<[^>]+>", "", out)).replace(ZWSP, "").replace(NBSP, " ")
        assert re.sub(r"\s+", " ", shown).strip() == re.sub(r"\s+", " ", text).strip()
    out = md.render(to_markdown("so $\\frac{1}{2}$, then\n\\[x^2\\]\nand \\boxed{3}."))
    assert out.count('class="math') == 3 and "\\frac{1}{2}" in out
    assert escape_text("a\n  b") == "a\\\n" + NBSP * 2 + "b"  # line breaks and indentation kept
    assert answer_markdown("\\frac{14}{3}") == "$\\frac{14}{3}$" and answer_markdown("\\text{Evelyn}") == "$\\text{Evelyn}$"
    assert answer_markdown("3 inches") == "3 inches" and answer_markdown("62.5%") == "62\\.5\\%"
    assert answer_markdown("x^2^3") == "x\\^2\\^3" and answer_markdown(None) == ""


# ─── data functions on the seeded store ──────────────────────────────────────────────────────

def test_scores_match_hand_computation(db):
    per_ds, agg = data.scores(db, ["base", "prl"], 4)
    avg = per_ds[per_ds.metric == "average"].set_index(["run_id", "dataset"])["value"]
    assert avg[("base", "math500")] == pytest.approx(1 / 12) and avg[("base", "amc23")] == pytest.approx(0.5)
    assert avg[("prl", "math500")] == pytest.approx(0.5) and avg[("prl", "amc23")] == pytest.approx(1.0)
    micro = agg[(agg["aggregate"] == "micro") & (agg["metric"] == "average")].set_index("run_id")["value"]
    assert micro["base"] == pytest.approx(0.25) and micro["prl"] == pytest.approx(0.7)
    macro = agg[(agg["aggregate"] == "macro") & (agg["metric"] == "average")].set_index("run_id")["value"]
    assert macro["base"] == pytest.approx((1 / 12 + 0.5) / 2)
    curve = data.pass_at_k_curve(db, ["prl"])
    assert curve["k"].tolist() == [1, 2, 3, 4] and curve["value"].iloc[-1] == pytest.approx(0.8)


def test_compare_sets_and_problems(db):
    c = data.compare(db, "base", "prl")
    assert c["summary"]["gained"] == ["math500/1", "amc23/0"] or sorted(c["summary"]["gained"]) == ["amc23/0", "math500/1"]
    assert c["summary"]["lost"] == []
    sets = c["sets"].set_index("dataset")
    assert sets.loc["math500", "gained"] == 1 and sets.loc["math500", "both"] == 1 and sets.loc["math500", "neither"] == 1
    assert sets.loc["amc23", "gained"] == 1 and sets.loc["amc23", "both"] == 1
    rates = c["problems"].set_index("problem_id")
    assert rates.loc["math500/1", "rate_a"] == 0 and rates.loc["math500/1", "rate_b"] == 0.5


def test_problem_failures_training_data(db):
    info, samples = data.problem(db, "amc23", "amc23/0", ["base", "prl"])
    assert info["gold_normalized"] == "0" and info["meta"]["gold_flag"] == "raw_only" and len(samples) == 8
    counts = data.verdict_counts(db, ["base"]).set_index(["dataset", "verdict"])["samples"]
    assert counts[("math500", "no_answer")] == 1 and counts[("math500", "correct")] == 1
    sus = data.suspicious_passes(db, ["prl", "train-prl@step5"])
    assert sus.iloc[0]["answer_only"] and ("prl", "amc23/0", 0) in set(zip(sus.run_id, sus.problem_id, sus.sample_idx))
    assert len(data.train_metrics(db, ["train-prl"])) == 18
    al = data.train_alerts(db, ["train-prl"])
    assert al[["step", "monitor", "metric", "action"]].values.tolist() == [[4, "entropy_collapse", "actor/entropy", "warn"]]
    ev = data.eval_points(db, ["train-prl"])
    assert ev[["step", "average"]].values.tolist() == [[5, 0.75]]
    ro, segs = data.rollouts(db, "train-prl", 5)
    assert len(ro) == 1 and segs["rho"].tolist() == pytest.approx([0.5, 0.1, -0.3])
    runs = data.runs(db).set_index("run_id")
    assert runs.loc["train-prl", "estimator"] == "prl" and runs.loc["train-prl", "eta"] == 20
    assert runs.loc["train-prl@step5", "parent_run"] == "train-prl"


# ─── every page through AppTest, asserting what it shows ──────────────────────────────────────

def test_runs_page(page):
    at = page("runs")
    runs = at.dataframe[0].value
    assert set(runs["run_id"]) == {"base", "prl", "train-prl", "train-prl@step5"}
    ref = at.dataframe[1].value
    assert (ref["check"] == "MISMATCH").sum() == 1 and ref["source"].str.startswith("paper").all()


def test_scores_page_shows_the_numbers(page):
    at = page("scores")
    shown = " ".join(str(x) for df in at.dataframe for x in df.value.to_numpy().ravel())
    assert "25.0 [" in shown and "70.0 [" in shown  # micro average@4 of base and prl
    assert "8.3 [" in shown and "100.0 [" in shown  # base math500, prl amc23
    assert len(at.get("plotly_chart")) == 3


def test_compare_page(page):
    at = page("compare")
    at.selectbox[0].set_value("base")
    at.selectbox[1].set_value("prl")
    at.run()
    assert not at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["gained / lost"] == "2 / 0" and metrics["common problems"] == "5"
    assert metrics["Δ average@n (pp)"] == "+45.0"


def test_problem_page_shows_untrusted_text_as_text(page):
    """Typeset (the default): the response's math as math, the rest escaped Markdown that shows as written (no
    HTML allowed on any element); with the sidebar toggle off, the same text verbatim through st.text."""
    from dashboard.math_text import to_markdown

    at = page("problem", {"dataset": "math500", "problem_id": "math500/1", "runs": "base"})
    shown = [m.value for m in at.markdown]
    assert to_markdown(SCRIPT) in shown and "$\\boxed{7}$" in to_markdown(SCRIPT)
    assert not any(SCRIPT in m or "<script>" in m or "<b>" in m for m in shown)
    assert not any(m.proto.allow_html for m in at.markdown) and not any(c.proto.allow_html for c in at.caption)
    assert any("\\<i\\>html in a problem\\<\\/i\\>" in m for m in shown)
    at.sidebar.toggle[0].set_value(False).run()
    texts = [t.value for t in at.text]
    assert SCRIPT in texts  # rendered by st.text: shown verbatim, never as HTML or Markdown
    assert not any(SCRIPT in m.value for m in at.markdown)
    assert any("<i>html in a problem</i>" in t for t in texts)


def test_failures_page(page):
    at = page("failures")
    sus = at.dataframe[1].value
    assert ("prl", "amc23/0") in set(zip(sus.run_id, sus.problem_id))


def test_training_page(page):
    at = page("training")
    # reward/mean, actor/kl_ref, actor/entropy, pass@k during training + the segment view
    charts_ = at.get("plotly_chart")
    assert len(charts_) == 5
    alerts = at.dataframe[0].value
    assert alerts[["step", "monitor", "action"]].values.tolist() == [[4, "entropy_collapse", "warn"]]
    assert at.dataframe[1].value[["step", "average"]].values.tolist() == [[5, 0.75]]
    specs = [json.loads(c.proto.spec) for c in charts_]
    curves = [sp for sp in specs if sp["layout"].get("title", {}).get("text") in ("reward/mean", "actor/kl_ref",
                                                                                 "actor/entropy")]
    assert len(curves) == 3
    for sp in curves:  # the alert as a dashed line at its step on every curve, labelled by the monitor
        assert [(sh["x0"], sh["line"]["dash"]) for sh in sp["layout"]["shapes"]] == [(4, "dash")]
        assert [a["text"] for a in sp["layout"]["annotations"]] == ["entropy_collapse"]
    pk = next(sp for sp in specs if sp["layout"]["title"]["text"].startswith("pass@k during training"))
    def values(y):  # plotly writes arrays as typed arrays (dtype + base64 bytes)
        import base64

        import numpy as np
        return np.frombuffer(base64.b64decode(y["bdata"]), dtype=y["dtype"]).tolist() if isinstance(y, dict) else y

    assert sorted((d["name"], values(d["y"])) for d in pk["data"]) == [("train-prl pass@1", [0.75]),
                                                                        ("train-prl pass@4", [1.0])]


def test_training_page_with_identical_rollouts(db_repeating, monkeypatch):
    """Issue 14: two inspected rollouts of the same step with the same text and segments gave two
    identical segment charts (and 'show all' expanders), hence StreamlitDuplicateElementId."""
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv(data.DB_ENV, db_repeating)
    at = AppTest.from_file(str(PAGES / "training.py"), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    next(m for m in at.multiselect if m.label == "training runs").set_value(["train-rep"]).run()
    assert not at.exception, [e.value for e in at.exception]
    assert next(s for s in at.selectbox if s.label == "run").value == "train-rep"
    assert at.get("select_slider")[0].value == 2
    assert [e.label for e in at.expander if e.label.startswith("rollout")] == ["rollout 0 · reward 0",
                                                                               "rollout 1 · reward 0"]
    assert len(at.get("plotly_chart")) == 3  # the reward/mean curve + one segment chart per rollout
    from dashboard.math_text import to_markdown

    assert [m.value for m in at.markdown].count(to_markdown(REPEATED)) == 2  # each response in full, under "show all"


# ─── every run with samples, of every kind, on every page ─────────────────────────────────────

def test_runs_of_every_kind_with_source_and_lineage(db_imports):
    """The runs table on a store holding every kind: data sets, problems and n from the samples (imports have no
    sampling config), the source (file and tool of an import; a rescore's is its source run's), the lineage
    (training run and step; the run a rescore re-verified) and a link to the training run at that step."""
    from prl.evaluation.rescore import RESCORE
    from prl.imports.run import IMPORTED

    assert (data.IMPORTED, data.RESCORE) == (IMPORTED, RESCORE)
    runs = data.runs(db_imports).set_index("run_id")
    lm, ins, re_ = runs.loc["lm_eval"], runs.loc["inspect"], runs.loc["inspect.rescore"]
    assert (lm["kind"], lm["datasets"], lm["problems"], lm["n"], lm["samples"]) == ("imported", "synth_test", 20, "2", 40)
    assert lm["source"].startswith("samples_prl_synth_arith_") and "(lm-evaluation-harness 0.4.13)" in lm["source"]
    assert ins["source"] == "prl_synth_tiny_warm.eval (inspect_ai 0.3.285)" and pd.isna(ins["lineage"])
    assert (re_["kind"], re_["source"], re_["lineage"]) == ("rescore", ins["source"], "rescore of inspect")
    ev = runs.loc["train-prl@step5"]
    assert (ev["kind"], ev["lineage"], ev["training"]) == ("training eval", "train-prl · step 5",
                                                           "training?run=train-prl&step=5")
    assert runs.loc["base", "datasets"] == "amc23, math500" and runs.loc["base", "n"] == "4"
    assert data.kind_counts(runs.reset_index()) == ("7 runs: 2 evaluations, 1 evaluation during training, 2 imports, "
                                                    "1 rescore, 1 training run")


def test_runs_page_counts_each_kind_and_links_the_training_run(db_imports, monkeypatch):
    at = _app(db_imports, monkeypatch, "runs")
    assert at.caption[0].value.startswith("7 runs: 2 evaluations, 1 evaluation during training, 2 imports, 1 rescore")
    table = at.dataframe[0].value.set_index("run_id")
    assert table.loc["inspect", "datasets"] == "synth_test" and table.loc["inspect", "n"] == "2"
    at.selectbox(key="runs/manifest_of").set_value("train-prl@step5").run()
    assert any("training?run=train-prl&step=5" in m.value for m in at.markdown)
    assert any("train\\-prl · step 5" in m.value for m in at.markdown)


def test_compare_page_on_two_imported_runs(db_imports, monkeypatch):
    """Two imports (lm-eval's and Inspect's files) are compared like any runs: the page's numbers are
    prl.evaluation.report.compare_runs's."""
    from prl.evaluation.report import compare_runs
    from prl.store.db import Store

    at = _app(db_imports, monkeypatch, "compare")
    assert "inspect.rescore" in at.selectbox[0].options[-1] or "inspect.rescore" in at.selectbox[1].value
    at.selectbox[0].set_value("lm_eval")
    at.selectbox[1].set_value("inspect")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    want = compare_runs(Store(db_imports, create=False), "lm_eval", "inspect", iters=1000)["overall"]
    shown = {m.label: m.value for m in at.metric}
    assert shown["common problems"] == str(want["problems"]) == "20"
    assert shown["gained / lost"] == f"{want['mcnemar']['gained']} / {want['mcnemar']['lost']}"
    assert shown["Δ average@n (pp)"] == f"{100 * want['diff']['diff']:+.1f}"
    assert any(c.value.startswith("imported · synth\\_test · n \\= 2") and "inspect\\_ai" in c.value for c in at.caption)


def test_scores_page_bounds_k_by_the_runs_n_and_says_where_it_is_clipped(db_imports, monkeypatch):
    at = _app(db_imports, monkeypatch, "scores", {"runs": "base,prl"})
    k = at.number_input[0]
    assert (k.value, k.max) == (4, 4)  # n = 4: the input cannot say 8 while the page shows pass@4
    at = _app(db_imports, monkeypatch, "scores", {"runs": "base,lm_eval"})
    assert at.number_input[0].value == 4
    clipped = " ".join(c.value for c in at.caption)
    assert "pass@4 needs 4 samples per problem: lm\\_eval has 2, so it shows pass@2" in clipped
    shown = {str(c) for df in at.dataframe for c in df.value.columns.to_flat_index()}
    assert any("pass@2" in c and "lm_eval" in c for c in shown) and any("pass@4" in c and "base" in c for c in shown)


def test_problem_page_shows_an_imports_own_label_and_answer(db_imports, monkeypatch):
    """An imported sample: the source's label and extracted answer beside ours; no '<NA> tokens · None'."""
    from prl.store.db import Store

    with Store(db_imports, create=False).read() as con:
        pid, ans, label, ref = con.execute("SELECT problem_id, source_answer, source_label, source_ref FROM samples "
                                           "WHERE run_id = 'inspect' AND source_answer IS NOT NULL "
                                           "ORDER BY problem_id, sample_idx LIMIT 1").fetchone()
    at = _app(db_imports, monkeypatch, "problem", {"dataset": "synth_test", "problem_id": pid, "runs": "inspect"})
    assert at.multiselect[0].value == ["inspect"]  # the deep link's run is the one selected in the box
    title = at.expander[0].label
    assert "NA" not in title and "None" not in title and "tokens" not in title
    assert f"source: {'correct' if label > 0.5 else 'wrong'} ({label:g}), answer" in title
    from dashboard import ui
    from dashboard.math_text import answer_markdown

    captions = [c.value for c in at.caption]
    assert any(c.startswith("the source's answer — ") for c in captions) and f"from {ui.label_text(ref)}" in captions

    assert answer_markdown(ans) in [m.value for m in at.markdown]


def test_untrusted_answers_in_titles_are_escaped(tmp_path, monkeypatch):
    """An extracted answer is model text inside an expander title (Streamlit reads titles as Markdown): a link, an
    image or emphasis in it shows as written."""
    from prl.store.db import Store

    db = seed(tmp_path / "store.duckdb")
    Store(db, create=False).insert_samples([dict(
        run_id="base", dataset="math500", problem_id="math500/0", sample_idx=9, response="r", verdict="wrong",
        extracted_answer="[x](y) ![i](z) **b** :red[c]", score=0.0)])
    at = _app(db, monkeypatch, "problem", {"dataset": "math500", "problem_id": "math500/0", "runs": "base"})
    title = next(e.label for e in at.expander if "sample 9" in e.label)
    assert "\\[x\\]\\(y\\)" in title and "\\!\\[i\\]" in title and "\\*\\*b\\*\\*" in title
    assert "\\:\u200bred\\[c\\]" in title


def test_deep_links_select_their_runs(db_repeating, monkeypatch):
    """?runs= on the pages that list runs and ?run=&step= on Training select what the link names."""
    at = _app(db_repeating, monkeypatch, "failures", {"runs": "prl"})
    assert at.multiselect[0].value == ["prl"]
    at.multiselect[0].set_value(["base", "prl"]).run()  # the link applies once: the reader's choice then holds
    assert at.multiselect[0].value == ["base", "prl"]
    at = _app(db_repeating, monkeypatch, "training", {"run": "train-rep", "step": "2"})
    assert "train-rep" in at.multiselect[0].value
    assert next(s for s in at.selectbox if s.label == "run").value == "train-rep"
    assert at.get("select_slider")[0].value == 2


def test_agreement_cards_fit_three_to_a_row(db_imports, monkeypatch):
    """Six cards in two rows of three (five in one row cut the accuracy card off at 1,400 px)."""
    at = _app(db_imports, monkeypatch, "agreement")
    assert at.selectbox[0].value == "inspect.rescore"  # the newest import or rescore
    labels = [m.label for m in at.metric]
    assert labels == ["samples compared", "agree", "Cohen's κ", "our accuracy", "their accuracy",
                      "reported by the source"]
    assert [m.value for m in at.metric] == ["40", "100.0%", "1.000", "0.075", "0.075", "0.0750"]
    assert max(len(m.value) for m in at.metric) <= 8


def test_compare_page_runs_with_nothing_in_common(tmp_path, monkeypatch):
    """Two evaluation runs on different data sets: the page says there is nothing to compare."""
    from streamlit.testing.v1 import AppTest

    from prl.store.db import Store

    db = seed(tmp_path / "store.duckdb")
    s = Store(db, create=False)
    s.execute("upsert_run", run_id="other", kind="eval", model="/models/other", status="finished",
              config={"datasets": ["gsm8k"], "n": 2}, manifest={}, parent_run_id=None, train_step=None)
    s.insert_samples([dict(run_id="other", dataset="gsm8k", problem_id="gsm8k/0", sample_idx=i, response="\\boxed{1}",
                           extracted_answer="1", verdict="correct", score=1.0, n_tokens=5, finish_reason="stop",
                           verify_ms=1.0) for i in range(2)])
    monkeypatch.setenv(data.DB_ENV, db)
    at = AppTest.from_file(str(PAGES / "compare.py"), default_timeout=60).run()
    at.selectbox[0].set_value("base")
    at.selectbox[1].set_value("other")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("share no problems" in i.value and "nothing in common to compare" in i.value for i in at.info)
    assert not at.metric


ALL_PAGES = sorted(p.stem for p in PAGES.glob("*.py"))


@pytest.mark.parametrize("name", ALL_PAGES)
def test_every_page_and_every_choice_renders(name, db_repeating, monkeypatch):
    """Each page on the seeded store (with the identical rollouts): the default view, then each of the
    first options of every selectbox and radio, without an exception."""
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv(data.DB_ENV, db_repeating)
    at = AppTest.from_file(str(PAGES / f"{name}.py"), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    tried = 0
    for kind in ("selectbox", "radio"):
        for i in range(len(getattr(at, kind))):
            widget = getattr(at, kind)[i]
            if widget.label == "open a problem":  # switches page: not a page of its own in AppTest
                continue
            for j in range(min(3, len(widget.options))):
                w = getattr(at, kind)[i]
                (w.select_index(j) if kind == "selectbox" else w.set_value(w.options[j])).run()
                assert not at.exception, (name, w.label, j, [e.value for e in at.exception])
                tried += 1
    assert tried or name == "scores"  # every page but Scores has a selectbox or radio to try


def test_every_keyable_element_has_a_key():
    """Every call of a Streamlit command that takes ``key=`` passes one, in every page and in ui.py:
    unkeyed elements get ids from their content, and identical content collides."""
    import ast
    import inspect

    import streamlit as st

    keyable = set()
    for attr in dir(st):
        obj = getattr(st, attr)
        if callable(obj) and not attr.startswith(("_", "get_", "set_")):
            try:
                if "key" in inspect.signature(obj).parameters:
                    keyable.add(attr)
            except (TypeError, ValueError):
                pass
    assert {"plotly_chart", "dataframe", "selectbox", "expander"} <= keyable
    missing, seen = [], 0
    for path in [*sorted(PAGES.glob("*.py")), ROOT / "dashboard" / "ui.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in keyable:
                seen += 1
                if not any(k.arg == "key" for k in node.keywords):
                    missing.append(f"{path.name}:{node.lineno} {node.func.attr}")
    assert seen > 30 and not missing, missing


def test_keys_are_unambiguous():
    from dashboard import ui

    assert ui.key("training", "rollout", "r", 5, 0, "segments") == "training/rollout/r/5/0/segments"
    assert ui.key("a/b", "c") != ui.key("a", "b/c")
    assert ui.key("x", ["a,b", "c"]) != ui.key("x", ["a", "b,c"])


def test_sql_page_runs_reads_and_refuses_writes(page):
    at = page("sql")
    at.button[0].click().run()
    assert len(at.dataframe[-1].value) >= 4
    for bad in ("DELETE FROM samples", "ATTACH 'x.duckdb'", "COPY samples TO 'x.csv'", "INSTALL httpfs",
                "SELECT * FROM read_csv('/etc/passwd')"):
        at.text_area[0].set_value(bad).run()
        at.button[0].click().run()
        assert at.error and ("not allowed" in at.error[0].value or "read-only" in at.error[0].value
                             or "disabled" in at.error[0].value or "external" in at.error[0].value.lower()), bad


def test_empty_and_missing_stores_say_so(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from prl.store.db import Store

    monkeypatch.setenv(data.DB_ENV, str(tmp_path / "missing.duckdb"))
    for name in ("runs", "scores", "training"):
        at = AppTest.from_file(str(PAGES / f"{name}.py"), default_timeout=60).run()
        assert not at.exception and "no such store" in at.info[0].value
    Store(tmp_path / "empty.duckdb")
    monkeypatch.setenv(data.DB_ENV, str(tmp_path / "empty.duckdb"))
    for name in ("runs", "scores", "compare", "problem", "failures", "training", "sql"):
        at = AppTest.from_file(str(PAGES / f"{name}.py"), default_timeout=60).run()
        assert not at.exception, name
        if name != "sql":
            assert at.info, name


WRITER = r"""
import sys
from prl.store.db import Store
s = Store(sys.argv[1], create=False)

def chunk(c):
    s.insert_samples([dict(run_id="live", dataset="math500", problem_id=f"math500/{c}", sample_idx=i,
                           response="x", extracted_answer="1", verdict="correct", score=1.0, n_tokens=5,
                           finish_reason="stop", verify_ms=1.0) for i in range(4)])

for c in range(20):
    chunk(c)
print("paused", flush=True)
sys.stdin.readline()  # the barrier: held here until the test has read the store
for c in range(20, 40):
    chunk(c)
print("done", flush=True)
"""


def test_aggregates_are_cached_until_the_store_changes(tmp_path, monkeypatch):
    """A page load recomputes a cached result only after a write to the store: the Runs table (the real
    data.runs on a real store, counted where it is called) is computed once while nothing changes, and once
    more after ``prl import`` writes a run, which it then lists."""
    import duckdb
    import streamlit as st

    from dashboard import ui
    from prl.imports.run import ImportConfig, run_import

    db = seed(tmp_path / "store.duckdb")
    real, computed = data.runs, []
    monkeypatch.setattr(data, "runs", lambda db: computed.append(db) or real(db))
    st.cache_data.clear()
    first = [ui.runs(db) for _ in range(3)]
    assert computed == [db] and all(f.equals(first[0]) for f in first)  # one computation while nothing changes
    con = duckdb.connect(db, read_only=True)
    stored = {r for (r,) in con.execute("select run_id from runs").fetchall()}
    con.close()
    assert set(first[0].run_id) == stored and "lm_eval" not in stored
    time.sleep(0.01)
    run_import(ImportConfig(files=(str(next((FORMATS / "lm_eval").glob("samples_*.jsonl"))),), dataset="synth_test",
                            db=db, run_id="lm_eval", verifier_workers=1), progress=False, log=lambda *_: None)
    after = [ui.runs(db) for _ in range(2)]
    assert computed == [db, db] and after[1].equals(after[0])  # recomputed once after the write
    assert set(after[0].run_id) == stored | {"lm_eval"}


def test_pages_work_while_a_flow_writes(tmp_path, monkeypatch):
    """A real writer process inserts samples while the pages' queries run. Held at a barrier after 80 of its
    160 rows, the pages show exactly 80 (what is committed, no lock errors); released, the pages keep
    working while it writes, the counts never go back, and once it is done a page load shows all 160
    (the cache follows the store's content, no cache clearing)."""
    from streamlit.testing.v1 import AppTest

    from prl.store.db import Store

    db = seed(tmp_path / "busy.duckdb")
    Store(db).execute("upsert_run", run_id="live", kind="eval", model="m", status="running", config={}, manifest={},
                      parent_run_id=None, train_step=None)
    monkeypatch.setenv(data.DB_ENV, db)

    def live_samples() -> int:
        at = AppTest.from_file(str(PAGES / "runs.py"), default_timeout=60).run()
        assert not at.exception, [e.value for e in at.exception]
        return int(at.dataframe[0].value.set_index("run_id").loc["live", "samples"])

    writer = subprocess.Popen([sys.executable, "-c", WRITER, db], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "paused"
        assert live_samples() == 80  # the writer is alive, holding its store open, between two writes
        for name in ("scores", "failures"):
            assert not AppTest.from_file(str(PAGES / f"{name}.py"), default_timeout=60).run().exception
        assert live_samples() == 80
        writer.stdin.write("go\n")
        writer.stdin.flush()
        seen = [80]
        while writer.poll() is None:
            seen.append(live_samples())
            assert not AppTest.from_file(str(PAGES / "scores.py"), default_timeout=60).run().exception
        assert writer.wait() == 0 and writer.stdout.read().strip() == "done"
    finally:
        if writer.poll() is None:
            writer.kill()
    seen.append(live_samples())
    assert seen[-1] == 160 and seen == sorted(seen) and all(n in range(80, 161, 4) for n in seen), seen


# ─── a real browser ─────────────────────────────────────────────────────────────────────────

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _lan_ip() -> str | None:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))  # no packet is sent; this picks the outgoing interface
            ip = s.getsockname()[0]
    except OSError:
        return None
    return None if ip.startswith("127.") else ip


def _browser_or_skip() -> None:
    """Skip where Debian's chromium and chromedriver are missing, except where PRL_REQUIRE_BROWSER is set (CI:
    .ci/run sets it and scripts/install.sh installs them there): then a missing browser fails the test."""
    if shutil.which("chromium") and shutil.which("chromedriver"):
        return
    reason = "needs Debian's chromium and chromium-driver (scripts/install.sh installs them as root)"
    if os.environ.get("PRL_REQUIRE_BROWSER"):
        pytest.fail(f"PRL_REQUIRE_BROWSER is set and the browser test cannot run: {reason}")
    pytest.skip(reason)


def test_a_missing_browser_fails_where_it_is_required(tmp_path, monkeypatch):
    """CI (PRL_REQUIRE_BROWSER) cannot pass with the browser test skipped: without chromium on PATH it fails."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("PRL_REQUIRE_BROWSER", raising=False)
    with pytest.raises(pytest.skip.Exception):
        _browser_or_skip()
    monkeypatch.setenv("PRL_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match="PRL_REQUIRE_BROWSER is set"):
        _browser_or_skip()


@pytest.fixture
def _browser_available() -> None:
    _browser_or_skip()


needs_browser = pytest.mark.usefixtures("_browser_available")


class _Browser:
    """``prl dashboard --db DB`` on a free port and a headless Chromium at 1,400 × 1,000 px looking at it."""

    def __init__(self, db):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        self.artifacts = ROOT / "artifacts" / "screenshots"
        self.artifacts.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.server = subprocess.Popen([sys.executable, "-m", "prl_cli", "dashboard", "--db", str(db), "--port",
                                        str(self.port)], cwd=ROOT, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL, start_new_session=True)
        opts = webdriver.ChromeOptions()
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                     "--disable-background-networking", "--disable-component-update", "--disable-sync",
                     "--window-size=1400,1000"):
            opts.add_argument(flag)
        opts.binary_location = shutil.which("chromium")
        self.driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=opts)
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)

    def open(self, path: str, until: str, screenshot: str | None = None) -> str:
        """Load ``path``, wait until the page shows ``until`` and has stopped running; its main area's text."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver.get(f"{self.base}/{path}")
        WebDriverWait(self.driver, 60).until(lambda d: until in d.find_element(By.TAG_NAME, "body").text)
        WebDriverWait(self.driver, 60).until(  # the script has finished (no running indicator) and charts drew
            lambda d: not d.find_elements(By.CSS_SELECTOR, "[data-testid='stStatusWidget']"))
        time.sleep(1.5)
        if screenshot:
            self.driver.save_screenshot(str(self.artifacts / f"{screenshot}.png"))
        return self.driver.find_element(By.TAG_NAME, "body").text

    def count(self, css: str) -> int:
        from selenium.webdriver.common.by import By

        return len(self.driver.find_elements(By.CSS_SELECTOR, css))

    def settled(self) -> str:
        """Wait until a rerun has started and finished (no running indicator); the page's text."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        time.sleep(1.0)  # the rerun a click triggers has begun
        WebDriverWait(self.driver, 60).until(
            lambda d: not d.find_elements(By.CSS_SELECTOR, "[data-testid='stStatusWidget']"))
        time.sleep(0.5)
        return self.driver.find_element(By.TAG_NAME, "body").text

    def until_text(self, text: str, timeout_s: float = 60) -> str:
        """Wait until the page shows ``text`` (a rerun that a click starts may begin later than :meth:`settled`'s
        first second on a loaded machine); the page's text then. Times out with the page's text."""
        from selenium.common.exceptions import TimeoutException
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        try:
            WebDriverWait(self.driver, timeout_s).until(
                lambda d: text in d.find_element(By.TAG_NAME, "body").text)
        except TimeoutException:
            pass  # the caller's assertion shows the page
        return self.settled()

    def open_page(self, path: str, title: str, screenshot: str | None = None) -> str:
        """Load a page and wait until its main area's heading is ``title`` (the sidebar lists every title)."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver.get(f"{self.base}/{path}")
        WebDriverWait(self.driver, 60).until(lambda d: any(
            h.text.strip() == title for h in d.find_elements(By.CSS_SELECTOR, "[data-testid='stMain'] h1")))
        body = self.settled()
        if screenshot:
            self.driver.save_screenshot(str(self.artifacts / f"{screenshot}.png"))
        return body

    def click(self, element) -> None:
        self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", element)
        element.click()

    def choose(self, box, option: str | None = None) -> str:
        """Open the select box ``box`` and pick the option whose text contains ``option`` (default: its last
        option); the option's text."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        self.click(box.find_element(By.CSS_SELECTOR, "button[aria-haspopup='listbox']"))  # its "Open" button
        options = WebDriverWait(self.driver, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, "[role='option']"))
        pick = options[-1] if option is None else next(o for o in options if option in o.text)
        text = pick.text
        self.click(pick)
        return text

    def exercise_select_boxes(self) -> list[str]:
        """Every select box on the page, in turn, set to its last option (a box a choice adds is taken too); after
        each choice the page has rerun without an exception. The labels of the boxes chosen in."""
        from selenium.webdriver.common.by import By

        done: list[str] = []
        for _ in range(40):
            boxes = [b for b in self.driver.find_elements(By.CSS_SELECTOR, "[data-testid='stSelectbox']")
                     if b.text.split("\n")[0] not in done]
            if not boxes:
                break
            label = boxes[0].text.split("\n")[0]
            self.choose(boxes[0])
            body = self.settled()
            assert "Traceback" not in body and not self.count("[data-testid='stException']"), (label, body[-2000:])
            done.append(label)
        return done

    def close(self) -> None:
        self.driver.quit()
        os.killpg(self.server.pid, signal.SIGTERM)
        try:
            self.server.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.server.pid, signal.SIGKILL)


def _app_pages() -> list[tuple[str, str]]:
    """(URL path, title) of every page in dashboard/app.py's navigation, in its order; the title is the one the
    page's file gives ``st.title``, the path its file name (the default page's is "")."""
    app = (ROOT / "dashboard" / "app.py").read_text(encoding="utf-8")
    pages = []
    for stem, rest in re.findall(r'st\.Page\(PAGES / "(\w+)\.py",([^)]*)\)', app):
        title = re.search(r'st\.title\("([^"]+)"\)', (PAGES / f"{stem}.py").read_text(encoding="utf-8")).group(1)
        pages.append(("" if "default=True" in rest else stem, title))
    return pages


def test_the_browser_tests_see_every_page_of_the_app():
    """The pages the browser tests walk are app.py's navigation: all nine page files, each once."""
    pages = _app_pages()
    assert sorted(p or "runs" for p, _ in pages) == sorted(f.stem for f in PAGES.glob("*.py"))
    assert ("compare", "Compare two runs") in pages and ("", "Runs") in pages


@pytest.mark.e2e
@needs_browser
def test_real_browser_renders_every_page(db):
    from selenium.webdriver.common.by import By

    b = _Browser(db)
    try:
        # bound to 127.0.0.1 by default: the kernel's socket table shows that one listening address (it
        # does on a machine without a LAN address too) ...
        assert listening_addresses(b.server.pid) == {("127.0.0.1", b.port)}
        lan = _lan_ip()
        if lan:  # ... and where the machine has another address, the dashboard is unreachable on it
            with pytest.raises(OSError):
                socket.create_connection((lan, b.port), timeout=2).close()
        for path, title in _app_pages():  # every page of the app's navigation (nine)
            body = b.open_page(path, title, screenshot=path or "runs")
            assert "Traceback" not in body and not b.count(".katex-error") and not b.count("[data-testid='stException']")
        body = b.open("problem?dataset=math500&problem_id=math500/1&runs=base", "document.title",
                      screenshot="problem_script_as_text")
        assert "<script>document.title='pwned'</script><b>bold</b> **not markdown**" in body
        assert b.driver.title != "pwned" and not b.driver.find_elements(By.XPATH, "//b[text()='bold']")
        assert b.count("[data-testid='stExpander'] .katex") >= 1  # its \\boxed{7}, typeset
    finally:
        b.close()


@pytest.fixture(scope="module")
def db_outside(tmp_path_factory):
    """A store of imported files only, made by ``prl import``'s code: lm-eval's and Inspect's own outputs on the same
    20 synthetic problems (and a rescore of the Inspect run), DeepSeek-R1-Distill-Qwen-1.5B's long-form AMC responses,
    and four R1-Zero MATH-500 responses, three of them listed as suspicious passes (tests/data/formats,
    tests/data/external; dashboard_seed.import_r1zero_part)."""
    from dashboard_seed import import_r1zero_part

    from prl.evaluation.rescore import rescore_run
    from prl.grading.verifier import VerifierSettings
    from prl.imports.run import ImportConfig, run_import
    from prl.store.db import Store

    db = tmp_path_factory.mktemp("dash_outside") / "store.duckdb"
    Store(db).close()
    amc = ROOT / "tests" / "data" / "external" / "amc-json-deepseek-r1-distill-qwen-1.5b" / "amc_output.json"
    for run_id, path, dataset, extra in (
            ("lm_eval", next((FORMATS / "lm_eval").glob("samples_*.jsonl")), "synth_test", {}),
            ("inspect", FORMATS / "inspect" / "prl_synth_tiny_warm.eval", "synth_test", {}),
            ("amc-import", amc, "amc23", {"reported_accuracy": 0.6506})):
        run_import(ImportConfig(files=(str(path),), dataset=dataset, db=str(db), run_id=run_id, verifier_workers=1,
                                **extra), progress=False, log=lambda *_: None)
    rescore_run(str(db), "inspect", verifier=VerifierSettings(verifier_workers=1), progress=False, log=lambda *_: None)
    import_r1zero_part(db)
    kinds = Store(db, create=False).records("list_runs")
    assert {r["kind"] for r in kinds} <= {"imported", "rescore"}, kinds  # nothing but imports (and a rescore of one)
    return str(db)


@pytest.mark.e2e
@needs_browser
def test_real_browser_on_a_store_of_imports(db_outside):
    """The pages a researcher reads on a store of imported files only, in Chromium at 1,400 px: the Runs caption counts the imports,
    Compare compares two imports, the long-form R1-distill responses show typeset math and no KaTeX error, no link
    or image from their text, and no Agreement card is cut off; then every page of the navigation with every select
    box set in turn, and the Appendix-C case view opened, judged and saved (the store's judgements table)."""
    from dashboard_seed import R1ZERO_RUN
    from selenium.webdriver.common.by import By

    b = _Browser(db_outside)
    try:
        # the first request a fresh server gets is a deep link: it still runs inside app.py (its --db, its pages)
        body = b.open("problem?dataset=amc23&problem_id=amc23/10&runs=amc-import", "sample 0",
                      screenshot="imports_problem")
        assert f"store: {db_outside}" in body.replace("\n", "") and "Agreement" in body
        assert "source: correct" in body and "Traceback" not in body
        assert b.count("[data-testid='stExpander'] .katex") > 20 and not b.count(".katex-error")
        assert not b.count("[data-testid='stMain'] [data-testid='stMarkdownContainer'] a:not([href^='#']), "
                           "[data-testid='stMain'] [data-testid='stMarkdownContainer'] img")  # (#: heading anchors)
        body = b.open("", "Runs", screenshot="imports_runs")
        assert "4 imports, 1 rescore" in body and "Traceback" not in body
        body = b.open("compare?a=lm_eval&b=inspect", "gained / lost", screenshot="imports_compare")
        assert "common problems\n20" in body and "Traceback" not in body
        body = b.open("agreement", "Disagreements", screenshot="imports_agreement")
        cut = b.driver.execute_script(
            "return [...document.querySelectorAll('[data-testid=stMetricValue], [data-testid=stMetricLabel]')]"
            ".filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.innerText)")
        assert cut == [] and "our accuracy" in body and "Traceback" not in body
        body = b.open("failures?runs=lm_eval,inspect,amc-import", "share of each", screenshot="imports_failures")
        assert "Traceback" not in body and not b.count(".katex-error")
        # every page of the navigation, and on each every select box set in turn
        chosen = {}
        for path, title in _app_pages():
            b.open_page(path, title)
            chosen[title] = b.exercise_select_boxes()
            assert not b.count(".katex-error"), title
        assert {"Problem", "Compare two runs", "Agreement", "Failures"} <= {t for t, boxes in chosen.items() if boxes}
        # the Appendix-C case view: both problems beside the response, judged, and the judgement kept in the store
        b.open_page(f"failures?runs={R1ZERO_RUN}", "Failures")
        box = next(x for x in b.driver.find_elements(By.CSS_SELECTOR, "[data-testid='stSelectbox']")
                   if x.text.startswith("open a case"))
        assert "algebra/435" in b.choose(box, "algebra/435")
        body = b.settled()
        for shown in ("The problem asked", "The problem the reasoning fits best", "math500/test/algebra/435.json",
                      "math500/test/algebra/224.json", "Listed by fits_another"):
            assert shown in body, shown
        b.driver.save_screenshot(str(b.artifacts / "imports_case.png"))
        b.click(next(x for x in b.driver.find_elements(By.CSS_SELECTOR, "[data-testid='stRadio'] label")
                     if x.text.startswith("confirmed")))
        b.settled()
        b.click(next(x for x in b.driver.find_elements(By.TAG_NAME, "button") if x.text == "save judgement"))
        assert "Saved: confirmed" in b.until_text("Saved: confirmed")
        b.open_page(f"failures?runs={R1ZERO_RUN}", "Failures")  # a fresh page reads it from the store
        box = next(x for x in b.driver.find_elements(By.CSS_SELECTOR, "[data-testid='stSelectbox']")
                   if x.text.startswith("open a case"))
        b.choose(box, "algebra/435")
        assert "Traceback" not in b.settled()
        checked = b.driver.execute_script(
            "return [...document.querySelectorAll('[data-testid=stRadio]')]"
            ".filter(r => r.querySelector('[data-testid=stWidgetLabel]').innerText.trim() === 'judgement')"
            ".flatMap(r => [...r.querySelectorAll('label')]).filter(l => l.querySelector('input:checked'))"
            ".map(l => l.innerText)")
        assert len(checked) == 1 and checked[0].startswith("confirmed"), checked
    finally:
        b.close()
    import duckdb

    con = duckdb.connect(db_outside, read_only=True)
    rows = con.execute("SELECT run_id, problem_id, sample_idx, judgement, flagged_by FROM judgements").fetchall()
    con.close()
    assert rows == [(R1ZERO_RUN, "math500/test/algebra/435.json", 0, "confirmed", "fits_another")]


def test_agreement_page_on_a_real_import(tmp_path, monkeypatch):
    """The AMC file of DeepSeek-R1-Distill-Qwen-1.5B (tests/data/external) imported into the seeded store: the
    page shows the 2x2 counts, the one disagreement side by side, its math on request, and the unmatched rows."""
    from streamlit.testing.v1 import AppTest

    from prl.imports.run import ImportConfig, run_import

    db = seed(tmp_path / "store.duckdb")
    amc = ROOT / "tests" / "data" / "external" / "amc-json-deepseek-r1-distill-qwen-1.5b" / "amc_output.json"
    run_import(ImportConfig(files=(str(amc),), dataset="amc23", db=db, run_id="amc-import", reported_accuracy=0.6506),
               progress=False, log=lambda *_: None)
    monkeypatch.setenv(data.DB_ENV, db)
    at = AppTest.from_file(str(PAGES / "agreement.py"), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox[0].value == "amc-import"
    shown = {m.label: m.value for m in at.metric}
    assert shown["samples compared"] == "40" and shown["agree"] == "97.5%" and shown["reported by the source"] == "0.6506"
    assert any(s.value.startswith("Disagreements: 1") for s in at.subheader)
    at.selectbox(key="agreement/pick/amc-import/its%20source%27s%20own%20labels").select_index(0).run()
    assert not at.exception, [e.value for e in at.exception]
    shown = [m.value for m in at.markdown]
    assert "$\\dfrac{1}{7}$" in shown and "$1$" in shown and not at.latex  # our extraction and the gold, typeset
    from dashboard.math_text import to_markdown

    problem = data.agreement(db, "amc-import")["rows"].iloc[0]["problem"]
    assert to_markdown(problem) in shown and "$" in to_markdown(problem)  # the problem as typeset prose
    at.sidebar.toggle[0].set_value(False).run()  # the raw text
    texts = [t.value for t in at.text]
    assert "\\dfrac{1}{7}" in texts and "1" in texts
    assert any("match no problem: 43" in s.value for s in at.subheader)
    # against another run: the samples both have (the seeded run answers amc23/0 and amc23/1 too)
    import duckdb

    con = duckdb.connect(db, read_only=True)
    shared = con.execute("SELECT count(*) FROM samples a JOIN samples b USING (dataset, problem_id, sample_idx) "
                         "WHERE a.run_id = 'amc-import' AND b.run_id = 'base'").fetchone()[0]
    con.close()
    at.selectbox(key="agreement/against/amc-import").set_value("base").run()
    assert not at.exception, [e.value for e in at.exception]
    assert shared > 0 and {m.label: m.value for m in at.metric}["samples compared"] == str(shared)


def test_study_page_shows_the_report(db_repeating, monkeypatch):
    """The Study page on the seeded study (tests/dashboard_seed.py add_study: 3 problems, n = 2, correct counts
    grpo s0 [0, 1, 2], s1 [1, 1, 2], prl s0 [1, 2, 2], s1 [2, 1, 2]) shows the numbers computed here by hand:
    average@2 per seed grpo 1/2, 2/3 and prl 5/6, 5/6, so cell means 7/12 and 5/6; Student t across the two
    seeds, mean ± t(0.975, 1) · s/√2 with t(0.975, 1) = 12.7062047 (tables) and s/√2 = |a − b|/2; prl − grpo
    seed by seed 1/3 and 1/6, so 1/4 ± 12.7062047/12. pass@2 per seed grpo 2/3, 1 and prl 1, 1. The
    bootstrap across problems lies within the per-problem values (grpo 1/4, 1/2, 1; differences 1/2, 1/4, 0)."""
    from streamlit.testing.v1 import AppTest

    from dashboard import ui

    t = 12.706204736174698  # Student t, 97.5% quantile, 1 degree of freedom

    def ci(a, b):  # mean and the Student-t CI of two seeds' values
        m, half = (a + b) / 2, t * abs(a - b) / 2
        return [m, m - half, m + half]

    monkeypatch.setenv(data.DB_ENV, db_repeating)
    at = AppTest.from_file(str(PAGES / "study.py"), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    assert {m.label: m.value for m in at.metric} == {"cells": "2", "seeds": "2", "jobs finished": "4 / 4",
                                                     "held-out problems": "3"}

    def cells() -> dict:
        shown = at.dataframe[0].value.set_index("cell")
        assert shown["seeds"].tolist() == [2, 2] and shown["problems"].tolist() == [3, 3]
        return {c: shown.loc[c, ["mean", "seed_lo", "seed_hi", "problem_lo", "problem_hi"]].tolist() for c in shown.index}

    shown = cells()
    assert {c: v[:3] for c, v in shown.items()} == {"grpo": pytest.approx(ci(1 / 2, 2 / 3)), "prl": pytest.approx(ci(5 / 6, 5 / 6))}
    grpo_lo, grpo_hi = shown["grpo"][3:]
    assert 1 / 4 <= grpo_lo <= 7 / 12 <= grpo_hi <= 1
    # the claim: prl − grpo seed by seed (1/3, 1/6), the same CI as the paired row; it includes 0
    claims = at.dataframe[1].value
    assert claims[["against", "seeds", "verdict"]].values.tolist() == [["grpo", 2, "not shown at this scale"]]
    assert claims[["diff", "lo", "hi"]].iloc[0].tolist() == pytest.approx(ci(1 / 3, 1 / 6))
    assert claims["claim"].iloc[0] == "PRL scores higher than GRPO <b>on average</b>"  # text in a table cell, as is
    paired = at.dataframe[2].value
    assert paired["cell"].tolist() == ["prl"] and paired["seeds"].tolist() == [2]
    assert paired[["diff", "lo", "hi"]].iloc[0].tolist() == pytest.approx(ci(1 / 3, 1 / 6))
    assert 0 <= paired["problem_lo"].iloc[0] <= 1 / 4 <= paired["problem_hi"].iloc[0] <= 1 / 2
    assert "includes 0" in paired["note"].iloc[0]
    # the cells' stored configs differ in exactly what the study declares
    assert any("declares" in s.value for s in at.success) and not at.warning
    diffs = at.dataframe[3].value.set_index("key")
    assert diffs.to_dict("index") == {"algorithm.estimator": {"grpo": "grpo", "prl": "prl"},
                                      "algorithm.eta": {"grpo": "None", "prl": "10.0"}}
    at.selectbox(key=ui.key("study", "metric", "st")).set_value("pass@2").run()
    assert not at.exception, [e.value for e in at.exception]
    assert {c: v[:3] for c, v in cells().items()} == {"grpo": pytest.approx(ci(2 / 3, 1)), "prl": pytest.approx(ci(1, 1))}


# ─── the Appendix-C case view (Failures → Suspicious passes), on a store of one real import ─────────

@pytest.fixture(scope="module")
def db_import(tmp_path_factory):
    """A store holding only ``prl import``'s run of four real R1-Zero MATH-500 responses (dashboard_seed)."""
    from dashboard_seed import import_r1zero_part

    return import_r1zero_part(tmp_path_factory.mktemp("case") / "store.duckdb")


def _listed(at) -> pd.DataFrame:
    """The Suspicious passes table of the Failures page."""
    return next(d.value for d in at.dataframe if "flagged_by" in d.value.columns)


def _case_page(db, monkeypatch, case: str | None = None):
    """The Failures page, with the case whose option label contains ``case`` opened. Texts are shown as stored
    (the "typeset math" toggle off, where the app has one), so the assertions compare exact strings."""
    from streamlit.testing.v1 import AppTest

    from dashboard import ui

    monkeypatch.setenv(data.DB_ENV, db)
    at = AppTest.from_file(str(PAGES / "failures.py"), default_timeout=60)
    if hasattr(ui, "TYPESET"):
        at.session_state[ui.TYPESET] = False
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    if case is not None:
        pick = next(s for s in at.selectbox if s.label == "open a case")
        pick.select_index(next(i for i, label in enumerate(pick.options) if case in label)).run()
        assert not at.exception, [e.value for e in at.exception]
    return at


def test_case_view_shows_both_problems_the_fit_and_the_rule(db_import, monkeypatch):
    from dashboard_seed import R1ZERO_RUN

    from prl.data.datasets import load_dataset
    from prl.grading.relevance import FIT_MARGIN, SUSPICION_RULES, fit_index

    at = _case_page(db_import, monkeypatch)
    caption = " ".join(c.value for c in at.caption)
    assert all(rule.says in caption for rule in SUSPICION_RULES)  # the caption states every rule, from the home
    listed = _listed(at)
    assert sorted(zip(listed.problem_id, listed.flagged_by)) == [
        ("math500/test/algebra/435.json", "fits_another"), ("math500/test/geometry/65.json", "answer_only"),
        ("math500/test/prealgebra/1622.json", "fits_another")]
    assert listed["judgement"].isna().all()

    at = _case_page(db_import, monkeypatch, "algebra/435")
    problems = {p.problem_id: p for p in load_dataset("math500", flag_raw_only=False)[0]}
    asked, best = problems["math500/test/algebra/435.json"], problems["math500/test/algebra/224.json"]
    texts = [t.value for t in at.text]
    for shown in (asked.problem, asked.gold_normalized, best.problem, best.gold_normalized, "25"):
        assert shown in texts, shown
    assert any(t.startswith("Sure! The first step is to find the square root of 20.") for t in texts)
    markdown = " ".join(m.value for m in at.markdown)
    assert "**The problem asked**" in markdown and "**The problem the reasoning fits best**" in markdown
    assert {asked.problem_id, best.problem_id, f"{asked.problem_id} · sample 0 · run {R1ZERO_RUN}"} <= set(texts)
    [warning] = [w.value for w in at.warning]
    assert "fits_another" in warning and next(r.says for r in SUSPICION_RULES if r.name == "fits_another") in warning
    metrics = {m.label: m.value for m in at.metric}
    response = next(t for t in texts if t.startswith("Sure!"))
    case = fit_index("math500").fit_case(asked.problem_id, response)
    assert metrics["fit to asked"] == f"{case.own_fit:.3f}" and metrics["fit to best other"] == f"{case.rival_fit:.3f}"
    threshold = re.search(r"fits more than ([\d.]+)× better", " ".join(c.value for c in at.caption)).group(1)
    assert float(metrics["best other ÷ asked"].rstrip("×")) > float(threshold) == 1 + FIT_MARGIN
    assert not [i for i in at.info if "current rule" in i.value]  # the stored flag is what the current rule finds


def test_case_view_of_an_answer_only_response(db_import, monkeypatch):
    at = _case_page(db_import, monkeypatch, "geometry/65")
    [warning] = [w.value for w in at.warning]
    assert "answer_only" in warning
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["answer only"] == "yes" and metrics["fit to asked"] == "0.000"
    assert "no other problem of the data set shares anything with the reasoning" in " ".join(m.value for m in at.markdown)
    assert "Find OE</think> <answer>$30^{\\circ}$</answer>" in [t.value for t in at.text]  # as text, never HTML


def test_a_judgement_is_saved_in_the_store_and_shown_again(db_import, tmp_path, monkeypatch):
    """The page's one write: 'save judgement' stores the mark (with the rule that listed the case) in the
    judgements table; the samples are unchanged; a fresh page shows it in the table and in the case."""
    import duckdb

    from dashboard_seed import R1ZERO_RUN

    db = str(tmp_path / "store.duckdb")
    shutil.copy(db_import, db)

    def samples():
        con = duckdb.connect(db, read_only=True)
        try:
            return con.execute("SELECT * FROM samples ORDER BY ALL").fetchall()
        finally:
            con.close()

    before = samples()
    at = _case_page(db, monkeypatch, "prealgebra/1622")
    radio = next(r for r in at.radio if r.label == "judgement")
    assert radio.value is None
    radio.set_value("not_suspicious").run()
    at.text_input[0].set_value("hexagon of side 7: its own problem").run()
    next(b for b in at.button if b.label == "save judgement").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert [s.value for s in at.success] == ["Saved: not suspicious: the reasoning is about the problem asked (a false flag)."]
    from prl.store.db import Store

    [row] = Store(db, create=False).records("judgements_for_runs", run_ids=[R1ZERO_RUN])
    assert (row["problem_id"], row["judgement"], row["flagged_by"], row["note"]) == (
        "math500/test/prealgebra/1622.json", "not_suspicious", "fits_another", "hexagon of side 7: its own problem")
    assert samples() == before
    at = _case_page(db, monkeypatch, "prealgebra/1622")
    listed = _listed(at).set_index("problem_id")["judgement"]
    assert listed["math500/test/prealgebra/1622.json"] == "not_suspicious" and listed.isna().sum() == 2
    assert next(r for r in at.radio if r.label == "judgement").value == "not_suspicious"


def test_case_view_says_when_the_current_rule_no_longer_lists_a_stored_flag(db_import, tmp_path, monkeypatch):
    """A store graded by an earlier rule (its best_fit names another problem, as the rule of before issue 29 did for
    algebra/435's neighbour): the case says the current rule would not list it and how to regrade."""
    import duckdb

    db = str(tmp_path / "store.duckdb")
    shutil.copy(db_import, db)
    con = duckdb.connect(db)
    con.execute("UPDATE samples SET best_fit = 'math500/test/algebra/224.json' "
                "WHERE problem_id = 'math500/test/precalculus/807.json'")
    con.close()
    at = _case_page(db, monkeypatch, "precalculus/807")
    assert any("listed by: no rule" in i.value and "prl rescore" in i.value for i in at.info)
    assert "**The problem the reasoning fits best**" in [m.value for m in at.markdown]
    assert "math500/test/algebra/224.json" in [t.value for t in at.text]  # what the store says
