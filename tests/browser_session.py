"""One Chromium, and one page with one JupyterLab, per test process, shared by every browser check.

:func:`shared_chromium` is the browser itself (playwright allows one driver per process, so every test
that needs Chromium takes it from here: the notebooks' checks, the site's test, Binder's).
:func:`shared_browser` adds the page every notebook opens in and the JupyterLab serving copies of the
notebooks: tests/test_browser.py's tests use it, and so does the browser check that follows nbval's
run of a notebook in the same kernel (tests/shared_kernel.py). Each is started at first use and shut
down when pytest ends, also after a failure (``config.add_cleanup``); under pytest-xdist each worker
has its own.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from .browser import CHROMIUM_ARGS, INSTALL_HINT, ConsoleError, Lab, find_chromium, in_ci
from .nbtools import notebooks


@dataclass
class Browser:
    """The page every notebook opens in, and the JupyterLab serving copies of the notebooks."""
    page: Any
    lab: Lab
    #: JupyterLab is loaded in the page; each notebook's check starts from a fresh load (one page that
    #: kept every notebook's widgets and pictures grew until Chromium's renderer crashed, once).
    loaded: bool = False


#: What was started in this process: a Browser or Chromium, or why there is none (a str: not
#: installed), or the error that stopped it from starting (kept, so that it is raised once per test
#: that needs it, not started again for each).
_SHARED: dict[str, Any] = {}


def shared_chromium(config: pytest.Config) -> Any:
    """This process's Chromium (a playwright ``Browser``), or why there is none (a str). Raises the
    error that stopped it from starting, every time it is asked for."""
    if "chromium" not in _SHARED:
        try:
            _SHARED["chromium"] = _launch(config)
        except Exception as exc:
            _SHARED["chromium"] = exc
    return _raise_or_return(_SHARED["chromium"])


def shared_browser(config: pytest.Config) -> Browser | str:
    """This process's :class:`Browser`, started now if this is the first call, or why there is none
    (a str: playwright or Chromium missing). Raises the error that stopped it from starting."""
    if "browser" not in _SHARED:
        chromium = shared_chromium(config)
        if isinstance(chromium, str):
            return chromium
        try:
            _SHARED["browser"] = _open(config, chromium)
        except Exception as exc:
            _SHARED["browser"] = exc
    return _raise_or_return(_SHARED["browser"])


def required(found: Any, what: str = "the browser test") -> Any:
    """What :func:`shared_chromium` or :func:`shared_browser` found; when that is why there is none (a
    str), the calling test is skipped, or fails under CI, where every browser test must run."""
    if isinstance(found, str):
        if in_ci():
            pytest.fail(f"CI is set, so {what} must run, but {found}", pytrace=False)
        pytest.skip(f"{what} skipped: {found}")
    return found


def _raise_or_return(found: Any) -> Any:
    if isinstance(found, Exception):
        raise RuntimeError(f"the browser could not be started in this test process: {found}") from found
    return found


def _cleanup(config: pytest.Config, step: Callable[[], Any]) -> None:
    def run() -> None:
        try:
            step()
        except Exception:  # one part failing to stop must not keep the others running
            pass
    config.add_cleanup(run)  # run last-in, first-out: the page's server before Chromium, Chromium before playwright


def _launch(config: pytest.Config) -> Any:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return "the playwright package is missing: run `python3 dev.py setup` (it installs requirements.txt)"
    executable = find_chromium()
    if executable is None:
        return f"no Chromium found: {INSTALL_HINT}"
    driver = sync_playwright().start()
    _cleanup(config, driver.stop)
    chromium = driver.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
    _cleanup(config, chromium.close)
    return chromium


def _open(config: pytest.Config, chromium: Any) -> Browser:
    # one context and one page: JupyterLab's scripts load from the cache after the first notebook
    page = chromium.new_context(viewport={"width": 1400, "height": 1100}).new_page()
    page.errors, page.console_errors = [], []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.on("console", lambda msg: page.console_errors.append(ConsoleError(msg.text[:300], msg.location.get(
        "url", ""))) if msg.type == "error" else None)
    workdir = Path(tempfile.mkdtemp(prefix="hooklab-lab-"))
    _cleanup(config, lambda: shutil.rmtree(workdir, ignore_errors=True))
    lab = Lab(notebooks(), workdir).__enter__()
    _cleanup(config, lambda: lab.__exit__(None, None, None))
    return Browser(page, lab)
