"""Shared by the exercise-checker tests."""

from __future__ import annotations

from hooklab.lab.exercises import Exercise, Verdict


def failures(verdict: Verdict) -> str:
    """The messages of a verdict that must not pass, joined by `` | `` (for substring asserts)."""
    assert not verdict.passed, str(verdict)
    return " | ".join(verdict.mistakes)


def mistakes(exercise: Exercise, fn: object) -> str:
    """Check ``fn`` with ``exercise``; it must fail, and the messages come back as :func:`failures` gives them."""
    return failures(exercise.check(fn))


def failed_checks(verdict: Verdict) -> dict[str, str]:
    """``{check description: message}`` for the checks of a verdict that failed."""
    return {d: m for ok, d, m in verdict.lines if not ok}
