"""Names in messages: the closest real names to a misspelt one, and a function's readable name.

>>> closest("layer1.0.cnv1", ["conv1", "layer1.0.conv1", "layer1.0.conv2"])
"'layer1.0.conv1', 'layer1.0.conv2'"
>>> function_name(closest)
'closest'
"""

from __future__ import annotations

import difflib

__all__ = ["closest", "function_name"]


def closest(name: str, names: list[str], *, n: int = 5, cutoff: float = 0.5, fallback: bool = True) -> str:
    """The names most like ``name``, quoted and comma-separated. When none is close enough: with
    ``fallback``, the names that share its last dotted part, or else the first ones; without, ``""``."""
    close = difflib.get_close_matches(name, names, n=n, cutoff=cutoff)
    if not close and fallback:
        tail = name.rsplit(".", 1)[-1]
        close = [m for m in names if m.rsplit(".", 1)[-1] == tail][:n] or names[:n]
    return ", ".join(repr(m) for m in close)


def function_name(fn: object) -> str:
    """A readable name: ``double``, ``Counter.hook``, ``<lambda>`` (no ``<locals>`` noise)."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    return str(name).rsplit("<locals>.", 1)[-1]
