"""Answer grading with Math-Verify, in process (the fault-tolerant process-pool verifier of
the evaluation path builds on the same calls)."""

from __future__ import annotations


def is_correct(response: str, gold: str, *, timeout_s: int = 5) -> bool:
    """True when the response's final answer equals ``gold`` by Math-Verify."""
    from math_verify import parse, verify

    try:
        pred = parse(response, parsing_timeout=timeout_s)
        ref = parse("\\boxed{" + gold + "}", parsing_timeout=timeout_s)
        return bool(pred) and bool(verify(ref, pred, timeout_seconds=timeout_s))
    except BaseException:  # math_verify's TimeoutException derives from BaseException
        return False
