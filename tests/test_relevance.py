"""The relevance score behind suspicious passes, on hand-made cases."""

from __future__ import annotations

from hypothesis import given, strategies as st

from prl.grading.relevance import answer_only, is_suspicious_pass, reasoning_part, relevance, terms


def test_terms_are_numbers_and_content_words():
    assert terms("Tom has 027 apples and 3.50 pears; find the total.") == {"27", "3.5", "tom", "apples", "pears", "total"}
    assert terms(r"Compute $\frac{x}{y}$") == set()  # LaTeX commands, single letters and stop words are not terms


def test_reasoning_excludes_the_final_boxed_answer():
    assert reasoning_part(r"so 4 + 3 = 7, giving \boxed{7}.") == "so 4 + 3 = 7, giving ."
    problem = "What is 12 plus 30?"
    assert relevance(problem, r"\boxed{42}") == 0.0  # the answer alone does not refer to the problem
    assert relevance(problem, r"12 plus 30 is \boxed{42}") == 1.0


def test_appendix_c_case_scores_low():
    problem = "A train travels 120 kilometres in 2 hours. What is its average speed in kilometres per hour?"
    on_topic = r"The train covers 120 kilometres in 2 hours, so its speed is 120 / 2 = 60 kilometres per hour. \boxed{60}"
    off_topic = r"Let the rectangle have sides 6 and 10; its area is 60 square units. \boxed{60}"
    assert relevance(problem, on_topic) >= 0.8
    assert relevance(problem, off_topic) < 0.15
    assert is_suspicious_pass("correct", relevance(problem, off_topic), answer_only(off_topic))
    assert not is_suspicious_pass("correct", relevance(problem, on_topic), answer_only(on_topic))
    assert not is_suspicious_pass("wrong", 0.0, True)  # only passes can be suspicious


def test_answer_only():
    assert answer_only(r"The answer is \boxed{5}")
    assert answer_only(r"\boxed{\frac{1}{2}}")
    assert not answer_only(r"Adding the two numbers 3 and 4 gives 7 in total, so \boxed{7}")


def test_problem_without_terms_has_no_score():
    assert relevance(r"$x$?", "anything") is None


@given(st.text(max_size=300), st.text(max_size=300))
def test_relevance_is_a_share(problem, response):
    r = relevance(problem, response)
    assert r is None or 0.0 <= r <= 1.0
    answer_only(response)  # never raises


def test_long_and_nested_input_is_fast():
    import time

    t0 = time.perf_counter()
    relevance("x " * 10_000 + "apples 3", "{" * 10_000 + r"\boxed{" * 1000 + "}" * 11_000)
    assert time.perf_counter() - t0 < 5  # linear-time regexes (a bound against pathological backtracking)


# ─── fits another problem better: the Appendix-C case ──────────────────────────────────────

def _olympiad():
    import json

    from prl.data.datasets import bundled_path, load_dataset

    problems, _ = load_dataset("olympiad_bench")
    rows = [json.loads(line) for line in bundled_path("olympiad_bench").read_text().splitlines()]
    solutions = {p.problem_id: " ".join(r["solution"]) if isinstance(r["solution"], list) else r["solution"]
                 for p, r in zip(problems, rows)}
    return {p.problem_id: p for p in problems}, solutions


def test_the_appendix_c_problem_given_another_problems_solution_with_the_same_gold_is_flagged():
    """The paper's Appendix-C problem (olympiad_bench/1645, a cubic sequence, gold 0) answered by reasoning
    about other problems whose gold is also 0: a right answer, the wrong problem."""
    from prl.grading.relevance import fit_index

    problems, solutions = _olympiad()
    asked = problems["olympiad_bench/1645"]
    assert asked.gold_normalized == "0" and "cubic sequence" in asked.problem
    index = fit_index("olympiad_bench")
    assert index.best_fit(asked.problem_id, solutions[asked.problem_id]) == asked.problem_id  # its own: not flagged
    others = [pid for pid, p in problems.items() if p.gold_normalized == "0" and pid != asked.problem_id]
    assert len(others) >= 3
    for pid in others:
        best = index.best_fit(asked.problem_id, solutions[pid])
        assert best != asked.problem_id, pid
        assert is_suspicious_pass("correct", relevance(asked.problem, solutions[pid]), False, best, asked.problem_id)
    assert not is_suspicious_pass("correct", 0.01, False, asked.problem_id, asked.problem_id)  # own fit wins over overlap


