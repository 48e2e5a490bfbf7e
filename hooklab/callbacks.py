"""The idea under every hook: a list of callbacks, called in order, each removable by a handle
(PyTorch's own ``RemovableHandle``, what every ``register_*`` call returns).

>>> from hooklab.callbacks import Callbacks
>>> on_step = Callbacks()
>>> handle = on_step.register(lambda step: print("step", step))
>>> on_step(1)
step 1
>>> handle.remove(); on_step(2); len(on_step)
0
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Iterator

from torch.utils.hooks import RemovableHandle

__all__ = ["Callbacks"]


class Callbacks:
    """Keeps callbacks in registration order, in an ``OrderedDict`` keyed by handle id, exactly as
    ``nn.Module`` keeps its hooks (``module._forward_hooks``).

    ``callbacks(*args)`` calls each one with ``args``, in order.
    """

    def __init__(self) -> None:
        self._callbacks: OrderedDict[int, Callable[..., Any]] = OrderedDict()

    def register(self, fn: Callable[..., Any]) -> RemovableHandle:
        """Add ``fn`` at the end; return the ``RemovableHandle`` that removes it."""
        if not callable(fn):
            raise TypeError(f"register() takes a function, got {type(fn).__name__}: pass the function itself, "
                            "without calling it (no parentheses after its name).")
        handle = RemovableHandle(self._callbacks)
        self._callbacks[handle.id] = fn
        return handle

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        for fn in list(self._callbacks.values()):
            fn(*args, **kwargs)

    def __len__(self) -> int:
        return len(self._callbacks)

    def __iter__(self) -> Iterator[Callable[..., Any]]:
        return iter(list(self._callbacks.values()))

    def __repr__(self) -> str:
        names = [getattr(fn, "__qualname__", type(fn).__name__) for fn in self._callbacks.values()]
        return f"Callbacks({names})"
