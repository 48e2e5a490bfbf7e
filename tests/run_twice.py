"""The run-twice check, inside nbval: a learner who runs each cell twice in a row sees the same output.

Every notebook cell that nbval runs (``python3 dev.py test``) is run a second time at once, in the
same kernel, before the next cell, and that second output is compared with the stored one exactly
as nbval compared the first (same sanitizer, same exemptions). So one kernel runs cells 1, 1, 2, 2,
...: the notebook is executed once for both checks, not once for nbval and once more for this one.
A cell that stacks a hook or leaks state fails with "run twice in a row".

Exempt from the second comparison, not from the second run: a cell marked ``RERUN_CHANGES_OUTPUT``
(its lesson is that a repeat changes the result) and a cell nbval does not check. Cells nbval skips
are not run at all. ``--once`` turns the second run off (``dev.py test --other-cpu`` uses it: the
kernels change the float sums, not whether a second run stacks a hook).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from .nbtools import RERUN, has_marker

MESSAGE = (
    "run twice in a row, the cell's second output differs from the stored one (a hook stacked up, or state leaked)")


def is_notebook_cell(item: pytest.Item) -> bool:
    """An nbval cell item (nbval's items are the only ones with a notebook cell and its options)."""
    return hasattr(item, "cell") and isinstance(getattr(item, "options", None), dict)


def run_again(item: Any, stored: list) -> None:
    """The second run of an nbval cell item, compared unless the cell is exempt, against ``stored``:
    the cell's outputs as they were before the first run (nbval's comparison merges the stored
    stream outputs in place, so comparing twice against what it left would double them)."""
    if item.options["skip"]:
        return
    item.cell.outputs = stored
    check = item.options["check"]
    if has_marker(item.cell, RERUN):
        item.options["check"] = False
    try:
        item.runtest()
    except Exception as exc:
        if not hasattr(exc, "cell_num"):
            raise
        raise type(exc)(exc.cell_num, f"{MESSAGE}: {exc}", exc.source, exc.inner_traceback) from exc
    finally:
        item.options["check"] = check


class RunTwice:
    """Registered by conftest.py unless ``--once``."""

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        stored = copy.deepcopy(item.cell.outputs) if is_notebook_cell(item) else None
        result = yield  # the first run: nbval's own check (an error here propagates, no second run)
        if stored is not None:
            run_again(item, stored)
        return result
