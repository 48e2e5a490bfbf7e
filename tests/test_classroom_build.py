"""The student build keeps the worked solutions from students, and a results file goes from a notebook to
the instructor's table (``python3 dev.py class``, :mod:`tests.classroom_build`, :mod:`hooklab.course.results`).

* the student copies hold no solution source anywhere (notebooks, package): every distinctive line of
  every worked solution is searched for;
* they keep every other cell and stored output, and in the student package every exercise still checks:
  a correct answer passes, a stub and a wrong answer fail, and ``solution()`` says it is not included;
* the answer key holds every solution in place of its stub, and running it passes every check (01);
* a results file is written from a namespace and several are collated into one table.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from hooklab.course import results
from hooklab.lab.exercises import Exercise

from . import classroom_build as build
from .nbtools import ROOT, notebooks, read
from .test_classroom import all_exercises

#: Solution lines that a notebook's own demonstration (or the package's demo code) contains, with the
#: one file each may appear in: taught there, not leaked.
SHARED_LINES = {
    "weights = gradients.mean(dim=(2, 3), keepdim=True)": "nb07_grad_cam.py",  # cam_from, the demo's Grad-CAM
    "output.register_hook(save_grad)": "07_grad_cam.ipynb",  # a demo cell's two hooks
    "if output.requires_grad:": "nb07_grad_cam.py",  # the demo's GradCAM class
    "return grad.clamp(-1.0, 1.0)": "08_training_loops.ipynb",  # a demo cell's clamp
    "self.outputs.append(output.detach())": "03_module_hooks.ipynb",  # a demo cell's recorder
    "self.outputs.clear()": "03_module_hooks.ipynb",  # the same recorder
    "names = {module: name for name, module in model.named_modules()}": "05_resnet_traversal.ipynb",
    "per_channel_max = a.amax(dim=(0, 2, 3))": "06_training_diagnostics.ipynb",  # a demo cell's statistics
    "norm = param.grad.norm()": "02_tensor_hooks.ipynb",  # a demo cell's gradient norm
    "if nb08.in_backward():": "08_training_loops.ipynb",  # a demo cell on checkpointing
}
#: Lines that say nothing of a solution: loop and test headers, bare names, templates of the stub.
GENERIC = re.compile(r"^(for |if isinstance|with |try:|finally:|else:|return \w+$|self\.outputs = \[\]$|"
                     r"a = output\.detach\(\)$|scaler\.unscale_\(optimizer\)$|\[)")


def distinctive_lines(fn) -> set[str]:
    """The code lines of a worked solution's body, comments and docstrings left out, that say something:
    at least 16 characters and not a bare return of a name."""
    source = inspect.getsource(fn)
    tree = ast.parse(source)
    docstrings = {n.body[0].lineno for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    lines = set()
    for i, line in enumerate(source.splitlines()[1:], 2):
        code = line.split("  #")[0].strip()
        if i in docstrings or code.startswith(("#", '"', "'", ">>>", "def ", "class ")) or len(code) < 16 \
                or GENERIC.match(code):
            continue
        lines.add(code)
    return lines


def stub_definitions(path: Path) -> list[str]:
    """The functions and classes a notebook's exercise cells define, as the learner first sees them."""
    found = []
    for cell in read(path).cells:
        if cell.cell_type == "code" and "NotImplementedError" in cell.source:
            tree = ast.parse(cell.source)
            found += [ast.get_source_segment(cell.source, n) or "" for n in tree.body
                      if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    return found


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build.build(tmp_path_factory.mktemp("class"))


def _student_texts(built: dict[str, Path]) -> dict[str, str]:
    texts = {str(p): p.read_text() for p in built["package"].rglob("*")
             if p.is_file() and p.suffix in (".py", ".md", ".toml", ".txt")}
    texts |= {str(p): p.read_text() for p in built["notebooks"].glob("*.ipynb")}
    return texts


def test_every_solution_has_distinctive_lines_and_the_full_course_holds_them() -> None:
    for name, ex in all_exercises():
        lines = distinctive_lines(ex.worked())
        assert lines, f"{name}: no distinctive line found, so the search below would prove nothing"
        solutions = Path(inspect.getfile(ex.worked())).read_text()
        assert all(line in solutions for line in lines)
    sources = {p.name: "".join(c.source for c in read(p).cells) for p in notebooks()}
    sources |= {p.name: p.read_text() for p in (ROOT / "hooklab/course").glob("nb*.py")}
    gone = [line for line, where in SHARED_LINES.items() if line not in sources[where]]
    assert not gone, f"no longer shared, so no longer exempt: {gone}"


def test_the_student_build_holds_no_solution_source(built: dict[str, Path]) -> None:
    texts = _student_texts(built)
    assert not list(built["package"].rglob(build.SOLUTIONS)), "the solutions package was copied"
    assert any(p.endswith("nb07_grad_cam.py") for p in texts)
    assert len([p for p in texts if p.endswith(".ipynb")]) == len(notebooks())
    found = [(name, line, where) for name, ex in all_exercises() for line in distinctive_lines(ex.worked())
             for where, text in texts.items() if (line in text or json.dumps(line)[1:-1] in text)
             and Path(where).name != SHARED_LINES.get(line)]
    assert not found, f"solution lines in the student build: {found[:5]}"
    for where, text in texts.items():
        assert not where.endswith(".ipynb") or "Show the worked solution" not in text and ".solution()" not in text.replace("exercise.solution()", ""), where


def test_student_copies_keep_every_other_cell_and_output(built: dict[str, Path]) -> None:
    for path in notebooks():
        original, copy = read(path), read(built["notebooks"] / path.name)
        kept = [c for c in original.cells if not build.is_solution_cell(c)
                and not build.SOLUTION_INTRO.match(c.source if c.cell_type == "markdown" else "-")]
        added = [c for c in copy.cells if "results.save(" in c.source or "Hand in your results" in c.source]
        assert [c.source for c in copy.cells if c not in added] == [c.source for c in kept], path.name
        assert [c.get("outputs") for c in copy.cells if c not in added] == [c.get("outputs") for c in kept], path.name
        assert len(added) == (2 if build.course_exercises(path) else 0), path.name
        assert len(copy.cells) < len(original.cells) + 2 or not build.course_exercises(path), path.name


STUDENT_CHECK = r"""
import importlib, inspect, json, pkgutil, sys
import hooklab, hooklab.course
from hooklab.lab.exercises import Exercise
assert hooklab.__file__.startswith(sys.argv[1]), hooklab.__file__
solved = json.loads(sys.argv[2])
report = {}
for info in pkgutil.iter_modules(hooklab.course.__path__, "hooklab.course."):
    module = importlib.import_module(info.name)
    space = {}
    stubs = {}
    if info.name.rpartition(".")[2] in solved:
        exec(compile(solved[info.name.rpartition(".")[2]], "answer", "exec"), space)
        exec(compile(json.loads(sys.argv[3])[info.name.rpartition(".nb")[2][:2]], "stubs", "exec"), stubs)
    for name, ex in vars(module).items():
        if not isinstance(ex, Exercise):
            continue
        try:
            ex.worked()
            worked = "found"
        except LookupError as exc:
            worked = str(exc)
        stub = stubs[ex.answer]
        report[f"{info.name}.{name}"] = {
            "answer_in_module": hasattr(module, ex.answer) and not isinstance(getattr(module, ex.answer), Exercise),
            "solution": ex.solution().code, "worked": worked,
            "correct": ex.check(space[ex.answer]).passed, "stub": ex.check(stub).passed,
            "stub_written": ex.check(stub).written, "wrong": ex.check(lambda *a, **k: None).passed}
print(json.dumps(report))
"""


def test_every_exercise_checks_in_the_student_package(built: dict[str, Path]) -> None:
    """In a fresh interpreter that imports hooklab from the student package (PYTHONPATH first): the
    correct answers (the repository's solution modules, run as a learner's cell would) pass, the
    notebooks' own stubs are named unwritten, and a function that returns None fails."""
    solved = {p.stem: p.read_text() for p in (ROOT / "hooklab/course/_solutions").glob("nb*.py")}
    env = dict(os.environ, PYTHONPATH=str(built["package"]))
    stubs = {p.stem[:2]: "\n\n".join(stub_definitions(p)) for p in notebooks()}
    run = subprocess.run([sys.executable, "-c", STUDENT_CHECK, str(built["package"]), json.dumps(solved),
                          json.dumps(stubs)],
                         capture_output=True, text=True, env=env, cwd=built["package"], timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert set(report) == {name for name, _ in all_exercises()}
    for name, r in report.items():
        assert r["correct"], f"{name}: the correct answer fails in the student build"
        assert not r["stub"] and not r["stub_written"], f"{name}: a stub is not named unwritten"
        assert not r["wrong"], f"{name}: a function that returns None passes"
        assert not r["answer_in_module"], f"{name}: the module defines the answer's name"
        assert "not included in this copy" in r["solution"] and "not included" in r["worked"], name


def test_answer_key_replaces_each_stub_with_its_solution(built: dict[str, Path]) -> None:
    key = built["answer key"]
    page = (key / "ANSWERS.md").read_text()
    for name, ex in all_exercises():
        number = name.split(".nb")[1][:2]
        nb = read(next(key.glob(f"{number}_*.ipynb")))
        source = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        assert inspect.getsource(ex.worked()).strip() in source, name
        assert inspect.getsource(ex.worked()).strip() in page, name
        assert f"({ex.level})" in page
    assert "NotImplementedError  # your code here" not in "".join(
        c.source for p in key.glob("*.ipynb") for c in read(p).cells)


@pytest.mark.slow
def test_the_answer_key_passes_its_checks_when_run(built: dict[str, Path]) -> None:
    from nbclient import NotebookClient
    nb = read(built["answer key"] / "01_callbacks.ipynb")
    where = {"metadata": {"path": str(ROOT / "notebooks")}}
    # coalesce_streams: a print can reach the client in two messages (on a busy machine it did), one verdict a cell
    NotebookClient(nb, timeout=300, kernel_name="python3", resources=where, coalesce_streams=True).execute()
    verdicts = ["".join(o.get("text", "") for o in c.outputs) for c in nb.cells
                if c.cell_type == "code" and ".check(" in c.source]
    assert len(verdicts) == 2 and all(v.splitlines()[0].endswith("checks passed") for v in verdicts), verdicts


# ---------------------------------------------------------------------- results
def test_results_are_written_and_collated(tmp_path: Path) -> None:
    solved = importlib.import_module("hooklab.course._solutions.nb01_callbacks")

    def stub(*args):
        raise NotImplementedError

    ada = results.save("01", student="Ada L.", namespace={"register_each": solved.register_each,
                                                         "run_with_hook": lambda m, x, h: m(x)}, folder=tmp_path)
    bob = results.save("01", student="Bob", namespace={"register_each": stub}, folder=tmp_path)
    record = json.loads(ada.read_text())
    assert ada.name == "results-01_callbacks-Ada_L.json" and record["notebook"] == "01_callbacks"
    assert [(r["answer"], r["status"], r["level"]) for r in record["exercises"]] == [
        ("register_each", "passed", "core"), ("run_with_hook", "failed", "core")]
    later = results.save("03", student="Bob", namespace={}, folder=tmp_path)
    table = results.collate([ada, bob, later])
    text = str(table)
    assert table.header[:3] == ["student", "01 register_each", "01 run_with_hook"]
    assert "03 halve_input_grad*" in table.header, "stretch exercises are marked"
    rows = {r[0]: r for r in table.rows}
    assert rows["Ada L."][1:3] == ["✓", "3/4"] and rows["Ada L."][-1] == f"1/{len(table.header) - 2}"
    assert rows["Bob"][1:3] == ["not written", "-"] and rows["Bob"][-1].startswith("0/"), text
    results.write_csv(table, tmp_path / "t.csv")
    assert (tmp_path / "t.csv").read_text(encoding="utf-8").splitlines()[1].startswith("Ada L.,✓,3/4")
    assert results.main([str(ada), str(bob), "--csv", str(tmp_path / "u.csv")]) == 0
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError):
        results.collate([tmp_path / "bad.json"])


def test_solutions_are_not_names_a_student_can_import_from_a_course_module() -> None:
    for name, ex in all_exercises():
        module = importlib.import_module(name.rpartition(".")[0])
        assert ex.answer not in getattr(module, "__all__", []), name
        value = getattr(module, ex.answer, None)
        assert value is None or isinstance(value, Exercise), f"{name}: the module defines {ex.answer}"
        assert not any(v is ex.worked() for v in vars(ex).values()), f"{name}: the exercise holds its solution"
