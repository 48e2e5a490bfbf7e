"""Claims and per-run figures: print what holds on any CPU (``claim``), mark what may not (``≈``).

A trained model's digits depend on the machine (other float kernels add up in another order, and training
amplifies it), yet a stored output must match a fresh run anywhere. So a notebook prints a
**claim** that holds everywhere, or the exact **per-run figure** marked ``≈``, which the tests mask
with :data:`MASK` (as ``tests/nbval_sanitize.cfg`` does) and which is never the only evidence.

>>> approx(0.96123, ".1%"), approx(-3.84412, ".2f"), claim("test accuracy ≥ 90%", 0.961 >= 0.9)
('≈96.1%', '≈-3.84', 'test accuracy ≥ 90%: yes')
>>> mask = lambda text: re.sub(MASK, MASKED, text)
>>> mask("accuracy ≈96.1%  (≥ 90%: yes)") == mask("accuracy ≈91.0% (≥ 90%: yes)")
True
>>> mask("loss ≈-3.84e-05"), mask("share ≈96.1%")
('loss<per-run figure -#e->', 'share<per-run figure #%>')
"""

from __future__ import annotations

import math
import re
from importlib import metadata
from typing import Any

import torch as _torch
from packaging.requirements import Requirement

__all__ = ["PER_RUN", "MASK", "MASKED", "PerRun", "approx", "per_run", "show", "claim", "is_per_run", "recorded_with"]

PER_RUN = "≈"  #: the mark of a figure that may differ from machine to machine
#: What the tests mask: the number after ``≈`` (its digits, point and exponent's digits) and the
#: spaces around it, never a word (``≈yes``); its sign, its exponent's sign and a ``%`` stay.
MASK = r"[ \t]*\u2248([-+]?)\d+(?:,\d{3})*(?:\.\d+)?(?:(e[-+]?)\d+)?(%?)[ \t]*"
MASKED = r"<per-run figure \1#\2\3>"  #: what a masked figure becomes (``#`` for its digits)


def approx(value: Any, spec: str = ".3g") -> str:
    """``value`` formatted with ``spec`` and marked as a per-run figure: ``≈`` in front."""
    return f"{PER_RUN}{value:{spec}}"


class PerRun(float):
    """A per-run figure that stays a ``float`` for code, shown as :func:`approx` shows it (``≈``, 4
    significant digits or a format spec's); arithmetic on it gives a plain ``float``.

    >>> std = PerRun(0.44015113)
    >>> std, f"{std:.2f}", [(3, PerRun(0.0843))], std > 0.4, std * 2
    (≈0.4402, '≈0.44', [(3, ≈0.0843)], True, 0.88030226)
    """

    __slots__ = ("spec",)
    spec: str

    def __new__(cls, value: float, spec: str = ".4g") -> "PerRun":
        self = super().__new__(cls, value)
        self.spec = spec
        return self

    def __repr__(self) -> str:
        return approx(float(self), self.spec)

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return approx(float(self), spec or self.spec)

    def __reduce__(self) -> tuple[Any, ...]:
        return (PerRun, (float(self), self.spec))


def per_run(value: float, digits: int = 4, *, scale: float | None = None) -> float:
    """A :class:`PerRun` rounded to ``digits`` significant digits (with ``scale``: to the place of ``scale``'s
    ``digits``-th digit, so a mean of -2.8e-09 beside a spread of 1 shows 0). Zero is ``0.0``, never ``-0.0``;
    NaN and inf come back as they are.

    >>> per_run(0.0028471), per_run(-2.8e-09, scale=1.003), per_run(float("nan"))
    (≈0.002847, ≈0, nan)
    """
    if not math.isfinite(value):
        return value
    reference = scale if scale and math.isfinite(scale) else value
    if reference:
        value = round(value, digits - 1 - math.floor(math.log10(abs(reference)))) + 0.0
    return PerRun(value, f".{digits}g")


def show(value: Any) -> str:
    """How a view shows a value: a :class:`PerRun` with ``≈``, another float with 4 significant digits."""
    return f"{value:.4g}" if isinstance(value, float) and not isinstance(value, PerRun) else str(value)


def claim(text: str, holds: bool) -> str:
    """``"<text>: yes"`` when ``holds``, else ``"<text>: NO"`` (a stored ``NO`` fails the tests)."""
    return f"{text}: {'yes' if holds else 'NO'}"


def is_per_run(text: str) -> bool:
    """Whether ``text`` is a per-run figure (``≈`` and a number).

    >>> is_per_run("≈96.1%"), is_per_run("96.1%"), is_per_run("≈yes"), is_per_run(str(PerRun(-2.8e-09)))
    (True, False, False, True)
    """
    return re.fullmatch(MASK, text) is not None


_noted: set[str] = set()


def recorded_with(*, torch: str) -> str | None:
    """Every notebook's first cell: ``recorded_with(torch="2.14.1")``, the release of its stored outputs. With
    another release (not build), once per kernel, one line says a digit may differ, and names hooklab's range if
    the release is outside it.

    >>> recorded_with(torch=_torch.__version__) is None
    True
    """
    installed = _torch.__version__
    if installed.split("+", 1)[0] == torch.split("+", 1)[0] or "torch" in _noted:
        return None
    _noted.add("torch")
    dist = next(iter(metadata.distributions(name="hooklab")), None)  # None: run from a folder, not installed
    requires = map(Requirement, dist.requires or []) if dist else []  # the install cell's --no-deps ignores them
    supported = next((r.specifier for r in requires if r.name == "torch"), None)
    line = (f"Note: the stored outputs were recorded with torch {torch}; this is torch {installed}, so a few printed "
            "digits may differ from them.")
    if supported is not None and not supported.contains(installed, prereleases=True):
        line += f" hooklab supports torch{supported}: some cells may fail."
    print(line)
    return line
