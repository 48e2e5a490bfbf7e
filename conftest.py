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
import re
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--reverse", action="store_true", default=False,
                     help="run the test files, and the tests in each, in reverse order (a notebook's cells "
                          "keep theirs): the suite must not depend on its order")
    parser.addoption("--environments", action="store_true", default=False,
                     help="also run the checks that build other environments (tests marked environments: Binder's, "
                          "the oldest torch and ipywidgets, the install cell; `python3 dev.py test --environments`)")
    parser.addoption("--once", action="store_true", default=False,
                     help="run each notebook cell once under nbval (by default each is run twice in a row, and both "
                          "outputs must equal the stored one: tests/run_twice.py)")
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
    --other-cpu`` runs them again (``-m kernels``), once each (``--once``): the second run of
    tests/run_twice.py asks whether a repeat changes what a cell shows (state, stacked hooks), which
    the kernels do not change. The model-zoo sweep of every module runs only with ``--zoo-full``; the
    checks that build other environments (marked ``environments``) only with ``--environments``; the
    static site's tests only with ``--site`` (they read the site ``python3 dev.py site`` built: a
    contributor's ``dev.py test`` neither builds nor checks it)."""
    full = config.getoption("--zoo-full")
    skip_full = pytest.mark.skip(reason="the sweep of every module runs with --zoo-full")
    environments, site = config.getoption("--environments"), config.getoption("--site")
    skip_site = pytest.mark.skip(reason="the site's tests run with --site, after `python3 dev.py site`")
    skip_env = pytest.mark.skip(reason="builds another environment: `python3 dev.py test --environments` (.ci/run)")
    for item in items:
        if not environments and item.get_closest_marker("environments"):
            item.add_marker(skip_env)
        if _file(item).endswith(".ipynb") and not item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.kernels)  # a notebook's cells (not its check in the browser)
        if not full and item.get_closest_marker("zoo_full"):
            item.add_marker(skip_full)
        if not site and item.get_closest_marker("site"):
            item.add_marker(skip_site)
    items[:] = reversed_order(items) if config.getoption("reverse") else heaviest_first(items)


#: Files whose tests are handed out one by one even under the default ``--dist loadfile``: each test is
#: long (a notebook in a browser or under the oldest torch, one model of the zoo, a page of the site),
#: and a file of them on one worker would keep it busy for minutes after the other has finished.
SPREAD = (
    "tests/test_browser.py", "tests/test_zoo_explore.py", "tests/test_zoo_recorder.py", "tests/test_oldest_torch.py",
    "tests/test_site.py",
)


def heaviest_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """The default order for two workers: the notebooks run in the browser alone (Run All in a fresh
    kernel), then the notebooks under nbval, each followed by its check in the browser on the same
    kernel (tests/shared_kernel.py), both the later (longer) notebooks first, then everything else
    in collection order; a notebook's cells keep their order, its check last."""
    def weight(item: pytest.Item) -> tuple[int, int]:
        number = re.search(r"(\d\d)_\w+\.ipynb", item.nodeid)
        later_first = -int(number.group(1)) if number else 0
        if item.nodeid.startswith("tests/test_browser.py::test_notebook_in_browser["):
            return 0, later_first
        return (1, later_first) if _file(item).endswith(".ipynb") else (2, 0)
    return sorted(items, key=weight)  # stable


class _Scheduling:
    """How pytest-xdist hands tests to the two workers (see the top): a notebook's cells always
    together; under ``--dist load`` every other test on its own; under ``--dist loadfile`` (the
    default) a file at a time, except the files in :data:`SPREAD`. Work is handed out in the
    collection's order (heaviest first, unless ``--reverse``), not reordered by size."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        dist = config.getvalue("dist")
        if dist not in ("load", "loadfile"):
            return None  # pytest-xdist's own scheduler
        from xdist.scheduler import LoadScopeScheduling

        config.option.loadscopereorder = False

        class NotebooksWhole(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                path = nodeid.split("::", 1)[0]
                if path.endswith(".ipynb"):
                    return path
                return nodeid if dist == "load" or path in SPREAD else path

        return NotebooksWhole(config, log)


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("--once"):
        from tests.run_twice import RunTwice

        config.pluginmanager.register(RunTwice(), "hooklab-run-twice")
    if config.getoption("nbval", default=False):
        from tests.shared_kernel import SharedKernel

        config.pluginmanager.register(SharedKernel(), "hooklab-shared-kernel")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_Scheduling(), "hooklab-scheduling")
