"""Classroom use: hidden worked solutions, sharp figures, perceptually uniform colour maps, the guide.

* ``HOOKLAB_HIDE_SOLUTIONS=1`` makes every exercise's ``solution()`` show a short notice instead of
  the code (checked on the real exercises of every course module), and without it the code shows;
* figures are drawn at twice the pixels a page shows them with (:data:`hooklab.plots.DPI`), and a
  stored figure is shown at the size it always had;
* no rainbow colour map (``jet`` and friends) anywhere in hooklab or the notebooks;
* TEACHING.md gives every notebook a time, and the times are the ones the notebooks state.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import struct
from pathlib import Path

import pytest

import hooklab
import hooklab.course
from hooklab import plots
from hooklab.lab.exercises import HIDDEN_NOTICE, Exercise, Solution, solutions_hidden

from .nbtools import notebooks, read

ROOT = Path(__file__).resolve().parents[1]
#: Colour maps that are not perceptually uniform (bands and false edges; hard for colour-blind readers).
RAINBOWS = {"jet", "rainbow", "gist_rainbow", "hsv", "nipy_spectral", "gist_ncar", "spectral", "turbo", "prism",
            "flag", "gist_stern", "brg", "cmrmap", "terrain", "ocean", "gnuplot", "gnuplot2"}


def all_exercises() -> list[tuple[str, Exercise]]:
    found = []
    for info in pkgutil.iter_modules(hooklab.course.__path__, "hooklab.course."):
        if info.name.endswith("._solutions"):
            continue
        module = importlib.import_module(info.name)
        found += [(f"{info.name}.{name}", value) for name, value in vars(module).items() if isinstance(value, Exercise)]
    return found


# ---------------------------------------------------------------------- hiding the worked solutions
def test_every_course_exercise_has_a_worked_solution() -> None:
    exercises = all_exercises()
    assert len(exercises) >= 10, f"found only {[n for n, _ in exercises]}"
    assert all(callable(ex.worked()) and ex.worked().__name__ == ex.answer for _, ex in exercises)


@pytest.mark.parametrize("value", ["", "0", "false", "no"])
def test_solutions_show_without_the_switch(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("HOOKLAB_HIDE_SOLUTIONS", value)
    assert not solutions_hidden()
    for name, ex in all_exercises():
        solution = ex.solution()
        assert isinstance(solution, Solution) and not solution.hidden
        assert solution.code.lstrip().startswith(("def ", "class ", "@")), f"{name}: {solution.code[:80]!r}"
        assert "<details>" in solution._repr_html_()


@pytest.mark.parametrize("value", ["1", "yes", "true"])
def test_solutions_hidden_with_the_switch(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("HOOKLAB_HIDE_SOLUTIONS", value)
    assert solutions_hidden()
    for name, ex in all_exercises():
        solution = ex.solution()
        code = ex.answer
        for shown in (str(solution), solution._repr_html_()):
            assert "HOOKLAB_HIDE_SOLUTIONS" in shown, f"{name}: no notice in {shown!r}"
            assert "def " not in shown and "return" not in shown and code not in shown, f"{name} shows code: {shown!r}"
        assert solution.code == HIDDEN_NOTICE and solution.hidden
        verdict = ex.check(ex.worked())  # checking still works, and the hidden solution still passes
        assert verdict.passed, f"{name}: with the solutions hidden, its worked solution fails: {verdict}"


def test_the_switch_is_read_when_a_solution_is_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    _, ex = all_exercises()[0]
    monkeypatch.setenv("HOOKLAB_HIDE_SOLUTIONS", "1")
    assert ex.solution().hidden
    monkeypatch.delenv("HOOKLAB_HIDE_SOLUTIONS")
    assert not ex.solution().hidden


def test_stored_notebooks_show_the_solutions() -> None:
    """The stored outputs come from runs without the switch (a notice stored by mistake would be caught)."""
    for path in notebooks():
        for cell in read(path).cells:
            for output in cell.get("outputs", []):
                assert "HOOKLAB_HIDE_SOLUTIONS" not in str(output), f"{path.name} stores the hidden-solution notice"


# ---------------------------------------------------------------------- figures
def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_figures_have_twice_the_pixels_a_page_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    import base64

    import IPython.display

    assert plots.DPI == 2 * plots.PX_PER_INCH
    fig = plots.figure((4.5, 2.2))
    fig.add_subplot().plot([0, 1])
    assert _png_size(plots.to_png(fig)) == (900, 440)
    displayed: list[tuple[dict, dict]] = []
    monkeypatch.setattr(IPython.display, "display", lambda data, raw, metadata=None: displayed.append((data, metadata)))
    plots.show(fig, "a line")
    (image, metadata), _ = displayed
    assert metadata["image/png"]["width"] == 450, "a stored figure is shown 100 px per inch wide, as before: only sharper"
    assert _png_size(base64.b64decode(image["image/png"])) == (900, 440)


def test_no_rainbow_colour_maps() -> None:
    sources = {p.relative_to(ROOT).as_posix(): p.read_text() for p in (ROOT / "hooklab").rglob("*.py")}
    for path in notebooks():
        sources[path.name] = "\n".join(c.source for c in read(path).cells if c.cell_type == "code")
    pattern = re.compile(r"""(?:cmap\s*=\s*|colormaps\[\s*|get_cmap\(\s*)["']([A-Za-z0-9_]+)["']""")
    used = {(name, m.group(1)) for name, text in sources.items() for m in pattern.finditer(text)}
    assert used, "no colour map found: is the pattern still right?"
    bad = sorted((name, cmap) for name, cmap in used if cmap.lower().removesuffix("_r") in RAINBOWS)
    assert not bad, f"rainbow colour maps (use viridis, inferno, cividis, or gray): {bad}"


# ---------------------------------------------------------------------- the teacher's guide
def test_teaching_guide_times_match_the_notebooks() -> None:
    guide = (ROOT / "TEACHING.md").read_text()
    for path in notebooks():
        stated = re.search(r"\*\*Time:\*\*\s*about (\d+) minutes", read(path).cells[0].source)
        assert stated, f"{path.name} states no time in its first cell"
        row = re.search(rf"^\|\s*{path.name[:2]}\s*\|.*$", guide, re.M)
        assert row, f"TEACHING.md has no row for notebook {path.name[:2]}"
        assert re.search(rf"\|\s*about {stated.group(1)} min\s*\|", row.group(0)), (
            f"TEACHING.md: notebook {path.name[:2]} says about {stated.group(1)} minutes; its row says {row.group(0)}")
    assert "HOOKLAB_HIDE_SOLUTIONS=1" in guide and "Presentation Mode" in guide


def test_teaching_md_carries_every_notebooks_outcomes_and_prerequisites() -> None:
    """The course-level outcomes are gathered from the notebooks: TEACHING.md's appendix holds each
    notebook's "After this notebook you can" list and "You need" line as the notebook states them."""
    guide = " ".join((ROOT / "TEACHING.md").read_text().split("## Outcomes and prerequisites, notebook by notebook")[-1].split())
    for path in notebooks():
        # the notebook's links are relative to notebooks/, TEACHING.md's to the repository
        first = re.sub(r"\]\((\d\d_\w+\.ipynb)\)", r"](notebooks/\1)", read(path).cells[0].source)
        outcomes = re.search(r"\*\*After this notebook you can\*\*\n(.*?)\n\n", first, re.S)
        need = re.search(r"\*\*You need\*\*(.*?)(?:\*\*Time|\n\n|\Z)", first, re.S)
        assert outcomes and need, f"{path.name}: no outcomes or no 'You need' in its first cell"
        for item in re.split(r"\n(?=\d+\. )", outcomes.group(1)):
            assert " ".join(item.split()) in guide, f"TEACHING.md lacks {path.name}'s outcome {item[:60]!r}"
        assert "You need " + " ".join(need.group(1).split()) in guide, f"TEACHING.md lacks {path.name}'s prerequisites"


def test_optional_sections_are_marked_in_the_notebooks() -> None:
    """Sections a class may skip carry "(optional)" at the end of their heading, and TEACHING.md names them."""
    marked = {path.name[:2]: re.findall(r"^#+ (.*\(optional\).*)$", "\n".join(c.source for c in read(path).cells
                                                                        if c.cell_type == "markdown"), re.M)
              for path in notebooks()}
    for nb, count in {"00": 1, "02": 1, "05": 1, "08": 4}.items():
        assert len(marked[nb]) == count, f"notebook {nb}: optional sections {marked[nb]}"
    assert "**(optional)**" in (ROOT / "TEACHING.md").read_text()
