"""A notebook's run under nbval and its check in the browser share one kernel.

Under ``python3 dev.py test`` each notebook would otherwise be executed three times: every cell twice
in nbval's kernel (tests/run_twice.py), then once more by the browser test's Run All. Where the
browser check runs (Chromium is there, and the check and every cell of the notebook are selected),
this plugin makes nbval's kernel one that this process's JupyterLab (tests/browser_session.py)
started for the notebook, as opening it would, and adds one test item after the notebook's last
cell, ``notebooks/NN_x.ipynb::in the browser``. That item opens the notebook in the page (JupyterLab
connects to the kernel nbval ran; the item checks the kernel's id), runs the cells that show and
drive its live panel again there (the panel must be live in the page), and makes every check of
tests/test_browser.py from there on (:func:`tests.test_browser.check_notebook_in_browser`).

JupyterLab's own Run All, in a fresh kernel, stays tested by tests/test_browser.py's
``test_notebook_in_browser``: under ``dev.py test`` for the notebooks in :data:`RUN_ALL` (02, whose
cells that raise must not stop Run All), and for every notebook when nbval is not in the run
(``pytest tests/test_browser.py``); it is deselected for a notebook whose check follows nbval. When
only some of a notebook's cells are selected, its check runs Run All in a fresh kernel instead.

Without the browser (no Chromium, ``-m "not browser"``, ``--other-cpu``) nbval starts its own kernel,
as it always did.
"""
from __future__ import annotations

import time
import urllib.error
from pathlib import Path
from queue import Empty
from typing import Any, Iterator

import pytest
from jupyter_client import BlockingKernelClient
from nbval.kernel import RunningKernel
from nbval.plugin import IPyNbFile

from .browser import Lab, running
from .browser_session import shared_browser
from .nbtools import code_cells, read

#: Notebooks whose browser check stays JupyterLab's Run All in a fresh kernel under ``dev.py test``.
RUN_ALL = ("02_tensor_hooks.ipynb",)
#: Whether this system shows its processes in /proc (where it does not, a kernel's process is not looked up).
PROC = Path("/proc/self").is_dir()
#: The name of the item that follows a notebook's cells.
CHECK = "in the browser"
STANDALONE = "tests/test_browser.py::test_notebook_in_browser["


class LabKernel(RunningKernel):
    """nbval's kernel interface for a kernel JupyterLab started for the notebook: nbval sends the cells
    through a client of its own on the kernel's connection file; interrupting and stopping go through
    JupyterLab's REST API, which owns the process. Stopping also ends the session, so a page that
    opens the notebook afterwards would get a fresh kernel."""

    language = "python"

    def __init__(self, lab: Lab, name: str, startup_timeout: float = 60) -> None:  # no super(): it starts a kernel
        self.lab, self.stopped = lab, False
        self.session = lab.start_session(name, timeout=startup_timeout)
        self.kernel_id = self.session["kernel"]["id"]
        #: the kernel's process: alive means this process is running, as nbval's own kernel asks its
        #: Popen (a kernel the server restarted after a crash is another process: not alive). Not the
        #: heartbeat: a busy machine delays its replies past jupyter_client's one second, and
        #: ``BlockingKernelClient.wait_for_ready``, which asks it, then calls a starting kernel dead.
        #: None only where there is no /proc to look in.
        self.pid: int | None = None
        try:
            self.pid = lab.kernel_pid(self.kernel_id)
            if self.pid is None and PROC:
                raise RuntimeError(f"the kernel of {self.session['path']} ended as it started")
            self.kc = BlockingKernelClient(connection_file=str(lab.connection_file(self.kernel_id)))
            self.kc.load_connection_file()
            self.kc.start_channels()
            self.wait_for_ready(startup_timeout)
        except BaseException:
            self.stop()
            raise

    def wait_for_ready(self, timeout: float) -> None:
        """Wait until the kernel answers a kernel_info request and its broadcasts reach this client
        (the IOPub subscription connects a moment after the request channel): the request's idle
        status arrives on IOPub. Fails when the kernel's process has ended (also when the server's
        restarted kernel answered in its place), or after ``timeout``. Without /proc, only the
        timeout: the heartbeat is not asked."""
        deadline = time.monotonic() + timeout
        while True:
            msg_id = self.kc.kernel_info()
            try:
                self.await_reply(msg_id, timeout=min(10, max(1, deadline - time.monotonic())))
                self.await_idle(msg_id, timeout=1)
                answered = True
            except Empty:
                answered = False
            if self.pid is not None and not running(self.pid):
                raise RuntimeError(f"the kernel of {self.session['path']} has ended (its process {self.pid} is gone)")
            if answered:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the kernel of {self.session['path']} did not answer within {timeout:.0f} s "
                                   "(--nbval-kernel-startup-timeout)")

    def is_alive(self) -> bool:
        if self.stopped:
            return False
        if self.pid is None:  # no /proc to look in: the heartbeat (which a very busy machine may miss)
            return bool(self.kc.is_alive())
        return running(self.pid)

    def interrupt(self) -> None:
        self.lab.api("POST", f"/api/kernels/{self.kernel_id}/interrupt")

    def stop(self) -> None:
        """End the session and its kernel; again, or after the browser check shut it down, nothing."""
        if self.stopped:
            return
        self.stopped = True
        if hasattr(self, "kc"):
            self.kc.stop_channels()
        try:
            self.lab.api("DELETE", f"/api/sessions/{self.session['id']}", timeout=30)
        except urllib.error.HTTPError as exc:
            if exc.code != 404:  # 404: gone already (the browser check shuts its kernels down when it ends)
                raise


