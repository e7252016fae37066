"""The verifier: every verdict category, hard limits in the pool, pool == sequential (issue 4, WIP)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prl.data import synthetic
from prl.grading.verifier import VerifierPool, verify_one

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "response, gold, verdict",
    [
        ("so \\boxed{4.5\\times10^{33}}", "4.5 \\times 10^{33}", "correct"),  # minerva e-notation, normalised
        ("\\boxed{\\frac{1}{2}}", "0.5", "correct"),
        ("\\boxed{3}", "2", "wrong"),
        ("I am not sure.", "2", "no_answer"),
        ("", "2", "no_answer"),
        ("\\boxed{2}", "", "gold_unparsable"),
        ("\\boxed{2}", "}{", "gold_unparsable"),
        ("\\boxed{__import__('os').system('touch /tmp/prl_pwned')}", "2", "wrong"),
    ],
)
def test_each_verdict(response, gold, verdict):
    v = verify_one(response, gold)
    assert v.verdict == verdict, v
    assert v.score == (1.0 if verdict == "correct" else 0.0)
    assert not Path("/tmp/prl_pwned").exists()


CASES = [("so \\boxed{4.5\\times10^{33}}", "4.5 \\times 10^{33}"), ("\\boxed{\\frac{1}{2}}", "0.5"),
         ("\\boxed{3}", "2"), ("I am not sure.", "2"), ("\\boxed{2}", "2"), ("\\boxed{2}", "}{"), ("\\boxed{2}", "")]


def test_gold_cache_keeps_parsed_golds_and_changes_no_verdict():
    cache: dict = {}
    cached = [verify_one(r, g, gold_cache=cache).verdict for r, g in CASES + CASES]
    assert cached == [verify_one(r, g).verdict for r, g in CASES + CASES]
    # unparsable golds are not kept, nor golds only ever answered as written (the identity rule parses nothing)
    assert set(cache) == {"0.5", "2"}
    # The cache is what is consulted: a gold whose kept parse is "3" now accepts 3.
    seeded: dict = {}
    verify_one("\\boxed{3.0}", "3", gold_cache=seeded)  # parses the gold "3" (an answer written as the gold would not)
    cache["2"] = seeded["3"]
    assert verify_one("\\boxed{3}", "2", gold_cache=cache).verdict == "correct"


def test_gold_queue_keeps_each_worker_on_its_gold_and_all_workers_busy():
    from prl.grading.verifier import _GoldQueue

    pairs = [(f"r{i}", g) for i, g in enumerate("AAABBBC")]
    q = _GoldQueue(list(range(7)), pairs, workers=2)
    order = [(w, pairs[q.pop(w)][1]) for w in (0, 1, 0, 1, 0, 1, 0)]
    assert order == [(0, "A"), (1, "B"), (0, "A"), (1, "B"), (0, "A"), (1, "B"), (0, "C")]
    assert not q
    one_gold = _GoldQueue([0, 1, 2], [("x", "A")] * 3, workers=2)
    assert [one_gold.pop(w) for w in (0, 1, 0)] == [0, 1, 2]  # a lone gold still feeds both workers


# ─── Math-Verify's reported false positives and negatives: our policy for each ─────────────

def test_unequal_sides_do_not_pass_fixed_in_our_layer():
    """docs/architecture.md §Verdicts and Math-Verify records Math-Verify passing ``\\boxed{x = 1 = 2}``
    against 2 (it reads the last side).
    Policy: a boxed equation whose symbol-free sides differ answers nothing: wrong, saying why."""
    from math_verify import parse, verify

    assert verify(parse("\\boxed{2}"), parse("\\boxed{x = 1 = 2}"))  # Math-Verify alone passes it
    for response in ("\\boxed{x = 1 = 2}", "\\boxed{1 = 2}"):
        v = verify_one(response, "2")
        assert v.verdict == "wrong" and "chain of unequal sides" in v.detail
    # equal sides and a variable named with its value still pass
    for response in ("\\boxed{x = 2}", "\\boxed{x = 2 = \\frac{4}{2}}", "\\boxed{2}"):
        assert verify_one(response, "2").verdict == "correct", response
    assert verify_one("\\boxed{x \\le 2}", "x \\le 2").verdict == "correct"


def test_numeric_tolerance_between_exact_numbers_fixed_in_our_layer():
    """Math-Verify #14: ``1/2006!`` equals ``1/2004!`` (numbers compared to 6 decimals). Policy: exact
    rationals must be equal exactly; decimals keep the tolerance, and 50% ≡ 50 stays Math-Verify's reading."""
    from math_verify import parse, verify

    assert verify(parse("\\boxed{\\frac{1}{2004!}}"), parse("\\boxed{\\frac{1}{2006!}}"))  # its false positive
    v = verify_one("\\boxed{\\frac{1}{2006!}}", "\\frac{1}{2004!}")
    assert v.verdict == "wrong" and "issue #14" in v.detail
    assert verify_one("\\boxed{\\frac{1}{2004!}}", "\\frac{1}{2004!}").verdict == "correct"
    assert verify_one("\\boxed{\\frac{2}{2\\cdot 2004!}}", "\\frac{1}{2004!}").verdict == "correct"
    for response, gold in (("\\boxed{0.75}", "\\frac{3}{4}"), ("\\boxed{50\\%}", "50"), ("\\boxed{50\\%}", "\\frac12"),
                           ("\\boxed{2^{10}}", "1024"), ("\\boxed{10^{100000}}", "10^{100000}")):
        assert verify_one(response, gold).verdict == "correct", (response, gold)


