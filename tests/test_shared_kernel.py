"""tests/shared_kernel.py: nbval's cells in a kernel JupyterLab started, and which browser check runs.

Whether the browser check really runs on nbval's kernel is proved by every notebook's check itself:
it runs only the lab's cells in the page, which fail there with a NameError in a fresh kernel, and
it asserts that nbval's kernel is the JupyterLab one. Here: the kernel adapter against a real
JupyterLab (no browser needed), and the items a run collects.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from queue import Empty
from typing import Any

import pytest
from jupyter_client.channels import HBChannel

from .browser import Lab
from .nbtools import code_cells, notebooks, read
from .shared_kernel import CHECK, RUN_ALL, LabKernel

ROOT = Path(__file__).resolve().parents[1]
FIRST = notebooks()[0]


def _outputs(kernel: LabKernel, code: str, until: str = "idle", timeout: float = 60) -> list[dict[str, Any]]:
    """Run ``code`` as nbval sends a cell; the IOPub messages it caused, until the kernel is idle
    again (or, with ``until="stream"``, until its first printed text)."""
    msg_id = kernel.execute_cell_input(code)
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = kernel.get_message("iopub", timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        seen.append(msg)
        if until == "stream" and msg["msg_type"] == "stream":
            return seen
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return seen
    raise AssertionError(f"the kernel did not finish {code!r} within {timeout} s: {seen}")


def _answers(kernel: LabKernel, timeout: float) -> None:
    """Wait until whatever process listens on the kernel's connection answers a kernel_info request
    (neither the heartbeat nor the kernel's process asked)."""
    deadline = time.monotonic() + timeout
    while True:
        msg_id = kernel.kc.kernel_info()
        try:
            kernel.await_reply(msg_id, timeout=1)
            return
        except Empty:
            assert time.monotonic() < deadline, f"nothing answered on the kernel's connection within {timeout} s"


def _result(kernel: LabKernel, code: str) -> str:
    found = [m["content"]["data"]["text/plain"] for m in _outputs(kernel, code) if m["msg_type"] == "execute_result"]
    assert len(found) == 1, found
    return found[0]


def test_the_lab_kernel_runs_cells_as_nbval_sends_them_and_goes_with_its_session(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A busy machine answers the heartbeat late (jupyter_client gives it one second), and a kernel that
    # misses it is not dead: the adapter must start, run and stop one without ever hearing it.
    monkeypatch.setattr(HBChannel, "is_beating", lambda self: False)
    with Lab([FIRST], tmp_path) as lab:
        kernel = LabKernel(lab, FIRST.name)
        try:
            assert kernel.is_alive()
            # the session a page opening the notebook connects to is this kernel's
            sessions = [(s["path"], s["kernel"]["id"]) for s in lab.api("GET", "/api/sessions")]
            assert sessions == [(f"notebooks/{FIRST.name}", kernel.kernel_id)]
            _outputs(kernel, "x = 41")
            assert _result(kernel, "x + 1") == "42"  # one kernel's state, cell after cell
            assert _result(kernel, "import os; os.getcwd()") == repr(str(lab.root / "notebooks"))
            # nbval interrupts a cell that runs past its timeout: the cell ends with KeyboardInterrupt
            started = _outputs(kernel, "import time\nprint('sleeping', flush=True)\ntime.sleep(60)", until="stream")
            assert started[-1]["content"]["text"] == "sleeping\n"
            kernel.interrupt()
            rest = []
            while not any(m["msg_type"] == "status" and m["content"]["execution_state"] == "idle" for m in rest):
                rest.append(kernel.get_message("iopub", timeout=30))
            assert [m["content"]["ename"] for m in rest if m["msg_type"] == "error"] == ["KeyboardInterrupt"]
            assert _result(kernel, "x") == "41"  # the state survives the interrupt
            # a kernel that does not answer (stopped, not dead) fails the wait at its deadline
            os.kill(kernel.pid, signal.SIGSTOP)
            try:
                with pytest.raises(RuntimeError, match="did not answer within 2 s"):
                    kernel.wait_for_ready(2)
                assert kernel.is_alive()
            finally:
                os.kill(kernel.pid, signal.SIGCONT)
            assert _result(kernel, "x") == "41"
            # a second kernel for the same notebook would be handed the used one: refused
            with pytest.raises(RuntimeError, match="already has a session"):
                LabKernel(lab, FIRST.name)
        finally:
            kernel.stop()
        kernel.stop()  # twice is harmless (nbval's teardown stops a kernel the browser check shut down)
        assert not kernel.is_alive()
        assert lab.api("GET", "/api/sessions") == [] and lab.api("GET", "/api/kernels") == []
        monkeypatch.undo()  # the heartbeat again: below, it tells when the restarted kernel answers

        # a kernel that dies is dead to nbval, even if the server starts another under the same id
        crashed = LabKernel(lab, FIRST.name)
        try:
            assert crashed.pid is not None and crashed.is_alive()
            os.kill(crashed.pid, signal.SIGKILL)
            # JupyterLab starts a new kernel process under the same id and ports: wait for it to answer
            deadline = time.monotonic() + 30
            while lab.kernel_pid(crashed.kernel_id) in (None, crashed.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            restarted = lab.kernel_pid(crashed.kernel_id)
            assert restarted not in (None, crashed.pid), "the server did not start the kernel again"
            _answers(crashed, timeout=30)  # the new process answers on the same connection
            assert not crashed.is_alive()  # yet the kernel nbval ran its cells in is gone
            with pytest.raises(RuntimeError, match="has ended"):  # and waiting for it says so
                crashed.wait_for_ready(10)
        finally:
            crashed.stop()


def _collected(*args: str) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_a_notebooks_browser_check_follows_its_last_cell_and_replaces_its_run_all_test() -> None:
    second = next(p for p in notebooks() if p.name in RUN_ALL)
    ids = _collected(f"notebooks/{FIRST.name}", f"notebooks/{second.name}", "tests/test_browser.py")
    cells = [i for i in ids if i.startswith(f"notebooks/{FIRST.name}::")]
    assert len(cells) == len(list(code_cells(read(FIRST)))) + 1
    assert cells[-1] == f"notebooks/{FIRST.name}::{CHECK}", cells[-3:]
    assert ids.index(cells[-1]) == ids.index(cells[-2]) + 1  # right after the last cell, on the same kernel
    assert f"notebooks/{second.name}::{CHECK}" not in ids  # a RUN_ALL notebook keeps Run All in a fresh kernel
    standalone = [i.split("[")[1][:-1] for i in ids if "::test_notebook_in_browser[" in i]
    assert FIRST.name not in standalone  # its check follows nbval instead
    assert second.name in standalone and len(standalone) == len(notebooks()) - 1


def test_another_cpus_run_has_no_browser_check() -> None:
    """``--other-cpu`` selects ``-m kernels``: the notebook's cells, not its check in the browser (nor
    the Run All test, which has no such mark), so nbval starts its own kernel there."""
    ids = _collected(f"notebooks/{FIRST.name}", "tests/test_browser.py", "-m", "kernels")
    assert [i for i in ids if i.startswith("notebooks/")] == [
        f"notebooks/{FIRST.name}::Cell {n}" for n in range(len(list(code_cells(read(FIRST)))))]
    assert not any("::test_notebook_in_browser[" in i for i in ids)
