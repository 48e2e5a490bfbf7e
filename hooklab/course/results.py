"""Exercise results a student can hand in, and a table of everyone's for the instructor.

In a notebook, after the exercises, one call checks every exercise of that notebook again with the
functions the learner wrote (looked up by the names the notebook asks for) and writes a small JSON file:

    from hooklab.course import results
    results.save("03", student="Ada Lovelace")        # writes results-03_module_hooks-Ada_Lovelace.json

The instructor collects the files and collates them into one table (rows: students; columns: exercises,
``*`` marking the stretch ones; cells: ``✓``, the checks passed as ``2/4``, ``not written`` or ``-``):

    python -m hooklab.course.results collected/*.json --csv table.csv

>>> from hooklab.course.nb02_tensor_hooks import clamp_exercise
>>> row = verdict_row(clamp_exercise, {"clamp_hook": lambda grad: grad})   # returns the gradient unchanged
>>> row["status"], row["answer"], row["level"], f"{row['passed']}/{row['checks']}"
('failed', 'clamp_hook', 'core', '3/5')
>>> verdict_row(clamp_exercise, {})["status"]                              # never defined
'missing'
"""

from __future__ import annotations

import argparse
import csv
import datetime
import getpass
import importlib
import json
import pkgutil
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable

from ..lab.exercises import Exercise
from ..table import Table

__all__ = ["exercises", "verdict_row", "gather", "save", "collate", "write_csv"]

#: Bumped when the file's layout changes; :func:`collate` refuses files of another version.
FORMAT = 1


def course_module(notebook: str | ModuleType) -> ModuleType:
    """The course module of a notebook: ``"03"``, ``"03_module_hooks"`` or the module itself."""
    if isinstance(notebook, ModuleType):
        return notebook
    import hooklab.course as course
    number = str(notebook)[:2]
    for info in pkgutil.iter_modules(course.__path__):
        if info.name.startswith(f"nb{number}_"):
            return importlib.import_module(f"hooklab.course.{info.name}")
    raise LookupError(f"no course module for notebook {notebook!r}: give its number, e.g. '03'.")


def exercises(notebook: str | ModuleType) -> list[tuple[str, Exercise]]:
    """``(name, exercise)`` for every exercise of a notebook, in the order the module defines them."""
    module = course_module(notebook)
    return [(name, value) for name, value in vars(module).items() if isinstance(value, Exercise)]


def verdict_row(exercise: Exercise, namespace: dict[str, Any], name: str = "") -> dict[str, Any]:
    """One exercise checked with ``namespace[exercise.answer]``: ``status`` is ``passed``, ``failed``,
    ``not written`` or ``missing`` (the learner never defined the function)."""
    row: dict[str, Any] = {"exercise": name or exercise.answer, "title": exercise.title, "level": exercise.level,
                           "answer": exercise.answer, "passed": 0, "checks": len(exercise.checks)}
    fn = namespace.get(exercise.answer)
    if fn is None:
        return {**row, "status": "missing"}
    verdict = exercise.check(fn)
    passed = sum(ok for ok, _, _ in verdict.lines)
    status = "passed" if verdict.passed else "not written" if not verdict.written else "failed"
    return {**row, "status": status, "passed": passed, "checks": max(len(verdict.lines), row["checks"]),
            "mistakes": verdict.mistakes}


def _user_namespace() -> dict[str, Any]:
    try:
        from IPython import get_ipython
        shell = get_ipython()
    except ImportError:
        shell = None
    if shell is None:
        raise RuntimeError("not in a notebook: pass namespace=globals() (where your functions are defined).")
    return shell.user_ns


def gather(notebook: str | ModuleType, namespace: dict[str, Any] | None = None,
           student: str = "") -> dict[str, Any]:
    """Every exercise of ``notebook`` checked again with the learner's functions, as a dict ready for JSON."""
    module = course_module(notebook)
    namespace = _user_namespace() if namespace is None else namespace
    rows = [verdict_row(ex, namespace, name) for name, ex in exercises(module)]
    return {"format": FORMAT, "student": student or getpass.getuser(), "notebook": module.__name__.rpartition(".nb")[2],
            "written": datetime.datetime.now().isoformat(timespec="seconds"), "exercises": rows}


def save(notebook: str | ModuleType, student: str = "", namespace: dict[str, Any] | None = None,
         folder: str | Path = ".") -> Path:
    """:func:`gather`, written to ``folder/results-<notebook>-<student>.json``; prints what it wrote."""
    record = gather(notebook, namespace, student)
    safe = re.sub(r"[^\w-]+", "_", record["student"]).strip("_") or "student"
    path = Path(folder) / f"results-{record['notebook']}-{safe}.json"
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    done = sum(row["status"] == "passed" for row in record["exercises"])
    print(f"{done} of {len(record['exercises'])} exercises pass; wrote {path}" +
          ("" if student else f" (as {record['student']!r}: pass student='your name' to name the file)"))
    return path


def _cell(row: dict[str, Any]) -> str:
    return {"passed": "✓", "missing": "-", "not written": "not written"}.get(
        row["status"], f"{row['passed']}/{row['checks']}")


def collate(paths: Iterable[str | Path]) -> Table:
    """One table from many results files: a row per student, a column per exercise (``*``: stretch);
    a later file for the same student and notebook replaces an earlier one."""
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(map(Path, paths)):
        record = json.loads(path.read_text())
        if record.get("format") != FORMAT:
            raise ValueError(f"{path}: not a hooklab results file of format {FORMAT}")
        key = (record["student"], record["notebook"])
        if key not in latest or record["written"] >= latest[key]["written"]:
            latest[key] = record
    columns: dict[str, str] = {}
    cells: dict[str, dict[str, str]] = {}
    for (student, notebook), record in sorted(latest.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        for row in record["exercises"]:
            column = f"{notebook[:2]} {row['answer']}" + ("*" if row["level"] == "stretch" else "")
            columns.setdefault(column, column)
            cells.setdefault(student, {})[column] = _cell(row)
    header = ["student", *columns, "passed"]
    rows = [[student, *(cells[student].get(c, "") for c in columns),
             f"{sum(v == '✓' for v in cells[student].values())}/{len(columns)}"] for student in sorted(cells)]
    return Table(header, rows)


def write_csv(table: Table, path: str | Path) -> None:
    """The collated table as CSV (for a spreadsheet or a grade book)."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([table.header, *table.rows])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hooklab.course.results", description=collate.__doc__)
    parser.add_argument("files", nargs="+", help="results-*.json files handed in by students")
    parser.add_argument("--csv", help="also write the table to this CSV file")
    args = parser.parse_args(argv)
    table = collate(args.files)
    print(table)
    if args.csv:
        write_csv(table, args.csv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
