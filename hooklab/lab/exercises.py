"""Exercise checkers: run a learner's function on fixed cases and say precisely what is wrong.

An :class:`Exercise` is a list of checks. Each check gets the learner's function and raises
:class:`Mistake` with a friendly sentence when something is off. ``exercise.check(fn)``
returns a :class:`Verdict` that prints one line per check.

>>> import hooklab
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
import inspect
import os
import textwrap
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from ..kinds import check_hook_signature

__all__ = ["Exercise", "Mistake", "Verdict", "Solution", "expect_close", "grad_of", "solutions_hidden"]


class Mistake(Exception):
    """Raised by a check: its message tells the learner what is wrong and how to fix it."""


def expect_close(actual: Any, expected: Any, what: str, *, atol: float = 1e-6) -> None:
    """Raise :class:`Mistake` unless ``actual`` is a tensor close to ``expected``
    (``torch.testing.assert_close`` with ``atol``), saying in words what differs.

    >>> expect_close(torch.tensor([1.0, 2.0]), [1.0, 2.0], "the gradient")
    >>> expect_close(torch.tensor([1.0, 2.5]), [1.0, 2.0], "the gradient")
    Traceback (most recent call last):
    ...
    hooklab.lab.exercises.Mistake: the gradient is [1.0, 2.5], expected [1.0, 2.0].
    """
    if actual is None:
        raise Mistake(f"{what} is None. Did your hook forget to `return` its result?")
    if not isinstance(actual, torch.Tensor):
        raise Mistake(f"{what} should be a tensor, got {type(actual).__name__}.")
    expected = torch.as_tensor(expected, dtype=actual.dtype, device=actual.device)
    if actual.shape != expected.shape:
        raise Mistake(f"{what} has shape {list(actual.shape)}, expected {list(expected.shape)}.")
    try:
        torch.testing.assert_close(actual.detach(), expected, atol=atol, rtol=0)
    except AssertionError:
        raise Mistake(f"{what} is {_short(actual)}, expected {_short(expected)}.") from None


def made_hook(make: Callable[..., Any], *args: Any, kind: str, call: str, inner: str) -> Callable[..., Any]:
    """``make(*args)``, for an exercise that asks for a function returning a hook: the result must be
    callable with ``kind``'s hook signature (see :func:`hooklab.kinds.check_hook_signature`), or a
    :class:`Mistake` says what to write. ``call`` names the learner's call, ``inner`` the hook's name.

    >>> made_hook(lambda store: None, [], kind="forward", call="make_hook(store)", inner="record")
    Traceback (most recent call last):
    ...
    hooklab.lab.exercises.Mistake: make_hook(store) returned NoneType, not a function: return the forward hook function itself (`return record`, no parentheses).
    """
    hook, what = make(*args), kind.replace("_", " ") + " hook"
    if not callable(hook):
        raise Mistake(f"{call} returned {type(hook).__name__}, not a function: return the {what} function itself "
                      f"(`return {inner}`, no parentheses).")
    try:
        check_hook_signature(hook, kind)
    except TypeError as exc:
        raise Mistake(f"the function {call} returns is not a {what}: {exc}") from None
    return hook


def grad_of(tensor: torch.Tensor, what: str = "the parameter") -> torch.Tensor:
    """``tensor.grad``, or a :class:`Mistake` saying that no gradient arrived.

    >>> grad_of(torch.ones(1, requires_grad=True), "x")
    Traceback (most recent call last):
    ...
    hooklab.lab.exercises.Mistake: x got no gradient (its .grad is None): did the backward pass reach it?
    """
    if tensor.grad is None:
        raise Mistake(f"{what} got no gradient (its .grad is None): did the backward pass reach it?")
    return tensor.grad


def _short(t: torch.Tensor) -> str:
    values = [round(v, 4) for v in t.detach().flatten()[:6].tolist()]
    return str(values) + (" ..." if t.numel() > 6 else "")


@dataclass
class Verdict:
    """The result of checking: one ``(passed, description, message)`` line per check."""

    title: str
    lines: list[tuple[bool, str, str]] = field(default_factory=list)

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
        head = (f"{self.title}: all {good} checks passed" if self.passed
                else f"{self.title}: {good} of {len(self.lines)} checks passed")
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
        checks: ``(description, check)`` pairs; ``check(fn)`` raises :class:`Mistake` when
            ``fn`` is wrong. Any other exception from the learner's code is reported as
            "your function raised ...", with the line it came from.
        hook_kind: if given (``"tensor"``, ``"forward"``, …), the signature is checked first
            and the other checks are skipped when it does not fit.
        solution: the worked solution, shown by :meth:`solution`.
    """

    def __init__(self, title: str, checks: Sequence[Check], *, hook_kind: str | None = None,
                 with_kwargs: bool = False, solution: Callable | None = None) -> None:
        self.title = title
        self.checks = list(checks)
        self.hook_kind = hook_kind
        self.with_kwargs = with_kwargs
        self._solution = solution

    def check(self, fn: Callable) -> Verdict:
        """Run every check on ``fn`` and return the verdict (print it, or let the notebook show it)."""
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
            except Mistake as exc:
                verdict.lines.append((False, description, str(exc)))
            except NotImplementedError:
                verdict.lines.append((False, description, "not written yet: replace `raise NotImplementedError` "
                                      "with your code and run the cell again."))
            except Exception as exc:  # the learner's code raised: say where
                verdict.lines.append((False, description, f"your function raised {type(exc).__name__}: {exc}"
                                      f"{_where(exc)}"))
        return verdict

    def solution(self) -> "Solution":
        """The worked solution, collapsed until you open it.

        With the environment variable ``HOOKLAB_HIDE_SOLUTIONS=1`` (a course that grades the
        exercises), it shows a short notice instead of the code.
        """
        if self._solution is None:
            raise LookupError(f"no worked solution is attached to {self.title!r}.")
        if solutions_hidden():
            return Solution(self.title, HIDDEN_NOTICE, hidden=True)
        return Solution(self.title, textwrap.dedent(inspect.getsource(self._solution)))

    def __repr__(self) -> str:
        return f"Exercise({self.title!r}, {len(self.checks)} checks)"


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    learner = [f for f in frames if "hooklab" not in f.filename.replace("\\", "/").split("/")[-2:-1]]
    if not learner:
        return ""
    f = learner[-1]
    return f" (at `{f.line}`)" if f.line else ""


#: The environment variable that hides the worked solutions (any value but "", "0", "false", "no").
HIDE_SOLUTIONS = "HOOKLAB_HIDE_SOLUTIONS"
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
