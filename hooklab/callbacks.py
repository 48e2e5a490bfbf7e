"""The idea under every hook: a list of callbacks, called in order, each removable by a handle.

>>> from hooklab.callbacks import Callbacks
>>> on_step = Callbacks()
>>> handle = on_step.register(lambda step: print("step", step))
>>> on_step(1)
step 1
>>> handle.remove(); on_step(2); len(on_step)
0
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Iterator

__all__ = ["Callbacks", "Handle"]


class Handle:
    """Returned by :meth:`Callbacks.register`; ``remove()`` takes the callback out again.

    Also a context manager: ``with callbacks.register(fn): ...`` removes it on exit.
    """

    def __init__(self, owner: "Callbacks", ident: int) -> None:
        self._owner, self.id = owner, ident

    def remove(self) -> None:
        self._owner._callbacks.pop(self.id, None)

    def __enter__(self) -> "Handle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"Handle(id={self.id})"


class Callbacks:
    """Keeps callbacks in registration order (like ``nn.Module``'s ordered dicts of hooks).

    ``callbacks(*args)`` calls each one with ``args``, in order.
    """

    def __init__(self) -> None:
        self._callbacks: dict[int, Callable[..., Any]] = {}
        self._ids = itertools.count()

    def register(self, fn: Callable[..., Any]) -> Handle:
        """Add ``fn`` at the end; return a :class:`Handle` that removes it."""
        if not callable(fn):
            raise TypeError(f"register() takes a function, got {type(fn).__name__}: pass the function itself, "
                            "without calling it (no parentheses after its name).")
        ident = next(self._ids)
        self._callbacks[ident] = fn
        return Handle(self, ident)

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        for fn in list(self._callbacks.values()):
            fn(*args, **kwargs)

    def __len__(self) -> int:
        return len(self._callbacks)

    def __iter__(self) -> Iterator[Callable[..., Any]]:
        return iter(list(self._callbacks.values()))

    def clear(self) -> None:
        """Remove every callback."""
        self._callbacks.clear()

    def __repr__(self) -> str:
        names = [getattr(fn, "__qualname__", type(fn).__name__) for fn in self._callbacks.values()]
        return f"Callbacks({names})"
