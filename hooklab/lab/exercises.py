"""Exercise checkers: run a learner's function on fixed cases and say precisely what is wrong.

An :class:`Exercise` is a list of checks. Each check gets the learner's function and raises
:class:`Mistake` with a friendly sentence when something is off. ``exercise.check(fn)``
returns a :class:`Verdict` that prints one line per check.

>>> from hooklab.lab.exercises import Exercise, Mistake
>>> def returns_double(fn):
...     got = fn(3)
...     if got is None:
...         raise Mistake("your function returns None: add `return x * 2`.")
...     if got != 6:
...         raise Mistake(f"for 3 it returned {got!r}, expected 6.")
>>> ex = Exercise("Double it", [("doubles 3", returns_double)])
>>> print(ex.check(lambda x: x * 2))
Double it: all 1 checks passed
  ✓ doubles 3
>>> print(ex.check(lambda x: None))
Double it: 0 of 1 checks passed
  ✗ doubles 3: your function returns None: add `return x * 2`.
"""

from __future__ import annotations

import html
import importlib
import inspect
import os
import sysconfig
import textwrap
import traceback
from pathlib import Path
from dataclasses import dataclass, field
from typing import Callable, Sequence

from ..kinds import check_hook_signature

__all__ = ["Exercise", "Mistake", "NotWritten", "Verdict", "Solution", "solutions_hidden"]


class Mistake(Exception):
    """Raised by a check: its message tells the learner what is wrong and how to fix it."""


class NotWritten(Mistake):
    """Raised by a check when the learner's function is still the stub (e.g. it returns None where a
    result is due): the verdict then says "not written yet" once, not once per check."""


@dataclass
class Verdict:
    """The result of checking: one ``(passed, description, message)`` line per check."""

    title: str
    lines: list[tuple[bool, str, str]] = field(default_factory=list)
    written: bool = True

    @property
    def passed(self) -> bool:
        return bool(self.lines) and all(ok for ok, _, _ in self.lines)

    def __bool__(self) -> bool:
        return self.passed

    @property
    def mistakes(self) -> list[str]:
        """The messages of the checks that failed."""
        return [msg for ok, _, msg in self.lines if not ok]

    def __str__(self) -> str:
        good = sum(ok for ok, _, _ in self.lines)
        head = (f"{self.title}: all {good} checks passed" if self.passed else f"{self.title}: not written yet"
                if not self.written else f"{self.title}: {good} of {len(self.lines)} checks passed")
        body = [f"  ✓ {d}" if ok else f"  ✗ {d}: {m}" for ok, d, m in self.lines]
        return "\n".join([head, *body])

    __repr__ = __str__

    def _repr_html_(self) -> str:
        color = "#1a7f37" if self.passed else "#b3261e"
        items = "".join(
            f"<li>{'✅' if ok else '❌'} {html.escape(d)}" + ("" if ok else f": <b>{html.escape(m)}</b>") + "</li>"
            for ok, d, m in self.lines
        )
        head = html.escape(str(self).splitlines()[0])
        return f"<div style='border-left:4px solid {color};padding-left:8px'><b>{head}</b><ul>{items}</ul></div>"


Check = tuple[str, Callable[[Callable], None]]


