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
