"""The folder list shows the design: three layers (the hook core in ``hooklab/``, the lab in
``hooklab/lab/``, the course in ``hooklab/course/``), each importing only the ones before it; each
notebook's helper module named after the notebook (and back); and the size rules of the package."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from .nbtools import notebooks, read

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hooklab"
COURSE = PACKAGE / "course"
LAB = PACKAGE / "lab"
#: The line counts (docstrings included) the core and the lab may not grow past: the figures measured
#: when the lab was rebuilt (core 1,500, lab 1,896). The aim is 1,400 and 1,300; that is not reached:
#: the model-zoo fixes (nested outputs, compiled models, eval-mode passes, the progress line) added
#: about 400 lines to the two. Lower these figures as code leaves; never raise them for a feature.
#: Raised only for fixes of silently wrong answers on real models, by what they need beyond the room made:
#: to 1,516 (hooks inside compiled and TorchScript parts refused: 34 lines, 18 taken out of the core) and
#: to 1,522 (a parametrized or dynamically quantized layer is a leaf, not its weight's modules: 7 lines).
CORE_LINES, LAB_LINES = 1522, 1896
#: The private attributes of PyTorch and ipywidgets read, each in one module (named in its docstring).
INTERNALS = {"inspection.py": {"_is_full_backward_hook", "_parameters", "_buffers", "_version", "_C",
                               "_current_graph_task_id"},
             "lab/controls.py": {"_options_values"}}
#: Names that start with an underscore but are public protocol: namedtuples, IPython's display methods, and
#: ``os._exit`` (documented: ends the process without Python's shutdown).
PROTOCOL = {"_fields", "_asdict", "_replace", "_repr_mimebundle_", "_repr_html_", "_ipython_display_", "_exit"}
#: Course modules that serve more than one notebook, named for what they hold.
SHARED = {"__init__", "data", "shapes", "checks", "results"}


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


def _core() -> list[Path]:
    """The hook core: every module in hooklab/ outside lab/ and course/."""
    return sorted(PACKAGE.glob("*.py"))


def test_the_core_imports_neither_the_lab_nor_the_course_and_the_lab_not_the_course():
    facade = {"__init__.py", "plots.py"}  # the package's names, and the lab's plots under hooklab.plots
    leaks = {p.name: [m for m in _imports(p) if m.startswith(("hooklab.course", "hooklab.lab"))]
             for p in _core() if p.name not in facade}
    assert not {k: v for k, v in leaks.items() if v}, f"core modules import the lab or the course: {leaks}"
    leaks = {p.name: [m for m in _imports(p) if m.startswith("hooklab.course")] for p in sorted(LAB.glob("*.py"))}
    assert not {k: v for k, v in leaks.items() if v}, f"lab modules import the course: {leaks}"


def _lines(paths: list[Path]) -> int:
    return sum(len(p.read_text().splitlines()) for p in paths)


def test_the_core_and_the_lab_keep_within_their_line_budgets():
    """A ratchet, not the aim: see CORE_LINES."""
    core, lab = _lines(_core()), _lines(sorted(LAB.glob("*.py")))
    assert core <= CORE_LINES, f"the hook core has {core} lines (budget {CORE_LINES})"
    assert lab <= LAB_LINES, f"the lab has {lab} lines (budget {LAB_LINES})"


def test_no_function_over_50_lines_and_no_class_over_250():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                n, limit = node.end_lineno - node.lineno + 1, 250 if isinstance(node, ast.ClassDef) else 50
                if n > limit:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {n} lines")
    assert not long, "too long: " + "; ".join(long)


def _private_reads(path: Path) -> list[str]:
    """``x._name`` where ``x`` is not ``self``/``cls`` and ``_name`` is not this module's own, and
    ``from m import _name``: another module's private names."""
    tree = ast.parse(path.read_text())
    own = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))}
    own |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id in ("self", "cls") and isinstance(n.ctx, ast.Store)}
    own |= {t.id for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign))
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    allowed = own | PROTOCOL | INTERNALS.get(str(path.relative_to(PACKAGE)) if path.is_relative_to(PACKAGE) else "", set())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")) and node.attr not in allowed:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
        if isinstance(node, ast.ImportFrom):
            found += [f"{path.relative_to(ROOT)}:{node.lineno} imports {a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_nothing_reads_another_modules_private_names():
    found = [r for root in ("hooklab", "benchmarks") for p in sorted((ROOT / root).rglob("*.py")) for r in _private_reads(p)]
    assert not found, f"private names of other modules read: {found}"
    for module, names in INTERNALS.items():
        doc = ast.get_docstring(ast.parse((PACKAGE / module).read_text())) or ""
        assert all(n in doc for n in names), \
            f"hooklab/{module}: its docstring must name every private attribute it reads: {sorted(names)}"


def test_no_block_of_six_identical_lines_repeats():
    seen: dict[tuple[str, ...], str] = {}
    repeated = []
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = [line.strip() for line in path.read_text().splitlines()]
        code = [(i, line) for i, line in enumerate(lines, 1) if line and not line.startswith("#")]
        for k in range(len(code) - 5):
            block = tuple(line for _, line in code[k:k + 6])
            where = f"{path.relative_to(ROOT)}:{code[k][0]}"
            if block in seen and seen[block].split(":")[0] != where.split(":")[0] or \
                    block in seen and int(seen[block].split(":")[1]) + 6 <= code[k][0]:
                repeated.append(f"{seen[block]} and {where}")
            seen.setdefault(block, where)
    assert not repeated, f"blocks of 6 identical lines repeated: {repeated[:10]}"


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
