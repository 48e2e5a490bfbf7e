"""Printing figures that hold on any CPU: claims, and per-run figures marked with ``≈``.

A trained model's digits depend on the machine: another CPU picks other float kernels, the
sums come out in another order, and after a few hundred training steps the weights differ. A
notebook's stored output must still match a fresh run on a learner's laptop, so the notebooks
print two kinds of things:

* a **claim**, checked on every run and worded so that it holds on every machine
  (``claim("test accuracy ≥ 90%", acc >= 0.9)`` prints ``test accuracy ≥ 90%: yes``);
* a **per-run figure**, marked with ``≈`` (``approx(0.9612, ".1%")`` is ``≈96.1%``): the exact
  number of this run, shown so you can read it, never the only evidence for a claim. The
  tests mask it with :data:`MASK` (the same pattern as in ``tests/nbval_sanitize.cfg``).

>>> approx(0.96123, ".1%"), approx(-3.84412, ".2f"), approx(17, "d")
('≈96.1%', '≈-3.84', '≈17')
>>> claim("test accuracy ≥ 90%", 0.961 >= 0.9)
'test accuracy ≥ 90%: yes'

Masked, two runs that differ only in their per-run figures print the same; a claim that turns
from ``yes`` to ``NO`` does not:

>>> import re
>>> mask = lambda text: re.sub(MASK, MASKED, text)
>>> mask("accuracy ≈96.1%  (≥ 90%: yes)") == mask("accuracy ≈91.0% (≥ 90%: yes)")
True
>>> mask("accuracy ≈96.1% (≥ 90%: yes)") == mask("accuracy ≈86.1% (≥ 90%: NO)")
False
"""

from __future__ import annotations

from typing import Any

__all__ = ["PER_RUN", "MASK", "MASKED", "approx", "claim", "is_per_run", "recorded_with"]

#: The mark of a figure that may differ from machine to machine.
PER_RUN = "≈"

#: What the tests mask: ``≈`` and the number right after it (digits, a point, an exponent, a
#: ``%``), with the spaces around it, so that the column padding of a table cannot differ
#: either. A word after ``≈`` (``≈yes``) is never masked.
#: (Written with ``\u2248`` for ``≈``, so that the sanitize file stays ASCII.)
MASK = r"[ \t]*\u2248[-+]?\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?%?[ \t]*"
#: What a masked figure becomes.
MASKED = "<per-run figure>"


def approx(value: Any, spec: str = ".3g") -> str:
    """``value`` formatted with ``spec`` and marked as a per-run figure: ``≈`` in front."""
    return f"{PER_RUN}{value:{spec}}"


def claim(text: str, holds: bool) -> str:
    """``"<text>: yes"`` when ``holds``, else ``"<text>: NO"`` (a stored ``NO`` fails the tests)."""
    return f"{text}: {'yes' if holds else 'NO'}"


def is_per_run(text: str) -> bool:
    """Whether ``text`` is a per-run figure (starts with ``≈`` and a number).

    >>> is_per_run("≈96.1%"), is_per_run("96.1%"), is_per_run("≈yes")
    (True, False, False)
    """
    import re
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
