"""Grading: Math-Verify verdicts (``verifier``: the verdict names, worker pool, cache) and the
problem-relevance score behind suspicious passes (``relevance``)."""
