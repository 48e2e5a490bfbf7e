"""The oldest torch pyproject.toml accepts is the one every notebook was run with.

Fast: pyproject.toml's floors for torch and torchvision are the releases tests/oldest_torch.py
installs, and its runner counts a cell that raises where no error is meant (and only such a cell).

Slow (``python3 dev.py test --environments``): every notebook, top to bottom in a fresh kernel, in
the cached environment of tests/oldest_torch.py (Python 3.12, that torch and torchvision,
ipywidgets 7.7.1), hooklab installed with ``pip install --no-deps`` as the install cell does; no
unexpected error. Outputs are not compared: another release prints other digits.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from . import notebook_header as header
from . import oldest_torch
from .browser import in_ci
from .nbtools import notebooks

NOTEBOOKS = notebooks()


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def test_pyproject_floor_is_the_tested_release() -> None:
    deps = [d.replace(" ", "") for d in header.project()["dependencies"]]
    assert f"torch>={_minor(oldest_torch.TORCH)}" in deps, deps
    assert f"torchvision>={_minor(oldest_torch.TORCHVISION)}" in deps, deps
    assert f"ipywidgets>={oldest_torch.IPYWIDGETS}" in deps, deps


def test_the_runner_counts_only_unexpected_errors(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_code_cell("# NBVAL_RAISES_EXCEPTION\n# raises on purpose\n1 / 0"),
        nbformat.v4.new_markdown_cell("text"),
        nbformat.v4.new_code_cell("[][x]"),
        nbformat.v4.new_code_cell("print('still runs after an error')"),
    ])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "errors.ipynb"
    nbformat.write(nb, path)
    found = oldest_torch.run_here([path])
    assert found == {"errors.ipynb": [[3, 3, "IndexError", "list index out of range"]]}, found


@pytest.fixture(scope="module")
def oldest(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The cached environment, and hooklab installed for this run into a folder of its own."""
    python = oldest_torch.python_path()
    if python is None:
        message = f"no Python {oldest_torch.PYTHON} on this machine (pyenv install {oldest_torch.PYTHON})"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    env = oldest_torch.environment(python=python)
    return env, oldest_torch.install_hooklab(env, tmp_path_factory.mktemp("oldest-torch") / "hooklab")


@pytest.mark.slow
@pytest.mark.environments
def test_the_environment_holds_the_oldest_releases(oldest: tuple[Path, Path]) -> None:
    env, hooklab_dir = oldest
    found = oldest_torch.versions(env, hooklab_dir)
    assert found["python"].startswith(f"{oldest_torch.PYTHON}."), found
    assert found["torch"].split("+")[0] == oldest_torch.TORCH, found
    assert found["torchvision"].split("+")[0] == oldest_torch.TORCHVISION, found
    assert found["ipywidgets"] == oldest_torch.IPYWIDGETS, found
    assert Path(found["hooklab"]).is_relative_to(hooklab_dir), f"hooklab imports from {found['hooklab']}"


@pytest.mark.slow
@pytest.mark.environments
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_with_the_oldest_torch(path: Path, oldest: tuple[Path, Path]) -> None:
    env, hooklab_dir = oldest
    errors = oldest_torch.run(env, hooklab_dir, [path])
    assert errors == {path.name: []}, (
        f"{path.name} under torch {oldest_torch.TORCH} (cell index, execution count, error): {errors}")
