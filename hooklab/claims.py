"""Claims and per-run figures: printing what holds on any CPU (``claim``) and marking what may not (``≈``).

A trained model's digits depend on the machine (other float kernels add up in another order, and
training amplifies it), yet a stored output must match a fresh run anywhere. So a notebook prints
a **claim** that holds everywhere, or the exact **per-run figure** marked ``≈``, which the tests
mask with :data:`MASK` (as ``tests/nbval_sanitize.cfg`` does) and which is never the only evidence.

>>> approx(0.96123, ".1%"), approx(-3.84412, ".2f"), claim("test accuracy ≥ 90%", 0.961 >= 0.9)
('≈96.1%', '≈-3.84', 'test accuracy ≥ 90%: yes')
>>> import re
>>> mask = lambda text: re.sub(MASK, MASKED, text)
>>> mask("accuracy ≈96.1%  (≥ 90%: yes)") == mask("accuracy ≈91.0% (≥ 90%: yes)")
True
>>> mask("accuracy ≈96.1% (≥ 90%: yes)") == mask("accuracy ≈86.1% (≥ 90%: NO)")
False
>>> mask("loss ≈-3.84e-05"), mask("share ≈96.1%")
('loss<per-run figure -#e->', 'share<per-run figure #%>')
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["PER_RUN", "MASK", "MASKED", "PerRun", "approx", "per_run", "show", "claim", "is_per_run", "recorded_with"]

#: The mark of a figure that may differ from machine to machine.
PER_RUN = "≈"

#: What the tests mask: the digits of the number after ``≈`` (with its point and its exponent's
#: digits) and the spaces around it (so a table's padding cannot differ); never a word (``≈yes``).
#: The number's sign, its exponent's sign and a ``%`` stay, through the groups. ``\u2248`` is ``≈``.
MASK = r"[ \t]*\u2248([-+]?)\d+(?:,\d{3})*(?:\.\d+)?(?:(e[-+]?)\d+)?(%?)[ \t]*"
#: What a masked figure becomes (``#`` for its digits): ``≈-3.84e-05`` becomes
#: ``<per-run figure -#e->``, ``≈96.1%`` becomes ``<per-run figure #%>``.
MASKED = r"<per-run figure \1#\2\3>"


def approx(value: Any, spec: str = ".3g") -> str:
    """``value`` formatted with ``spec`` and marked as a per-run figure: ``≈`` in front."""
    return f"{PER_RUN}{value:{spec}}"


class PerRun(float):
    """A per-run figure that stays a number: a ``float`` for code (compare it, add to it), shown
    the way :func:`approx` shows it (``≈`` and 4 significant digits) by ``repr``, ``str`` and
    ``format`` (a format spec such as ``".2f"`` picks the digits; the ``≈`` stays).

    ``hooklab.explore`` returns its float figures that come from the model's arithmetic (a mean, a
    gradient norm, a logit) as ``PerRun``, so a printed state or a stored view marks them ``≈``
    while ``state["std"] > 0`` still works. Arithmetic on it gives a plain ``float``.

    >>> std = PerRun(0.44015113)
    >>> std, str(std), f"{std:.2f}", [(3, PerRun(0.0843))], std > 0.4, std * 2
    (≈0.4402, '≈0.4402', '≈0.44', [(3, ≈0.0843)], True, 0.88030226)
    >>> is_per_run(str(PerRun(-2.8e-09))), is_per_run(str(PerRun(1234567.0)))
    (True, True)
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
    """A figure out of float arithmetic, as a :class:`PerRun` rounded to ``digits`` significant
    digits (with ``scale``: to the decimal place of ``scale``'s ``digits``-th digit, so that a mean
    of ``-2.8e-09`` beside a spread of 1 shows as 0). Zero is ``0.0`` (never ``-0.0``); a value
    that is not finite (NaN, inf) is returned as it is.

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
    """How a view shows a value: a :class:`PerRun` with its ``≈`` and digits, another float with 4
    significant digits, anything else as ``str``."""
    return f"{value:.4g}" if isinstance(value, float) and not isinstance(value, PerRun) else str(value)


def claim(text: str, holds: bool) -> str:
    """``"<text>: yes"`` when ``holds``, else ``"<text>: NO"`` (a stored ``NO`` fails the tests)."""
    return f"{text}: {'yes' if holds else 'NO'}"


def is_per_run(text: str) -> bool:
    """Whether ``text`` is a per-run figure (starts with ``≈`` and a number).

    >>> is_per_run("≈96.1%"), is_per_run("96.1%"), is_per_run("≈yes")
    (True, False, False)
    """
    return re.fullmatch(MASK, text) is not None


_noted: set[str] = set()


def _release(version: str) -> str:
    """``2.14.1`` from ``2.14.1+cpu`` or ``2.14.1+cu128``: the build label is not another release."""
    return version.split("+", 1)[0]


def recorded_with(*, torch: str) -> str | None:
    """Say once, in one line, when this torch is not the release that recorded the stored outputs.

    Every notebook's first code cell calls it with the release that made its stored outputs
    (``hooklab.recorded_with(torch="2.14.1")``). With that release (whatever its build: ``+cpu``
    wheels on Binder) it prints nothing. With another one, e.g. on a hosted service, it prints why a
    digit may differ from the stored output, once per kernel, and returns that line.

    >>> import torch as _torch
    >>> recorded_with(torch=_torch.__version__) is None
    True
    """
    import torch as _torch

    installed = _torch.__version__
    if _release(installed) == _release(torch) or "torch" in _noted:
        return None
    _noted.add("torch")
    line = (f"Note: the stored outputs were recorded with torch {torch}; this is torch {installed}, "
            "so a few printed digits may differ from them.")
    print(line)
    return line
