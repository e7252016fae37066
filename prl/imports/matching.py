"""Which benchmark problem a source row answers: by id where the source has one, else by text.

Texts are compared by their **text key**: lower case, letters and digits only. That survives
what tools do to a problem on its way into a prompt — whitespace, ``$`` signs, escaped
backslashes (``\\\\frac`` in a doubly encoded JSON), quotes around it, a markdown wrapper — and
nothing that changes the mathematics' letters or digits. A row matches the problem whose key
equals its own, else the problem with the longest key contained in it (the row's text is a
prompt that wraps the problem: lighteval's instruction, verl's chat template, a system prompt).
Keys shorter than :data:`MIN_CONTAINED` characters never match by containment (too short to
be evidence). Two problems with the same key are ambiguous and match nothing.

An id match counts only when the text does not contradict it: tools number rows their own way
(lm-eval's ``doc_id`` is its position in its copy of the data), so where the row has text that
fits another problem better, the text wins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from prl.data.datasets import Problem
from prl.imports.formats import SourceRow

MIN_CONTAINED = 10
"""Shortest problem text key that may match by being contained in a longer row text."""

_NOT_KEY = re.compile(r"[^0-9a-z]+")


def text_key(text: str) -> str:
    """Lower-case letters and digits of ``text``, in order: what two copies of one problem share."""
    return _NOT_KEY.sub("", text.lower())


@dataclass(frozen=True)
class Match:
    """The problem a row answers (None if none) and how that was decided."""

    problem: Problem | None
    how: str
    """'id', 'text' (equal keys), 'contained' (the row's text wraps the problem) or 'unmatched'."""
    reason: str = ""
    """Why nothing matched (unmatched rows are listed with it)."""


class ProblemIndex:
    """The problems of one data set, looked up by source id and by text key."""

    def __init__(self, problems: Sequence[Problem]):
        self.dataset = problems[0].dataset if problems else ""
        self._by_id: dict[str, Problem] = {}
        for p in problems:
            self._by_id[p.problem_id] = p
            self._by_id.setdefault(p.problem_id.split("/", 1)[-1], p)
        self._by_key: dict[str, list[Problem]] = {}
        for p in problems:
            self._by_key.setdefault(text_key(p.problem), []).append(p)
        self._contained = sorted((k for k in self._by_key if len(k) >= MIN_CONTAINED), key=len, reverse=True)

    def by_text(self, text: str) -> Match:
        key = text_key(text)
        if not key:
            return Match(None, "unmatched", "the row's problem text is empty")
        hit = self._by_key.get(key)
        how = "text"
        if hit is None:
            found = next((k for k in self._contained if k in key), None)
            hit, how = (self._by_key[found], "contained") if found is not None else (None, "")
        if hit is None:
            return Match(None, "unmatched", f"no problem of {self.dataset} has this text")
        if len(hit) > 1:
            return Match(None, "unmatched", "ambiguous: the text is that of " + ", ".join(p.problem_id for p in hit))
        return Match(hit[0], how)

    def match(self, row: SourceRow) -> Match:
        by_id = self._by_id.get(row.problem_id) if row.problem_id is not None else None
        if row.problem_text is None:
            if by_id is not None:
                return Match(by_id, "id")
            return Match(None, "unmatched", f"id {row.problem_id!r} is not a problem of {self.dataset}"
                         if row.problem_id is not None else "the row has neither an id nor a problem text")
        by_text = self.by_text(row.problem_text)
        if by_id is not None and (by_text.problem is None or by_text.problem == by_id):
            return Match(by_id, "id")
        return by_text
