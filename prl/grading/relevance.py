"""Problem relevance of a response: the signal behind "suspicious passes" (paper, Appendix C).

A verifier checks only the final answer. Appendix C shows responses that pass while their
reasoning is about a different problem, and responses that give nothing but an answer. Two
measurable per-sample signals keep that apart from correctness:

``relevance`` — content-term recall of the problem in the reasoning:

    relevance = |terms(problem) ∩ terms(reasoning)| / |terms(problem)|

* ``reasoning`` is the response without its final ``\\boxed{…}`` (the answer itself must not
  count as referring to the problem).
* ``terms(text)``: numbers (``27``, ``27.0`` and ``027`` are the same term) and lower-cased
  words of three or more letters that are not English function words; LaTeX command names
  (``\\frac``) and single-letter variables are ignored (too generic to show relevance).
* ``None`` when the problem has no content terms. Range [0, 1]: 1 = every number and content
  word of the problem reappears in the reasoning.

``answer_only`` — the reasoning has fewer than :data:`ANSWER_ONLY_MAX_WORDS` word tokens
(e.g. "The answer is \\boxed{5}").

A sample is a *suspicious pass* when its verdict is ``correct`` and it is answer-only or its
relevance is below :data:`SUSPICIOUS_BELOW` (the store's ``suspicious_passes`` view). The
threshold was set on the benchmarks' own reference solutions (``python bench/relevance.py``,
figures in bench/RESULTS.md): below 0.15 fall 2% of math500 and 4% of olympiad_bench
solutions scored against their own problem, but 58% and 48% scored against a random other
problem; minerva_math's terse physics solutions are harder (36% vs 91%). It is a screen for
reading, not a verdict: a terse but correct derivation can score low, and a response can
quote the problem and still reason wrongly.
"""

from __future__ import annotations

import re

from prl.data.datasets import last_boxed

SUSPICIOUS_BELOW = 0.15
"""Relevance below which a correct sample is listed as a suspicious pass (also in sql/schema.sql)."""

ANSWER_ONLY_MAX_WORDS = 6
"""A reasoning part with fewer word tokens than this is "answer only"."""

_STOPWORDS = frozenset("""
the and for are but not you all any can had her was one our out has him his how its may new now
old see two way who did get let put say she too use that with have this will your from they been
than them then were what when which while would there their these those into such only also each
some more most other over same very just find what where does many much both like make made given
let's lets think step output final answer within boxed value number numbers following compute
determine calculate show prove suppose assume express simplest form
""".split())

_LATEX_CMD = re.compile(r"\\[A-Za-z]+")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w])")
_WORD = re.compile(r"[A-Za-z]{3,}")
_WORD_TOKEN = re.compile(r"[A-Za-z0-9]+")


def _norm_number(s: str) -> str:
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return s.lstrip("0") or "0"


def terms(text: str) -> set[str]:
    """The content terms of ``text`` (see the module docstring)."""
    text = _LATEX_CMD.sub(" ", text)
    nums = {_norm_number(m) for m in _NUMBER.findall(text)}
    words = {w.lower() for w in _WORD.findall(text)} - _STOPWORDS
    return nums | words


def reasoning_part(response: str) -> str:
    """The response without its last ``\\boxed{…}``."""
    boxed = last_boxed(response)
    if boxed is None:
        return response
    cut = response.rfind(boxed)
    start = response.rfind("\\", 0, cut)
    return response[:start] + response[cut + len(boxed) + 1:] if start >= 0 else response


def relevance(problem: str, response: str) -> float | None:
    """Share of the problem's content terms that the reasoning uses, in [0, 1]; None if it has none."""
    wanted = terms(problem)
    if not wanted:
        return None
    return len(wanted & terms(reasoning_part(response))) / len(wanted)


def answer_only(response: str) -> bool:
    """Whether the response is (almost) nothing but its final answer."""
    return len(_WORD_TOKEN.findall(_LATEX_CMD.sub(" ", reasoning_part(response)))) < ANSWER_ONLY_MAX_WORDS


def is_suspicious_pass(verdict: str, rel: float | None, only_answer: bool) -> bool:
    """The rule of the store's ``suspicious_passes`` view, for code that has not stored the sample."""
    return verdict == "correct" and (only_answer or (rel is not None and rel < SUSPICIOUS_BELOW))
