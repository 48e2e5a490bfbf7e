"""The run-twice check (tests/run_twice.py) fails a cell that stacks a callback, and only such a cell.

Three small notebooks, executed once by nbclient to store their outputs, then checked by nbval in a
pytest of their own with the check registered as conftest.py registers it: a cell that appends a
callback to a list and calls every callback (a hook registered again on each run), the same cell
marked ``RERUN_CHANGES_OUTPUT``, and a cell that replaces its callback instead of appending one (also
with its stored output in two stream chunks).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from .run_twice import MESSAGE

ROOT = Path(__file__).resolve().parents[1]
SETUP = "callbacks = []"
STACKS = "callbacks.append(lambda: print('callback ran'))\nfor f in callbacks:\n    f()"
REPLACES = "callbacks[:] = [lambda: print('callback ran')]\nfor f in callbacks:\n    f()"
MARKED = "# RERUN_CHANGES_OUTPUT\n# the lesson: a second run adds a second callback\n" + STACKS
CONFTEST = ("import sys\nsys.path.insert(0, {root!r})\nfrom tests.run_twice import RunTwice\n\n"
            "def pytest_addoption(parser):\n    parser.addoption('--once', action='store_true')\n\n"
            "def pytest_configure(config):\n    if not config.getoption('--once'):\n"
            "        config.pluginmanager.register(RunTwice(), 'run-twice')\n")


def _notebook(folder: Path, name: str, cell: str, split: bool = False) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(SETUP), nbformat.v4.new_code_cell(cell)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    # coalesce_streams: one print stored as one output even when it reached the client in two messages
    NotebookClient(nb, timeout=60, kernel_name="python3", coalesce_streams=True).execute()
    assert nb.cells[1].outputs[0]["text"] == "callback ran\n"  # stored from a plain run: one callback
    if split:  # stored as two stream outputs, as Jupyter stores a print that arrived in two messages
        nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)
                               for text in ("callback ", "ran\n")]
    nbformat.write(nb, folder / name)


def _pytest(folder: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-p", "no:randomly", "-o", "addopts=", "--nbval", "--nbval-current-env", "-rA", *args],
                          cwd=folder, capture_output=True, text=True, timeout=300)
    return done.stdout + done.stderr


def test_run_twice_fails_a_stacking_cell_and_passes_the_others(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST.format(root=str(ROOT)))
    for name, cell in (("stacks.ipynb", STACKS), ("marked.ipynb", MARKED), ("replaces.ipynb", REPLACES)):
        _notebook(tmp_path, name, cell)
    _notebook(tmp_path, "split.ipynb", REPLACES, split=True)
    twice = _pytest(tmp_path)
    assert "FAILED stacks.ipynb::Cell 1" in twice and MESSAGE in twice, twice[-3000:]
    for name in ("marked", "replaces", "split"):  # split: nbval merges the stored streams in place
        assert f"PASSED {name}.ipynb::Cell 1" in twice, twice[-3000:]
    assert "1 failed, 7 passed" in twice, twice[-3000:]
    once = _pytest(tmp_path, "--once", "stacks.ipynb")  # the only one whose result --once changes
    assert "2 passed" in once and MESSAGE not in once, once[-3000:]
