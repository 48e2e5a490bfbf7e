"""Figures everyone can read: every stored figure has a caption, and none a cell builds goes unshown.

* every image output stored in a notebook carries a one-line caption: as its ``text/plain`` (what a
  notebook shows when it cannot show the image, and what some readers announce), as its ``alt``
  (nbconvert's HTML), and as a visible line right under it (JupyterLab gives an output image no
  ``alt`` of its own, so a screen reader there reads that line);
* a figure made with ``hooklab.plots.figure()`` and never shown by the end of its cell prints a
  warning on stderr, in that cell (nbval then fails the notebook: stderr is compared); the
  notebooks draw only through ``figure()``, so the check covers every figure they build.
"""

from __future__ import annotations

import re

import nbformat
import pytest

from .nbtools import client_for, code_cells, notebooks, read

NOTEBOOKS = notebooks()


def _images(nb: nbformat.NotebookNode):
    for index, cell in code_cells(nb):
        for k, out in enumerate(cell.get("outputs", [])):
            if any(mime.startswith("image/") for mime in out.get("data", {})):
                yield index, cell.outputs, k


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_every_stored_figure_has_a_caption(path) -> None:
    for index, outputs, k in _images(read(path)):
        out = outputs[k]
        caption = out.data.get("text/plain", "")
        assert re.fullmatch(r"Figure: [^\n<>]{20,}\.", caption), f"{path.name} cell {index}: caption {caption!r}"
        assert out.metadata["image/png"]["alt"] == caption, f"{path.name} cell {index}: no alt text"
        below = outputs[k + 1] if k + 1 < len(outputs) else {}
        assert below.get("data", {}).get("text/plain") == caption, f"{path.name} cell {index}: no caption under it"


def test_the_course_has_figures_to_check() -> None:
    assert sum(len(list(_images(read(p)))) for p in NOTEBOOKS) >= 10


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebooks_draw_only_through_hooklab_figure(path) -> None:
    for index, cell in code_cells(read(path)):
        found = re.findall(r"pyplot|\bplt\.|Figure\(|subplots\(\s*\d*\s*\)\s*$", cell.source)
        assert not found, f"{path.name} cell {index}: draws outside hooklab.plots.figure(): {found}"


def test_a_figure_never_shown_is_reported_in_its_cell() -> None:
    cells = ["from hooklab.plots import figure, show",
             "fig = figure((2, 1))\nfig.add_subplot().plot([0, 1])\n'built, not shown'",
             "show(figure((2, 1)), 'an empty figure, shown')",
             "kept = figure((2, 1))\nfrom hooklab.plots import to_png\npng = to_png(kept)  # a widget's picture",
             "1 + 1"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = client_for(nb, timeout=120)
    client.execute()
    stderr = ["".join(o.text for o in c.outputs if o.get("name") == "stderr") for c in nb.cells]
    assert "1 figure(s) made in this cell never shown" in stderr[1], stderr
    assert stderr[2:] == ["", "", ""], f"warned about a figure that was shown, or warned twice: {stderr}"
    shown = nb.cells[2].outputs
    assert [sorted(o.data) for o in shown] == [["image/png", "text/plain"], ["text/markdown", "text/plain"]]
    assert shown[0].metadata["image/png"]["alt"] == "Figure: an empty figure, shown."
