"""The run-twice test: a learner who runs every cell twice in a row must see the same outputs.

In its own file so that, with tests spread over two processes (pytest-xdist, --dist loadfile), it
runs beside nbval and the browser test instead of after them.
"""

from __future__ import annotations

import pytest

from .nbtools import IGNORE, RERUN, SKIP, client_for, code_cells, has_marker, normalise, notebooks, read, sanitize_patterns

NOTEBOOKS = notebooks()
IDS = [p.name for p in NOTEBOOKS]


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_every_cell_can_run_twice(path) -> None:
    """As a learner who runs each cell twice in a row: in one kernel, run cells 1, 1, 2, 2, ...;
    each cell's second output must equal its stored output (a plain top-to-bottom run, which nbval
    checks). Cells marked RERUN_CHANGES_OUTPUT (their lesson is that a repeat changes the result)
    and cells whose output nbval does not check are exempt from the comparison, not from running."""
    stored = read(path)
    nb = read(path)
    patterns = sanitize_patterns()
    client = client_for(nb)
    differences: list[str] = []
    with client.setup_kernel():
        for index, cell in code_cells(nb):
            if has_marker(cell, SKIP):
                continue
            for _ in range(2):
                cell.outputs = []
                client.execute_cell(cell, index)
            if has_marker(cell, RERUN) or has_marker(cell, IGNORE):
                continue
            want = normalise(stored.cells[index].outputs, patterns)
            got = normalise(cell.outputs, patterns)
            if want != got:
                first = cell.source.strip().splitlines()[0][:70]
                differences.append(f"cell {index} ({first!r}):\n    first run: {want}\n    run twice: {got}")
    assert not differences, (f"{path.name}: running a cell twice changed its output "
                             "(a hook stacked up, or state leaked):\n  " + "\n  ".join(differences))