def test_parts_of_one_context_never_count_against_each_other():
    from prl.data.datasets import Problem
    from prl.grading.relevance import FitIndex

    ctx = "A bag holds 7 red and 5 blue marbles; marbles are drawn without replacement."
    ps = [Problem("d", "d/a", ctx + "\n\n(a) Find the probability the first two drawn are red.", "7/22", "", {"context": ctx}),
          Problem("d", "d/b", ctx + "\n\n(b) Find the expected number of blue marbles among the first four.", "5/3", "",
                  {"context": ctx}),
          Problem("d", "d/c", "Compute the number of positive divisors of 3600.", "45", "")]
    index = FitIndex(ps)
    part_b = ("Among the first four marbles drawn without replacement from 7 red and 5 blue, each blue marble is among "
              "the first four with probability 4/12, so the expected number of blue marbles is 5 * 4/12 = 5/3. \\boxed{5/3}")
    assert index.best_fit("d/a", part_b) == "d/a"  # the sibling fits better, but a tie of parts is no swap
    divisors = "3600 = 2^4 * 3^2 * 5^2, so the number of positive divisors of 3600 is 5 * 3 * 3 = 45. \\boxed{45}"
    assert index.best_fit("d/a", divisors) == "d/c"
    assert index.best_fit("d/x", divisors) is None  # not in the index: not computed


# ─── real responses: notation, answer tags, the false flag of issue 29 ──────────────────────────

def test_math_notation_and_its_plain_text_are_the_same_tokens():
    from prl.grading.relevance import fit_grams, fit_tokens

    assert fit_tokens(r"\frac{\sec x}{\sin x}") == fit_tokens("sec x / sin x") == ["sec", "x", "sin", "x"]
    assert fit_tokens(r"\cos \left( \frac{2 \pi}{15} \right)") == fit_tokens("cos(2π/15)") == ["cos", "2", "pi", "15"]
    assert fit_tokens(r"$18^\circ$") == fit_tokens("18°") == fit_tokens("18 degrees") == ["18", "circ"]
    assert "to each other" not in fit_grams("we want the terms to each other")  # function words alone: no evidence
    assert "want the terms" in fit_grams("we want the terms to each other")


def test_an_answer_tag_and_markup_are_not_reasoning():
    r1zero = "Find OE</think> <answer>$30^{\\circ}$</answer>"  # a real R1-Zero response (MATH-500 geometry/65)
    assert reasoning_part(r1zero).split() == ["Find", "OE"]
    assert answer_only(r1zero)
    assert not answer_only("We use AM-GM on the four terms, equality when all are equal. </think> <answer>16</answer>")
    assert reasoning_part(r"x \boxed{2} <answer>3</answer>") == "x   3 "  # a box wins over the tag (the verifier's order)


def _ds7b_response(problem_marker: str) -> str:
    import pandas as pd
    from pathlib import Path

    path = next((Path(__file__).parent / "data" / "external" / "lighteval-deepseek-r1-distill-qwen-7b")
                .glob("details_*.parquet"))
    rows = pd.read_parquet(path, columns=["example", "predictions"])
    [hit] = [p[0] for e, p in zip(rows["example"], rows["predictions"]) if problem_marker in e]
    return hit


def test_the_false_flag_of_issue_29_long_reasoning_in_plain_text_fits_its_own_problem():
    """DeepSeek-R1-Distill-Qwen-7B on MATH-500 precalculus/826 (tests/data/external, gtxygyzb/Saturn-code), a
    6,113-character derivation of the product of cosines that writes cos(2π/15) where the problem writes
    ``\\cos \\left( \\frac{2 \\pi}{15} \\right)``: the rule once listed it as fitting algebra/1343 better."""
    from prl.grading.relevance import FIT_MARGIN, fit_index

    response = _ds7b_response(r"\cos \left( \frac{2 \pi}{15} \right)")
    index = fit_index("math500")
    asked = "math500/test/precalculus/826.json"
    case = index.fit_case(asked, response)
    assert case.best_fit == asked == index.best_fit(asked, response)
    assert case.rival_fit < case.own_fit  # the asked problem now fits best outright, not just within the margin
    assert not is_suspicious_pass("correct", relevance(index.problem(asked).problem, response), answer_only(response),
                                  case.best_fit, asked)
    # the same real reasoning given to another problem is the Appendix-C case, and is listed
    other = "math500/test/algebra/1343.json"
    swapped = index.fit_case(other, response)
    assert swapped.best_fit == asked and swapped.rival_fit > swapped.own_fit * (1 + FIT_MARGIN)


def test_fit_case_explains_best_fit():
    from prl.data.datasets import Problem
    from prl.grading.relevance import FitIndex

    ps = [Problem("d", "d/1", "Compute the number of positive divisors of 3600.", "45", ""),
          Problem("d", "d/2", "A train travels 120 kilometres in 2 hours. Find its speed.", "60", ""),
          Problem("d", "d/3", "Find the area of a rectangle with sides 6 and 10.", "60", "")]
    index = FitIndex(ps)
    rect = r"The rectangle with sides 6 and 10 has area 6 * 10 = 60. \boxed{60}"
    case = index.fit_case("d/2", rect)
    assert (case.asked, case.rival, case.best_fit) == ("d/2", "d/3", "d/3") and case.ratio is None  # nothing of d/2
    own = index.fit_case("d/3", rect)
    assert own.best_fit == "d/3" and own.own_fit > 0 and own.rival_fit < own.own_fit
    assert index.problem("d/3").gold_normalized == "60" and index.problem("d/9") is None and index.fit_case("d/9", rect) is None
