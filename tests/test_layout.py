"""The folder list shows the design: the general library apart from the course, and each
notebook's helper module named after the notebook (and back)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from .nbtools import notebooks, read

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hooklab"
COURSE = PACKAGE / "course"
#: Course modules that serve more than one notebook, named for what they hold.
SHARED = {"__init__", "data", "shapes"}


def _imports(path: Path) -> list[str]:
    """Every module a file imports, absolute (relative imports resolved against its package)."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            found += [module] + [f"{module}.{alias.name}" for alias in node.names]
    return found


def test_the_core_imports_nothing_from_the_course():
    core = sorted(PACKAGE.glob("*.py"))
    assert core, "no core modules found"
    leaks = {p.name: [m for m in _imports(p) if m.startswith("hooklab.course")] for p in core}
    assert not {k: v for k, v in leaks.items() if v}, f"core modules import course content: {leaks}"


def test_every_course_module_names_its_notebook_and_back():
    names = {p.stem for p in COURSE.glob("*.py")} - SHARED
    stems = {p.stem for p in notebooks()}
    for name in names:
        assert re.fullmatch(r"nb\d\d_\w+", name), f"hooklab/course/{name}.py: name it nbNN_<notebook topic>"
        assert name[2:] in stems, f"hooklab/course/{name}.py serves no notebook: no notebooks/{name[2:]}.ipynb"


def test_a_notebook_imports_only_its_own_course_module_and_the_shared_ones():
    for path in notebooks():
        source = "\n".join(c.source for c in read(path).cells if c.cell_type == "code")
        used = set(re.findall(r"hooklab\.course\.(\w+)|from hooklab\.course import (\w+)", source))
        modules = {a or b for a, b in used}
        own = f"nb{path.stem}"
        others = modules - SHARED - {own}
        assert not others, f"{path.name} uses another notebook's helpers {sorted(others)}: move what two share to a shared module"
        if (COURSE / f"{own}.py").exists():
            assert own in modules, f"{path.name} never imports its own helper module hooklab.course.{own}"
