"""What the course's checkers share: a tensor close to the expected one, a hook made by the learner's
factory, a gradient that arrived. Each raises :class:`~hooklab.lab.exercises.Mistake` with a sentence
that says what differs."""

from __future__ import annotations

from typing import Any, Callable

import torch

from ..kinds import check_hook_signature
from ..lab.exercises import Mistake

__all__ = ["expect_close", "made_hook", "grad_of"]


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
