"""Hygiene of every notebook's stored state (the run-twice test is in test_rerun.py).

nbval itself (strict: every stored output compared) runs on notebooks/ through the pytest
options in pyproject.toml.
"""

from __future__ import annotations

import re

import nbformat
import pytest

from hooklab.claims import MASK, claim

from .nbtools import IGNORE, RAISES, RERUN, SKIP, code_cells, has_marker, malformed_markers, marker_reason, notebooks, read

NOTEBOOKS = notebooks()
IDS = [p.name for p in NOTEBOOKS]


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS, "no notebooks found under notebooks/"
    assert NOTEBOOKS[0].name == "00_start_here.ipynb"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_hygiene(path) -> None:
    nb = read(path)
    code = list(code_cells(nb))
    problems: list[str] = []

    if nb.cells[0].cell_type != "markdown" or not nb.cells[0].source.lstrip().startswith("# "):
        problems.append("the first cell is not a markdown title")
    if not re.search(r"^\s*(import hooklab|from hooklab\b)", "\n".join(c.source for _, c in code), re.M):
        problems.append("never imports hooklab")

    counts = [c.execution_count for _, c in code if c.source.strip()]
    if counts != list(range(1, len(counts) + 1)):
        problems.append(f"execution counts {counts[:12]}... are not 1..N: run `python3 dev.py execute {path.name}`")

    panels = [i for i, c in code for o in c.outputs
              if o.get("output_type") in ("display_data", "execute_result")
              and str(o.get("data", {}).get("text/plain", "")).startswith("<hooklab Panel")]
    if not panels:
        problems.append("no live panel (a displayed hooklab.Panel) among the stored outputs")

    unchecked = 0
    for i, cell in code:
        raises = has_marker(cell, RAISES)
        for o in cell.outputs:
            if o.output_type == "error" and not raises:
                problems.append(f"cell {i} stores an error ({o.ename}) but is not marked {RAISES}")
            if o.output_type == "stream" and o.name == "stderr" and not has_marker(cell, IGNORE):
                # a stray warning: allowed only where the lesson is the warning (still nbval-checked)
                if "warning" not in cell.source.lower():
                    problems.append(f"cell {i} stores stderr output that its source does not mention")
        if raises and "raises-exception" not in cell.metadata.get("tags", []):
            problems.append(f"cell {i} raises on purpose but lacks the raises-exception tag (JupyterLab's Run All "
                            "would stop there): run `python3 dev.py execute`, which turns the comment into the tag")
        if raises and not any(o.output_type == "error" for o in cell.outputs):
            problems.append(f"cell {i} is marked {RAISES} but stores no error")
        for bad in malformed_markers(cell):
            problems.append(f"cell {i}: nbval only recognises a marker alone on its comment line, so {bad!r} "
                            "is not a marker at all; write the marker alone and the reason as the next comment line")
        for marker in (IGNORE, SKIP, RERUN, RAISES):
            if has_marker(cell, marker):
                if marker in (IGNORE, SKIP):
                    unchecked += 1
                if len(marker_reason(cell, marker)) < 10:
                    problems.append(f"cell {i}: `# {marker}` (alone on its line) needs a one-line reason on the comment line "
                                    "right after it (a cell marked by its tag only: its first comment line)")
    if code and unchecked / len(code) > 0.15:
        problems.append(f"{unchecked} of {len(code)} code cells skip output checks (over 15%)")

    problems += portable_output_problems(nb)

    text = "\n".join(c.source for c in nb.cells)
    if "mybinder.org" not in text:
        problems.append("no Binder link")
    assert not problems, f"{path.name}:\n  " + "\n  ".join(problems)


