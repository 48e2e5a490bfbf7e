"""The learner's install, requirements-lab.txt: what `python3 dev.py lab` installs (tests/test_dev.py
checks that it installs this file and nothing else).

* It pins exactly the notebooks' runtime (the packages Binder gets too) and installs hooklab; the
  contributor's requirements.txt includes it, so each pin is written once.
* The notebooks and hooklab import nothing a lean install lacks: every module they import is the
  standard library's or comes from a distribution that installing requirements-lab.txt brings
  (its packages, hooklab's own requirements, and everything those require), as the installed
  distributions' metadata says.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from .binder_env import read_pins
from .nbtools import code_cells, notebooks, read
from .test_binder import RUNTIME

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "requirements-lab.txt"
FULL = ROOT / "requirements.txt"


def _lines(path: Path) -> list[str]:
    return [line.split("#", 1)[0].strip() for line in path.read_text().splitlines() if line.split("#", 1)[0].strip()]


def _name(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


# ---------------------------------------------------------------------- the files
def test_the_lab_file_pins_the_notebooks_runtime_and_installs_hooklab() -> None:
    lines = _lines(LAB)
    assert sorted(read_pins(LAB)) == sorted(RUNTIME), (
        f"requirements-lab.txt must pin exactly the notebooks' runtime {RUNTIME}; it pins {sorted(read_pins(LAB))}")
    options = [line for line in lines if line.startswith("-")]
    assert options == ["-e ."], f"requirements-lab.txt: hooklab (`-e .`) and no other option or file: {options}"
    assert len(lines) == len(RUNTIME) + 1, f"requirements-lab.txt has lines that are neither a pin nor `-e .`: {lines}"


def test_requirements_include_the_lab_file_and_pin_its_packages_nowhere_else() -> None:
    lines = _lines(FULL)
    assert "-r requirements-lab.txt" in lines, "requirements.txt must include requirements-lab.txt (`-r`)"
    own = {_name(line.split("==")[0]) for line in lines if "==" in line}
    assert not own & set(RUNTIME), f"requirements.txt pins again what requirements-lab.txt pins: {own & set(RUNTIME)}"
    assert "-e ." not in lines, "requirements.txt installs hooklab again (requirements-lab.txt does)"
    lab, full = read_pins(LAB), read_pins(FULL)
    assert {name: full.get(name) for name in lab} == lab, "requirements.txt's pins of the notebooks' packages differ"


def test_read_pins_follows_included_files(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "inner.txt").write_text("torch==2.14.1  # the pair\nPillow==13.0.0\n-e .\n")
    (tmp_path / "outer.txt").write_text("-r sub/inner.txt\npytest==9.2.0\n--requirement=sub/inner.txt\n")
    assert read_pins(tmp_path / "outer.txt") == {"torch": "2.14.1", "pillow": "13.0.0", "pytest": "9.2.0"}


# ---------------------------------------------------------------------- what the notebooks import
def lean_distributions() -> set[str]:
    """The distributions installing requirements-lab.txt brings: its pins and hooklab, then everything
    they require (extras left out, environment markers evaluated here), from the installed metadata."""
    todo, found = [*read_pins(LAB), "hooklab"], set()
    while todo:
        name = _name(todo.pop())
        if name in found:
            continue
        found.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # not installed here (another platform's dependency): nothing of it can be imported here
        for line in requires:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return found


def imported_modules(source: str) -> set[str]:
    """The top-level modules a piece of Python imports (anywhere in it; relative imports left out)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@functools.cache
def providers() -> dict[str, list[str]]:
    """Top-level module: the installed distributions that provide it (a scan of them all: once)."""
    return metadata.packages_distributions()


def outside_the_lean_set(modules: set[str], allowed: set[str]) -> dict[str, list[str]]:
    """Each module that is neither the standard library's nor hooklab's and that no allowed
    distribution provides, with the distributions that do provide it (none: not installed)."""
    problems = {}
    for module in sorted(modules - set(sys.stdlib_module_names) - {"__future__", "hooklab"}):
        dists = [_name(d) for d in providers().get(module, [])]
        if not set(dists) & allowed:
            problems[module] = dists
    return problems


def course_sources() -> dict[str, str]:
    """Every notebook's code cells (IPython's magics turned into Python) and every module of hooklab."""
    from IPython.core.inputtransformer2 import TransformerManager

    sources = {}
    for path in notebooks():
        for i, cell in code_cells(read(path)):
            sources[f"{path.name} cell {i}"] = TransformerManager().transform_cell(cell.source)
    for path in sorted((ROOT / "hooklab").rglob("*.py")):
        sources[str(path.relative_to(ROOT))] = path.read_text()
    return sources


def test_the_import_check_flags_packages_outside_the_lean_set() -> None:
    """The check itself: a test-only package is flagged, the runtime's and the standard library's are not."""
    allowed = lean_distributions()
    assert {"torch", "ipython", "pillow", "packaging", "hooklab"} <= allowed
    assert not {"transformers", "pytest", "nnsight", "opacus", "timm"} & allowed
    source = "import os, torch\nfrom PIL import Image\nfrom IPython.display import display\nimport transformers\n" \
             "def f():\n    from timm import create_model\n"
    assert outside_the_lean_set(imported_modules(source), allowed) == {
        "timm": ["timm"], "transformers": ["transformers"]}


def test_notebooks_and_hooklab_import_only_what_the_lab_install_brings() -> None:
    sources = course_sources()
    assert len([s for s in sources if ".ipynb" in s]) > 100 and "hooklab/__init__.py" in sources
    allowed = lean_distributions()
    problems = {where: bad for where, source in sources.items()
                if (bad := outside_the_lean_set(imported_modules(source), allowed))}
    assert not problems, ("these import packages that requirements-lab.txt does not install (module: the "
                          f"distributions that provide it): {problems}")


@pytest.mark.parametrize("name", RUNTIME)
def test_each_pin_of_the_lab_file_is_installed_at_that_version(name: str) -> None:
    """The pins describe the environment these tests run in (torch may carry a local label, +cpu)."""
    assert metadata.version(name).split("+")[0] == read_pins(LAB)[name]