class BrowserCheck(pytest.Item):
    """The notebook's checks in the browser, made on the kernel nbval ran it in (marked ``browser``)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_marker(pytest.mark.browser)

    def runtest(self) -> None:
        from .test_browser import check_notebook_in_browser, lab_cells, need_browser

        shared = need_browser(self.config)
        kernel = self.parent.kernel
        if not isinstance(kernel, LabKernel):  # not every cell ran before it (-k): Run All in a fresh kernel
            check_notebook_in_browser(shared, self.path, cells=None)
            return
        if self.parent.timed_out:
            pytest.fail(f"{self.path.name}: a cell ran past nbval's timeout (see its failure above), so the rest of "
                        "the notebook did not run: the browser is not checked on that kernel", pytrace=False)
        assert kernel.is_alive(), (f"{self.path.name}: the kernel nbval ran the notebook in has ended (it died, or "
                                   "nbval stopped it): see the cells' failures above")
        cells = lab_cells(self.path)
        assert cells, f"{self.path.name} stores no live panel (an output whose text starts '<hooklab Panel')"
        check_notebook_in_browser(shared, self.path, cells=cells, kernel_id=kernel.kernel_id)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"{self.path.name}: {CHECK}"


class SharedKernelNotebook(IPyNbFile):
    """nbval's collector of a notebook's cells, plus the browser check after the last one; its kernel
    is JupyterLab's when that check and every cell are in the run and the browser is there."""

    def collect(self) -> Iterator[pytest.Item]:
        yield from super().collect()
        if self.path.name not in RUN_ALL:
            yield BrowserCheck.from_parent(self, name=CHECK)

    def _shares_kernel(self) -> bool:
        """The check and every code cell of this notebook are in the run (they run in that order, on
        one worker, as conftest.py schedules a notebook), and coverage is off (nbval sets it up in its
        own kernel)."""
        mine = [item for item in self.session.items if item.parent is self]
        checked = any(isinstance(item, BrowserCheck) for item in mine)
        every_cell = len(mine) - checked == len(list(code_cells(read(self.path))))
        return checked and every_cell and not getattr(self.config.option, "cov_source", None)

    def setup(self) -> None:
        try:
            shared = shared_browser(self.config) if self._shares_kernel() else "the cells alone"
        except RuntimeError:  # the browser failed to start: the check reports it, the cells run as always
            shared = "no browser"
        if isinstance(shared, str):
            super().setup()  # nbval's own kernel
            return
        self.kernel = LabKernel(shared.lab, self.path.name,
                                startup_timeout=self.config.option.nbval_kernel_startup_timeout)
        self.setup_sanitize_files()

    def teardown(self) -> None:
        if isinstance(self.kernel, LabKernel):
            self.kernel.stop()  # whether or not it still runs: the client's channels and the session go too
        else:
            super().teardown()


class SharedKernel:
    """The plugin (registered by conftest.py when nbval runs)."""

    @pytest.hookimpl(wrapper=True)
    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> Any:
        collected = yield
        return [SharedKernelNotebook.from_parent(parent, path=file_path) if type(node) is IPyNbFile else node
                for node in collected]

    @pytest.hookimpl(trylast=True)  # after -m and -k have deselected what they do
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        followed = {item.path.name for item in items if isinstance(item, BrowserCheck)}
        duplicates = [item for item in items
                      if item.nodeid.startswith(STANDALONE) and item.nodeid[len(STANDALONE):-1] in followed]
        if duplicates:
            config.hook.pytest_deselected(items=duplicates)
            items[:] = [item for item in items if item not in duplicates]
