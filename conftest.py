"""Test-session setup shared by tests/ and the notebooks (collected by nbval).

Two switches prove that no test depends on the order the suite runs in (README, "Tests"):

* ``--reverse`` runs the files in reverse order and, within each test file, the tests in reverse
  order. A notebook's cells keep their order: under nbval they are one kernel's steps, top to bottom.
* ``--dist load`` (instead of the default ``--dist loadfile``) hands each test to whichever worker is
  free, test by test, so tests of one file run in different processes; a notebook's cells still go
  to one worker together, for the same reason.
"""

from __future__ import annotations

import os
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--reverse", action="store_true", default=False,
                     help="run the test files, and the tests in each, in reverse order (a notebook's cells "
                          "keep theirs): the suite must not depend on its order")
    parser.addoption("--zoo-full", action="store_true",
                     help="also run the model-zoo conformance sweep of every module (tests marked zoo_full)")
    parser.addoption("--site", action="store_true",
                     help="run the static site's tests (marked site) on the _site/ that `python3 dev.py site` built")


def pytest_report_header(config: pytest.Config) -> str:
    import torch
    mode = "another CPU (python3 dev.py test --other-cpu)" if os.environ.get("HOOKLAB_OTHER_CPU") else "this CPU"
    order = "; order: reversed (--reverse)" if config.getoption("reverse") else ""
    return (f"float kernels: {mode}; PyTorch CPU capability {torch.backends.cpu.get_cpu_capability()}, "
            f"{torch.get_num_threads()} thread(s){order}")


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


def reversed_order(items: list[pytest.Item]) -> list[pytest.Item]:
    """The files in reverse order, and each file's tests reversed, except a notebook's cells."""
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(_file(item), []).append(item)
    return [item for name in reversed(list(files))
            for item in (files[name] if name.endswith(".ipynb") else reversed(files[name]))]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every notebook cell checked by nbval depends on the CPU's float kernels: ``dev.py test
    --other-cpu`` runs them again (``-m kernels``). The run-twice test is not run again there: it
    asks whether a second run changes what a cell shows (state, stacked hooks), which the kernels
    do not change, and the first run on the other kernels is nbval's. The model-zoo sweep of every
    module runs only with ``--zoo-full``; the static site's tests only with ``--site`` (they read the
    site ``python3 dev.py site`` built: a contributor's ``dev.py test`` neither builds nor checks it)."""
    full, site = config.getoption("--zoo-full"), config.getoption("--site")
    skip_full = pytest.mark.skip(reason="the sweep of every module runs with --zoo-full")
    skip_site = pytest.mark.skip(reason="the site's tests run with --site, after `python3 dev.py site`")
    for item in items:
        if _file(item).endswith(".ipynb"):
            item.add_marker(pytest.mark.kernels)
        if not full and item.get_closest_marker("zoo_full"):
            item.add_marker(skip_full)
        if not site and item.get_closest_marker("site"):
            item.add_marker(skip_site)
    if config.getoption("reverse"):
        items[:] = reversed_order(items)


class _NotebooksWholeUnderLoad:
    """``--dist load``: every test on its own, but each notebook's cells together (see the top)."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if config.getvalue("dist") != "load":
            return None  # pytest-xdist's own scheduler
        from xdist.scheduler import LoadScopeScheduling

        class TestByTestNotebooksWhole(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                path = nodeid.split("::", 1)[0]
                return path if path.endswith(".ipynb") else nodeid

        return TestByTestNotebooksWhole(config, log)


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_NotebooksWholeUnderLoad(), "hooklab-notebooks-whole-under-load")