#: A closing link: ``**Next:** [NN · Title](NN_name.ipynb)``.
_NEXT = re.compile(r"\*\*Next:\*\*\s*\[(\d\d) · [^\]]+\]\(([^)\s]+)\)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_the_closing_link_leads_to_the_next_notebook(path) -> None:
    """The last paragraph of every notebook links to the next one in file-name order (``**Next:**``),
    and that of the last notebook back to 00: a new notebook joins the chain by its file name alone,
    and its predecessor's closing link has to move on to it."""
    following = NOTEBOOKS[NOTEBOOKS.index(path) + 1] if path != NOTEBOOKS[-1] else None
    last = read(path).cells[-1]
    assert last.cell_type == "markdown", f"{path.name}: the last cell is not the closing text"
    closing = last.source.strip().split("\n\n")[-1]
    links = _NEXT.findall(last.source)
    if following is None:
        assert not links, f"{path.name} is the last notebook, yet links to a next one: {links}"
        assert "(00_start_here.ipynb)" in closing, f"{path.name}, the last notebook, does not end with a link to 00"
    else:
        assert links == [(following.name[:2], following.name)] and closing.startswith("**Next:**"), \
            f"{path.name} must end with `**Next:** [{following.name[:2]} · ...]({following.name})`; " \
            f"its last paragraph is: {closing[:200]!r}"


#: A per-run figure's number (what follows the ``≈``).
_FIGURE = re.compile(r"\u2248([-+]?\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?%?)")


def _texts(cell) -> list[str]:
    out = []
    for o in cell.outputs:
        if o.output_type == "stream":
            out.append(o.text)
        elif o.output_type in ("execute_result", "display_data"):
            out += [v for k, v in o.data.items() if k.startswith("text/") and isinstance(v, str)]
    return out


#: The answers of hooklab.claim ("<text>: yes" / "<text>: NO"), taken from the helper itself.
_YES, _NO = claim("", True), claim("", False)
#: A claim as the stored output prints it: a statement (words, not only figures) and then the claim
#: helper's answer, or a statement given the value True: ``text: True`` (a print), ``'text': True``
#: (a panel's state), or a panel view's table row (``<td ...>text</td><td><code>True</code>``). A
#: ``True`` without a statement before it (``[True, False]``, ``True`` alone) is not a claim.
CLAIM = re.compile(r"[^\n<>|:']*[A-Za-z][^\n<>|:']*"
                   rf"(?:{re.escape(_YES)}(?![\w-])|: True\b|': True\b|</td><td><code>True</code>)")


def portable_output_problems(nb) -> list[str]:
    """The portable-outputs rule, as far as the stored notebook shows it (README, "Tests"):
    no stored claim says ``NO``; a cell that prints a per-run figure (``≈96.1%``) also prints a
    claim (:data:`CLAIM`: as ``hooklab.claim`` prints it, or a statement shown as True), so the
    masked figure is never the only evidence; and the prose never quotes a per-run figure as fact."""
    problems, figures = [], set()
    for i, cell in code_cells(nb):
        texts = _texts(cell)
        joined = "\n".join(texts)
        if re.search(rf"{re.escape(_NO)}\b", joined):
            problems.append(f"cell {i} stores a claim that does not hold ({_NO!r})")
        if re.search(MASK, joined):
            # measurements (a point, a percent sign, or three digits and more), not small counts like 16
            figures |= {f for f in _FIGURE.findall(joined) if re.search(r"[.%]|\d{3}", f)}
            if not CLAIM.search(joined):
                problems.append(f"cell {i} prints a per-run figure (≈) but no claim beside it (hooklab.claim's "
                                f"'<statement>{_YES}', or a statement shown as True)")
    prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for figure in sorted(figures):
        if re.search(rf"(?<![\d.]){re.escape(figure)}(?![\d])", prose):
            problems.append(f"the prose quotes {figure}, a per-run figure: say what holds on every machine instead")
    return problems


@pytest.mark.parametrize("text,is_claim", [
    ("test accuracy ≥ 90%: yes", True), ("lr=0.05: every unit of relu3 is dead: yes", True),
    ("peak on the shape: True", True), ("{'learned (test accuracy ≥ 50%)': True}", True),
    ("<td style='padding-right:1em'>peak on the shape</td><td><code>True</code></td>", True),
    ("True", False), ("[True, False]", False), ("≈0.5: True", False), ("mean ≈0.5  True", False),
    ("yes", False), ("the answer: yesterday", False), ("test accuracy ≥ 90%: NO", False),
])
def test_a_claim_is_what_the_claim_helper_prints_or_a_statement_shown_true(text, is_claim):
    assert bool(CLAIM.search(text)) is is_claim
    cell = {"cell_type": "code", "source": "", "metadata": {}, "execution_count": 1,
            "outputs": [{"output_type": "stream", "name": "stdout", "text": f"figure ≈0.25\n{text}\n"}]}
    nb = nbformat.from_dict({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [cell]})
    unsupported = [p for p in portable_output_problems(nb) if "no claim beside it" in p]
    assert bool(unsupported) is not is_claim
