"""In-process grading shorthand: True when the verifier's verdict is ``correct``.

For batches of model outputs use :class:`prl.verifier.VerifierPool` (hard limits, cache); this
is for quick checks where a bool is all that is needed (SFT accuracy, the demo's table).
"""

from __future__ import annotations

from .verifier import verify_one


def is_correct(response: str, gold: str, *, timeout_s: int = 5) -> bool:
    """True when the response's final answer equals ``gold`` by Math-Verify."""
    return verify_one(response, gold, timeout_s=timeout_s).verdict == "correct"
