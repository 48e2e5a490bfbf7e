"""Student copies and an answer key of the course, for a class that grades the exercises.

    python3 dev.py class --out DIR            (or: python -m tests.classroom_build --out DIR)

writes

* ``DIR/student/notebooks/``: every notebook with its stored outputs (demos, figures, panel snapshots)
  but without the cells that show a worked solution, and with a last cell that writes the learner's
  results file (:mod:`hooklab.course.results`);
* ``DIR/student/package/``: hooklab without ``hooklab/course/_solutions`` (``pip install DIR/student/package``);
  there ``exercise.solution()`` says the worked solution is not included, and every checker works;
* ``DIR/answer-key/``: every notebook with the worked solution in place of each exercise's stub (the
  checks' stored outputs cleared: run the notebook to see them pass), and ``ANSWERS.md``, every
  exercise's worked solution on one page.

It lives here, next to ``tests/execute.py``, because it works on the repository (the notebooks and the
package's source), not on an installed hooklab.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import re
import shutil
import sys
from pathlib import Path

import nbformat

from hooklab.course import results
from hooklab.lab.exercises import Exercise

from .nbtools import ROOT, notebooks, read

SOLUTIONS = "_solutions"
#: A code cell that only shows a worked solution, and the Markdown line that may introduce it.
SOLUTION_CELL = re.compile(r"^\s*[\w.]+\.solution\(\)\s*$")
SOLUTION_INTRO = re.compile(r"^\s*The worked solution \(click to open\):\s*$")
#: What the student build copies besides hooklab/ (pyproject.toml names README.md and LICENSE).
PACKAGE_FILES = ("pyproject.toml", "README.md", "LICENSE")

HAND_IN = """## Hand in your results

Put your name between the quotes and run the cell: it checks every exercise of this notebook again,
with the functions you wrote, and writes `results-{stem}-<your name>.json` next to this notebook.
Hand in that file (in JupyterLab: right-click it in the file browser, *Download*)."""
HAND_IN_CODE = 'from hooklab.course import results\n\nresults.save("{number}", student="")'


def is_solution_cell(cell: nbformat.NotebookNode) -> bool:
    return cell.cell_type == "code" and bool(SOLUTION_CELL.match(cell.source))


def course_exercises(path: Path) -> list[tuple[str, Exercise]]:
    """The exercises of a notebook's course module (none for a notebook without one)."""
    try:
        return results.exercises(path.stem)
    except LookupError:
        return []


def student_notebook(path: Path) -> nbformat.NotebookNode:
    """The notebook without its solution cells (and their one-line introductions), plus a hand-in cell
    after the last exercise's check, when it has exercises."""
    nb = read(path)
    cells, last_check = [], None
    for cell in nb.cells:
        if is_solution_cell(cell):
            if cells and cells[-1].cell_type == "markdown" and SOLUTION_INTRO.match(cells[-1].source):
                cells.pop()
            continue
        if cell.cell_type == "code" and ".check(" in cell.source:
            last_check = len(cells)
        cells.append(cell)
    if last_check is not None and course_exercises(path):
        cells[last_check + 1:last_check + 1] = [
            nbformat.v4.new_markdown_cell(HAND_IN.format(stem=path.stem)),
            nbformat.v4.new_code_cell(HAND_IN_CODE.format(number=path.stem[:2]))]
    nb.cells = cells
    return nb


def solution_source(exercise: Exercise) -> str:
    """The worked solution as a notebook cell needs it: the solution module's imports, then the code."""
    module = inspect.getmodule(exercise.worked())
    tree = ast.parse(inspect.getsource(module))
    imports = [ast.get_source_segment(inspect.getsource(module), n) for n in tree.body
               if isinstance(n, (ast.Import, ast.ImportFrom)) and not (isinstance(n, ast.ImportFrom)
                                                                        and n.module == "__future__")]
    return "\n".join(i for i in imports if i) + "\n\n\n" + inspect.getsource(exercise.worked())


def _replace_definition(source: str, name: str, replacement: str) -> str | None:
    """``source`` with its top-level ``def name``/``class name`` replaced, or None when it has none."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            lines = source.splitlines()
            return "\n".join([*lines[:node.lineno - 1], replacement.rstrip("\n"), *lines[node.end_lineno:]])
    return None


def answer_key_notebook(path: Path) -> nbformat.NotebookNode:
    """The notebook with each exercise's stub replaced by its worked solution (imports first), the
    checks' stored outputs cleared (they came from the stubs)."""
    nb = read(path)
    for _, exercise in course_exercises(path):
        for cell in nb.cells:
            if cell.cell_type == "code" and "NotImplementedError" in cell.source:
                new = _replace_definition(cell.source, exercise.answer, solution_source(exercise))
                if new is not None:
                    cell.source, cell.outputs, cell.execution_count = new.strip("\n"), [], None
                    break
        else:
            raise LookupError(f"{path.name}: no stub cell defines {exercise.answer!r}")
    for cell in nb.cells:
        if cell.cell_type == "code" and ".check(" in cell.source:
            cell.outputs, cell.execution_count = [], None
    return nb


def answers_page() -> str:
    """Every exercise's worked solution, by notebook, as Markdown."""
    parts = ["# Answer key\n", "Every exercise's worked solution. *stretch*: for those who want more.\n"]
    for path in notebooks():
        for name, exercise in course_exercises(path):
            parts.append(f"## {path.stem[:2]} · {exercise.title} ({exercise.level})\n\n"
                         f"`{exercise.answer}`, checked by `{name}.check({exercise.answer})`.\n\n"
                         f"```python\n{inspect.getsource(exercise.worked()).rstrip()}\n```\n")
    return "\n".join(parts)


def student_package(target: Path) -> Path:
    """A copy of the installable project without the worked solutions."""
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for name in PACKAGE_FILES:
        shutil.copy2(ROOT / name, target / name)
    shutil.copytree(ROOT / "hooklab", target / "hooklab",
                    ignore=shutil.ignore_patterns(SOLUTIONS, "__pycache__", "*.pyc"))
    return target


def build(out: Path) -> dict[str, Path]:
    """Write the student copies, the student package and the answer key under ``out``."""
    student, key = out / "student" / "notebooks", out / "answer-key"
    for folder in (student, key):
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
    for path in notebooks():
        nbformat.write(student_notebook(path), student / path.name)
        nbformat.write(answer_key_notebook(path), key / path.name)
    (key / "ANSWERS.md").write_text(answers_page())
    return {"notebooks": student, "package": student_package(out / "student" / "package"), "answer key": key}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python3 dev.py class", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="folder to write into (its old copies are replaced)")
    args = parser.parse_args(argv)
    importlib.invalidate_caches()
    for what, where in build(args.out.resolve()).items():
        print(f"{what}: {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
