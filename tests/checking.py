"""Shared by the exercise-checker tests."""

from __future__ import annotations

from hooklab.checker import Verdict


def failures(verdict: Verdict) -> str:
    """The messages of a verdict that must not pass, joined by `` | `` (for substring asserts)."""
    assert not verdict.passed, str(verdict)
    return " | ".join(verdict.mistakes)