class Exercise:
    """A titled list of checks, optionally with a hook kind whose signature is checked first.

    Args:
        title: shown at the top of the verdict.
        checks: ``(description, check)`` pairs; ``check(fn)`` raises :class:`Mistake` when ``fn`` is
            wrong; any other exception is reported with the line that raised it (the learner's or the check's).
        hook_kind: if given (``"tensor"``, ``"forward"``, …), the signature is checked first
            and the other checks are skipped when it does not fit.
        solution: the worked solution, shown by :meth:`solution`: a function, or ``"module:name"``, imported
            only when it is shown (a student build leaves that module out).
        answer: the name the learner's function gets in the notebook (default: the solution's name).
        level: ``"core"`` (everyone does it) or ``"stretch"`` (for those who want more).
    """

    def __init__(self, title: str, checks: Sequence[Check], *, hook_kind: str | None = None, with_kwargs: bool = False,
                 solution: Callable | str | None = None, answer: str = "", level: str = "core") -> None:
        if level not in ("core", "stretch"):
            raise ValueError(f"level must be 'core' or 'stretch', not {level!r}")
        self.title, self.checks, self.hook_kind, self.with_kwargs = title, list(checks), hook_kind, with_kwargs
        self.solution_ref, self.level = solution, level
        self.answer = answer or (solution.rpartition(":")[2] if isinstance(solution, str)
                                 else getattr(solution, "__name__", ""))

    def check(self, fn: Callable) -> Verdict:
        """Run every check on ``fn`` and return the verdict (print it, or let the notebook show it).
        An unwritten ``fn`` (it raises ``NotImplementedError``, or a check raises :class:`NotWritten`)
        gets one line saying so, not one per check."""
        verdict = Verdict(self.title)
        if self.hook_kind is not None:
            try:
                check_hook_signature(fn, self.hook_kind, self.with_kwargs)
                verdict.lines.append((True, "has the right signature", ""))
            except TypeError as exc:
                verdict.lines.append((False, "has the right signature", str(exc)))
                return verdict
        for description, run in self.checks:
            try:
                run(fn)
                verdict.lines.append((True, description, ""))
            except (NotImplementedError, NotWritten) as exc:
                verdict.written = False  # one line, and the later checks are not run
                verdict.lines.append((False, "your code", NOT_WRITTEN if isinstance(exc, NotImplementedError)
                                      else str(exc)))
                return verdict
            except Mistake as exc:
                verdict.lines.append((False, description, str(exc)))
            except Exception as exc:  # say whose line raised: the learner's code, or the check's
                verdict.lines.append((False, description, _raised(exc)))
        return verdict

    def worked(self) -> Callable:
        """The worked solution itself (imported now); :class:`LookupError` when this copy has none."""
        if self.solution_ref is None or callable(self.solution_ref):
            if self.solution_ref is None:
                raise LookupError(f"no worked solution is attached to {self.title!r}.")
            return self.solution_ref
        module, _, name = self.solution_ref.partition(":")
        try:
            return getattr(importlib.import_module(module), name)
        except ModuleNotFoundError as exc:
            if exc.name is None or not module.startswith(exc.name):
                raise
            raise LookupError(f"{NOT_INCLUDED} ({module} is not installed)") from None

    def solution(self) -> "Solution":
        """The worked solution, collapsed until you open it.

        With the environment variable ``HOOKLAB_HIDE_SOLUTIONS=1`` it shows a short notice instead of the
        code (a switch for one machine, not a lock: a student build leaves the solutions out altogether).
        """
        if solutions_hidden():
            return Solution(self.title, HIDDEN_NOTICE, hidden=True)
        try:
            code = inspect.getsource(self.worked())
        except LookupError as exc:
            if self.solution_ref is None:
                raise
            return Solution(self.title, NOT_INCLUDED if NOT_INCLUDED in str(exc) else str(exc), hidden=True)
        return Solution(self.title, textwrap.dedent(code))

    def __repr__(self) -> str:
        return f"Exercise({self.title!r}, {len(self.checks)} checks, {self.level})"


def _raised(exc: BaseException) -> str:
    """The learner's line that raised ``exc`` (innermost outside hooklab and installed packages), else the check's."""
    frames = traceback.extract_tb(exc.__traceback__)
    libraries = (str(Path(__file__).resolve().parents[1]), *{sysconfig.get_path(k) for k in ("stdlib", "purelib")})
    mine = [f for f in frames if not str(Path(f.filename).resolve()).startswith(libraries)]
    f, who = (mine[-1], "your function") if mine else (frames[-1], "the check (in hooklab)")
    return (f"{who} raised {type(exc).__name__}: {exc}" + (f" (at `{f.line}`)" if f.line else "")
            + ("" if mine else ", using what your function returned or changed: look at its return value and edits"))


#: The environment variable that hides the worked solutions (any value but "", "0", "false", "no").
HIDE_SOLUTIONS = "HOOKLAB_HIDE_SOLUTIONS"
#: What a verdict says, once, about a function that is still the stub.
NOT_WRITTEN = "not written yet: replace `raise NotImplementedError` with your code and run the cell again"
#: What :meth:`Exercise.solution` shows in a student build, which leaves the worked solutions out.
NOT_INCLUDED = "The worked solution is not included in this copy of the course; the checker above says what is wrong."
#: What :meth:`Exercise.solution` shows instead of the code while they are hidden.
HIDDEN_NOTICE = ("The worked solutions are switched off for this course (HOOKLAB_HIDE_SOLUTIONS is set). "
                 "Ask your instructor, or use the checker above: it says what is still wrong.")


def solutions_hidden() -> bool:
    """Whether ``HOOKLAB_HIDE_SOLUTIONS`` hides the worked solutions (read at every call)."""
    return os.environ.get(HIDE_SOLUTIONS, "").strip().lower() not in ("", "0", "false", "no")


@dataclass
class Solution:
    """A worked solution: a collapsed ``<details>`` block in a notebook, the code as plain text.
    ``hidden``: the code is withheld (``HOOKLAB_HIDE_SOLUTIONS``) and ``code`` is the notice."""

    title: str
    code: str
    hidden: bool = False

    def __str__(self) -> str:
        return f"Worked solution: {self.title}\n\n{self.code}"

    __repr__ = __str__

    def _repr_html_(self) -> str:
        if self.hidden:
            return f"<p><b>Worked solution: {html.escape(self.title)}</b>: {html.escape(self.code)}</p>"
        return (f"<details><summary><b>Show the worked solution: {html.escape(self.title)}</b></summary>"
                f"<pre><code>{html.escape(self.code)}</code></pre></details>")
