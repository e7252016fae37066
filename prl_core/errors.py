"""The one base class of the errors a user can fix."""

from __future__ import annotations


class UserError(Exception):
    """Something the user gave (a flag, a config file, a data file, a store, a model directory) cannot be used;
    the message says what and how to fix it. The ``prl`` command prints it as one ``error:`` line (exit status
    2) without a traceback. Each package's own error classes derive from it (``ConfigError``, ``EvalError``,
    ``StoreError``, …), usually together with ``ValueError`` or ``RuntimeError``."""