def test_markdown_bold_answers_are_read_math_verify_76():
    """Math-Verify #76 (``**73**``, answers in markdown bold): this version reads them; policy: correct,
    and the answer shown is the number, not the markup."""
    for response in ("The answer is **73**", "So the final answer is **73**."):
        v = verify_one(response, "73")
        assert (v.verdict, v.extracted) == ("correct", "73"), response


def test_dfrac_and_tfrac_golds_equal_frac_math_verify_70():
    """Math-Verify #70 (``\\dfrac`` golds): with this version every spelling of a fraction matches."""
    for response, gold in (("\\boxed{\\frac{3}{4}}", "\\dfrac{3}{4}"), ("\\boxed{\\dfrac34}", "\\frac{3}{4}"),
                           ("\\boxed{\\tfrac{3}{4}}", "\\dfrac{3}{4}"), ("\\boxed{0.75}", "\\dfrac{3}{4}")):
        assert verify_one(response, gold).verdict == "correct", (response, gold)
    assert verify_one("\\boxed{\\dfrac{3}{5}}", "\\dfrac{3}{4}").verdict == "wrong"


def test_the_generic_gold_normalisation_applies_without_a_dataset(capsys):
    """e-notation golds are normalised for every data set: prl verify needs no --dataset for it."""
    import json

    from prl_cli.main import main

    assert main(["verify", "--gold", "4.5e33", "--response", "\\boxed{4.5\\times10^{33}}"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "correct" and out["gold_normalized"] == "4.5 \\times 10^{33}"
    from prl.data.datasets import normalize_gold

    for dataset in ("math500", "aime24", "my_file", "olympiad_bench"):
        assert normalize_gold(dataset, "$4.5e33$" if dataset != "olympiad_bench" else ["$4.5e33$"]) == "4.5 \\times 10^{33}"


def test_fractional_timeouts_are_refused():
    with pytest.raises(ValueError, match="^timeout_s"):
        verify_one("\\boxed{1}", "1", timeout_s=0.5)


def test_pool_matches_sequential_and_caches():
    records = synthetic.generate("test", 30)
    pairs = []
    for r in records:
        pairs += [(r["solution"], r["answer"]), (f"\\boxed{{{int(r['answer']) + 1}}}", r["answer"]),
                  ("no idea", r["answer"]), (r["solution"], r["answer"])]  # repeats, as real samples have
    sequential = [verify_one(resp, gold).verdict for resp, gold in pairs]
    with VerifierPool(2) as pool:
        pooled = [v.verdict for v in pool.verify(pairs)]
        assert pool.stats["cache_hits"] >= 30
    assert pooled == sequential
    assert sequential.count("correct") == 60 and sequential.count("no_answer") == 30


def test_poisoned_responses_cost_only_their_own_verdict():
    nested = "\\boxed{" + "{" * 10000 + "1" + "}" * 10000 + "}"
    pairs = [("\\boxed{2}", "2"), ("\\boxed{9^{9^{9^9}}}", "2"), (nested, "1"), ("\\boxed{5}", "2")]
    t0 = time.monotonic()
    with VerifierPool(2, wall_s=3) as pool:
        out = pool.verify(pairs)
    assert time.monotonic() - t0 < 30
    assert out[0].verdict == "correct" and out[3].verdict == "wrong"
    assert out[1].verdict in ("timeout", "wrong", "error") and out[2].verdict in ("timeout", "wrong", "error", "correct")


def _workers_start_with(tmp_path, monkeypatch, code: str) -> Path:
    """Every worker process the pool starts from here runs ``code`` first (a ``sitecustomize`` on the
    PYTHONPATH the spawned workers inherit), and records its pid in the returned file."""
    log = tmp_path / "started"
    (tmp_path / "sitecustomize.py").write_text(
        f"import os\nwith open({str(log)!r}, 'a') as f:\n    f.write(f'{{os.getpid()}}\\n')\n{code}\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p))
    return log


def test_a_workers_start_up_counts_against_no_item(tmp_path, monkeypatch):
    """A fresh worker's imports are start-up, not its first item's time (under load they outlasted the
    wall-clock limit and an outside file's first row was scored ``timeout``). Every worker here sleeps
    longer than the limit before it even imports: the first item, and the first after a kill (on the
    replacement worker), get their own verdicts; a slow item is still killed at the limit (Math-Verify's
    own timeout is longer, so the kill is the pool's)."""
    started = _workers_start_with(tmp_path, monkeypatch, "import time\ntime.sleep(4)")
    pairs = [("\\boxed{\\frac{6}{3}}", "2"), ("\\boxed{9^{9^{9^9}}}", "2"), ("\\boxed{\\frac{9}{3}}", "2")]
    with VerifierPool(1, timeout_s=10, wall_s=3) as pool:
        first = pool._workers[0][0].pid
        out = pool.verify(pairs)
        killed, replacement = pool.stats["killed"], pool._workers[0][0].pid
    assert [v.verdict for v in out] == ["correct", "timeout", "wrong"], out
    assert out[1].detail == "killed after 3 s wall clock" and killed == 1
    assert first != replacement and {str(first), str(replacement)} <= set(started.read_text().split())  # both slept


def test_a_worker_that_cannot_start_is_an_error_not_a_verdict(tmp_path, monkeypatch):
    _workers_start_with(tmp_path, monkeypatch, "import sys\nsys.modules['math_verify'] = None")
    with VerifierPool(1) as pool, pytest.raises(RuntimeError, match="^verifier worker could not start: .*math_verify"):
        pool.verify([("\\boxed{2}", "2")])


def test_verify_cli_explains_a_verdict():
    r = subprocess.run([sys.executable, "-m", "prl_cli", "verify", "--dataset", "minerva_math",
                        "--gold", "The mass is $\\boxed{4.5e33}$ g", "--response", "It is \\boxed{4.5\\times10^{33}}"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["verdict"] == "correct" and out["gold_normalized"] == "4.5 \\times 10^{33}"
    assert out["extracted_answer"] == "4.5\\times10^{33}"


def test_an_answer_tag_without_a_box_is_the_answer():
    """A real R1-Zero response (tests/data/external/jsonl-qwen2.5-math-1.5b-r1zero, MATH-500
    test/algebra/435, gold 25) writes 5 in its reasoning and <answer>25</answer>: Math-Verify alone reads 5."""
    import json
    from pathlib import Path

    from math_verify import parse, verify

    path = Path(__file__).parent / "data" / "external" / "jsonl-qwen2.5-math-1.5b-r1zero" / "results.jsonl"
    row = next(r for r in map(json.loads, path.read_text().splitlines()) if "ceil" in r["prompt"] and "sqrt{20}" in r["prompt"])
    response = row["response"]
    assert "<answer>25</answer>" in response and "\\boxed" not in response
    assert not verify(parse("\\boxed{25}"), parse(response))  # the false negative Math-Verify alone gives
    v = verify_one(response, "25")
    assert (v.verdict, v.extracted) == ("correct", "25")
    # a tag whose content is no answer is no answer, whatever numbers the reasoning has
    assert verify_one("so x = 0.35625 </think> <answer> Yes, the answer is correct. </answer>", ".35625").verdict == "no_answer"
    assert verify_one("\\boxed{3} then <answer>4</answer>", "3").verdict == "correct"  # a box wins over a tag


# ─── issue 28 item 7: outside cases and the equivalent-forms hunt (bench/verifier_forms.py) ─────

def test_an_answer_written_as_the_gold_is_correct_even_when_it_is_no_number():
    """A clock time and ``\\frac{1}{0}`` parse to ``zoo``; Math-Verify's comparison of two ``zoo`` raises, so
    with ``raise_on_error=True`` the answer identical to the gold got ``error``. Policy: an answer (box or
    tag content) equal to the gold once spaces and ``$`` are dropped is correct without Math-Verify."""
    from math_verify import parse, verify

    from prl.grading.verifier import equivalent_answers

    with pytest.raises(ValueError):
        verify(parse("\\boxed{12:00}"), parse("\\boxed{12:00}"), raise_on_error=True)  # what gave `error`
    for response, gold in (("\\boxed{12:00}", "12:00"), ("\\boxed{\\frac{1}{0}}", "\\frac{1}{0}"),
                           ("<answer>12 : 00</answer>", "12:00"), ("\\boxed{58, 500}", "58,500"),
                           ("\\boxed{90^{\\circ},60^{\\circ}}", "90^{\\circ}$,$60^{\\circ}")):
        v = verify_one(response, gold)
        assert (v.verdict, v.detail) == ("correct", "the answer is written as the gold"), (response, gold)
    # spaces do not count in TeX math, except the one a command needs before a letter
    assert verify_one("\\boxed{\\pir}", "\\pi r").detail != "the answer is written as the gold"
    assert equivalent_answers("12:00", "12 : 00")


def test_a_comparison_that_raises_does_not_hide_one_that_passes():
    """Math-Verify's verify stops at the first (gold, answer) pair that raises, before its string pair.
    Policy: every pair is tried, strings first; a raising pair never hides a passing one; when none
    passes but some pair was compared, the answer is wrong and the detail names the error; ``error``
    only when no pair could be compared at all."""
    from math_verify import parse

    from prl.grading.verifier import compare

    assert compare(parse("\\boxed{12:00}"), parse("$12:00$"), 5) == (True, "")
    for response, gold in (("The meeting is at $12:00$.", "12:00"), ("\\boxed{\\dfrac{1}{0}}", "\\frac{1}{0}")):
        assert verify_one(response, gold).verdict == "correct", response  # not written as the gold: compared
    for response, gold in (("\\boxed{11:00}", "12:00"), ("\\boxed{\\frac{2}{0}}", "\\frac{1}{0}")):
        v = verify_one(response, gold)
        assert v.verdict == "wrong" and "could not compare them as math (ValueError" in v.detail, v
    zoo = parse("\\boxed{\\frac{1}{0}}")[:1]  # no string reading: nothing can be compared
    with pytest.raises(ValueError):
        compare(zoo, zoo, 5)


def test_a_gold_with_mathrm_e_is_read_whole():
    """``1 - \\frac{1}{\\mathrm{e}}``: Math-Verify turns ``\\mathrm`` into ``\\text`` and its unit stripping cuts
    ``\\text{e}}`` off the end, leaving ``1 - \\frac{1}{``. Policy: an upright single letter is the letter,
    in golds and answers alike (``e`` is then Euler's number)."""
    from math_verify import parse

    assert parse("\\boxed{1 - \\frac{1}{\\mathrm{e}}}") == ["1 - \\frac{1}{"]  # the truncated gold
    assert verify_one("\\boxed{1-\\frac{1}{e}}", "1 - \\frac{1}{\\mathrm{e}}").verdict == "correct"
    assert verify_one("\\boxed{1-\\frac{1}{{\\rm e}}}", "1 - \\frac{1}{\\mathrm{e}}").verdict == "correct"
    assert verify_one("\\boxed{1-\\frac{1}{\\mathrm{e}}}", "1-\\frac{1}{e}").verdict == "correct"
    assert verify_one("\\boxed{\\mathrm{e}^{t} / 3}", "e^{t} / 3").verdict == "correct"
    assert verify_one("\\boxed{1-\\frac{2}{e}}", "1 - \\frac{1}{\\mathrm{e}}").verdict == "wrong"


def test_a_named_value_is_no_side_of_unequal_sides():
    """``C(8, 2) = 28`` (tests/data/external MATH-500 row 207, in an answer tag) and ``f(2) = 7``: an
    undefined function applied to numbers has no free symbols, so the unequal-sides rule compared
    ``C(8, 2)`` with 28 and scored them wrong; Math-Verify alone passes them. Policy: a side with a
    variable or an undefined function names the value and is not compared."""
    from math_verify import parse, verify

    for response, gold in (("\\boxed{C(8, 2) = 28}", "28"), ("\\boxed{f(2) = 7}", "7"), ("<answer> C(8, 2) = 28 </answer>", "28")):
        assert verify(parse("\\boxed{" + gold + "}"), parse(response))  # Math-Verify alone passes it
        assert verify_one(response, gold).verdict == "correct", response
    v = verify_one("\\boxed{f(2) = 7 = 8}", "8")  # the numeric sides still have to agree
    assert v.verdict == "wrong" and "chain of unequal sides" in v.detail
    assert verify_one("\\boxed{C(8, 2) = 27}", "28").verdict == "wrong"


def test_the_unequal_sides_detail_names_what_was_examined():
    """The rule examines the answer as given (box, else answer tag, else what Math-Verify read from the
    text) and its detail says which; it said "boxed" for all three."""
    for response, source in (("\\boxed{1 = 2}", "the boxed answer '1 = 2'"),
                             ("<answer>x = 3 = 2</answer>", "the answer tag's content 'x = 3 = 2'"),
                             ("Therefore $1 = 2$.", "the answer Math-Verify read from the response (no box, no answer tag) '1 = 2'")):
        v = verify_one(response, "2")
        assert v.verdict == "wrong" and v.detail.startswith(source + " is a chain of unequal sides"), v


def test_a_sentence_in_the_answer_tag_is_not_one_chain_of_sides():
    """Real R1-Zero answer tags (tests/data/external/jsonl-qwen2.5-math-1.5b-r1zero, found by
    bench/external.py against lighteval's verdicts): a sentence holding several equations was split at
    every ``=`` and sides of different equations compared (``150, 150×24`` against ``3600, ∴ … 60.``;
    ``So, $\\sqrt{242}`` against ``11\\sqrt{2}$.``), so right answers were scored wrong. Policy
    (``clause_read``): in a tag, the rule examines what Math-Verify read — its string when that holds an
    equation (a LaTeX chain, read whole), else the clause around it between math delimiters and clause
    marks. A chain the answer rests on is still examined whole."""
    import json
    from pathlib import Path

    from prl.grading.verifier import clause_read

    path = Path(__file__).parent / "data" / "external" / "jsonl-qwen2.5-math-1.5b-r1zero" / "results.jsonl"
    lines = path.read_text().splitlines()
    for line, gold in ((179, "60"), (32, "11\\sqrt2"), (192, "0"), (219, "(-1,6)"), (364, "2"), (347, "66"), (200, "17")):
        response = json.loads(lines[line - 1])["response"]
        v = verify_one(response, gold)
        assert v.verdict == "correct", (line, v)
    assert clause_read("10×15=150, 150×24=3600, ∴ the root of 3600 is 60.", "60") == "the root of 3600 is 60"
    assert clause_read("So $x = 1 = 2$.", "x = 1 = 2") == "x = 1 = 2"
    assert clause_read("then C(8, 2) = 28", "28") == "then C(8, 2) = 28"  # a comma inside brackets is no clause mark
    for response in ("<answer>x = 3 = 2</answer>", "<answer>So, $1 = 2$.</answer>", "<answer>10×15=150, 3 = 2</answer>",
                     "<answer>The answer: 1 = 2.</answer>"):
        v = verify_one(response, "2")
        assert v.verdict == "wrong" and "chain of unequal sides" in v.detail, (response, v)
    # the clause the verdict rests on keeps the rule: row 406 writes (5 3)! for (5-3)!, a false chain ending on 60
    v = verify_one(json.loads(lines[405])["response"], "60")
    assert v.verdict == "wrong" and "'taken 3 at a time = 5!/{(5 3)!} = 60' is a chain of unequal sides" in v.detail, v


def test_an_answers_symbols_take_the_golds_assumptions():
    """bench/verifier_forms.py, spaces_removed: Math-Verify makes every symbol non-real when a standalone
    ``i`` appears (``3+3 i``) and real otherwise (``3+3i``), and sympy's two ``i`` differ, so minerva #85,
    #87 and #108 failed written without spaces. Policy: an answer's symbol named like a gold's is the gold's."""
    for response, gold in (("\\boxed{3 + 3i}", "3+3 i"), ("\\boxed{\\frac{e^{2it}}{2+2i}}", "\\frac{e^{2 i t}}{(2+2 i)}"),
                           ("\\boxed{\\frac{4A}{3+3i}e^{it}}", "\\frac{4 A}{3+3 i} e^{i t}")):
        assert verify_one(response, gold).verdict == "correct", response
    assert verify_one("\\boxed{3+4i}", "3+3 i").verdict == "wrong"


def test_a_text_subscript_is_the_plain_subscript():
    """minerva #139 ``\\lambda_{\\text {red}} / \\sqrt{2}``: ``\\lambda_{red}`` and ``\\lambda_{\\mathrm{red}}`` were
    other symbols. Policy: a subscript in ``\\text``/``\\mathrm`` is the plain subscript."""
    gold = "\\lambda_{\\text {red}} / \\sqrt{2}"
    for response in ("\\boxed{\\lambda_{red} / \\sqrt{2}}", "\\boxed{\\lambda_{\\mathrm{red}}/\\sqrt{2}}"):
        assert verify_one(response, gold).verdict == "correct", response
    assert verify_one("\\boxed{\\lambda_{blue} / \\sqrt{2}}", gold).verdict == "wrong"


def test_an_answer_stated_as_a_definition_is_its_value():
    """bench/verifier_forms.py, x_prefix: ``x = \\text{east}`` and ``x = m`` failed where ``x = 5`` passes,
    because Math-Verify's unit stripping cuts the value (``x =``). Policy: against a gold that is no
    equation, ``name = value`` is also read as its value."""
    for response, gold in (("\\boxed{x = \\text{east}}", "\\text{east}"), ("\\boxed{x = m}", "m"),
                           ("\\boxed{x = \\text{(C)}}", "\\text{(C)}"),
                           ("\\boxed{f(1) = \\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)")):
        assert verify_one(response, gold).verdict == "correct", response
    for response, gold in (("\\boxed{x = \\text{west}}", "\\text{east}"), ("\\boxed{x = n}", "m"), ("\\boxed{y = 3x}", "y = 2x"),
                           ("\\boxed{x = 1 = m}", "m")):
        assert verify_one(response, gold).verdict == "wrong", response


def test_every_bundled_gold_passes_written_back_in_equivalent_forms():
    """bench/verifier_forms.py on the first golds of each benchmark (the full run is the bench): every form
    of a gold that Math-Verify reads whole passes; the run's results file records the rest."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import verifier_forms
    finally:
        sys.path.remove(str(ROOT / "bench"))
    res = verifier_forms.main(["--limit", "12"])
    failing = {form: f["failing_ids"] for form, f in res["forms"].items() if f["failing_ids"]}
    assert set(res["forms"]) >= {"verbatim", "answer_tag", "x_prefix", "definition", "spaces_removed", "frac_swap"}
    assert not {form: [i for i in ids if i not in res["flagged_golds"]] for form, ids in failing.items()
                if any(i not in res["flagged_golds"] for i in ids)}
