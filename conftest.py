"""Test-session setup shared by tests/ and the notebooks (collected by nbval)."""

from __future__ import annotations

import os

import pytest


def pytest_report_header(config: pytest.Config) -> str:
    import torch
    mode = "another CPU (python3 dev.py test --other-cpu)" if os.environ.get("HOOKLAB_OTHER_CPU") else "this CPU"
    return (f"float kernels: {mode}; PyTorch CPU capability {torch.backends.cpu.get_cpu_capability()}, "
            f"{torch.get_num_threads()} thread(s)")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--zoo-full", action="store_true",
                     help="also run the model-zoo conformance sweep of every module (tests marked zoo_full)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every notebook cell checked by nbval, and the run-twice test, depend on the CPU's float
    kernels: they are what ``dev.py test --other-cpu`` runs again (``-m kernels``). The model-zoo
    sweep of every module runs only with ``--zoo-full``."""
    full = config.getoption("--zoo-full")
    skip_full = pytest.mark.skip(reason="the sweep of every module runs with --zoo-full (.ci/run)")
    for item in items:
        if item.nodeid.split("::")[0].endswith((".ipynb", "test_rerun.py")):
            item.add_marker(pytest.mark.kernels)
        if not full and item.get_closest_marker("zoo_full"):
            item.add_marker(skip_full)
