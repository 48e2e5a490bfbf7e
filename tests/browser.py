"""Drive JupyterLab in a real browser (Debian's Chromium through playwright) for the browser test.

:class:`Lab` serves a temporary copy of the notebooks with JupyterLab on 127.0.0.1 (a free port,
a fresh token) and shuts it down again; :class:`NotebookPage` opens one notebook, runs all its
cells and reads and operates the live panels (``hooklab.Panel``: CSS classes ``hooklab-panel``,
``hooklab-controls``, ``hooklab-view``, ``hooklab-plot``, ``hooklab-reset``, ``hooklab-status``) the
way a person clicks them.

Every change of a control is timed in the page: from the input event (the click, the key, the
pick) to the new view, which the page knows exactly by the update count the view's HTML carries
(``data-update``), and to the busy state the status line shows meanwhile (``hooklab-busy``).

Nothing here saves a notebook: the committed notebooks are only ever copied.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from .nbtools import RAISES, has_marker

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "tests" / "screenshots"
BINDER_OVERRIDES = ROOT / "binder" / "overrides.json"

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
INSTALL_HINT = ("install Debian's Chromium with `apt-get update && apt-get install -y chromium` "
                "(or set HOOKLAB_CHROMIUM to a Chromium/Chrome executable)")

#: JupyterLab settings for the test on top of binder/overrides.json: every cell attached to the
#: page (no windowing, so every cell can be read and screenshotted), and no autosave.
TEST_SETTINGS = {
    "@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"},
    "@jupyterlab/docmanager-extension:plugin": {"autosave": False},
}

#: Text that JupyterLab or ipywidgets put in an output area when something could not be shown.
PAGE_ERROR_TEXTS = ("Error displaying widget", "Error rendering", "Javascript Error",
                    "Failed to load model class", "Could not create a view", "model not found")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def find_chromium() -> str | None:
    """The Chromium to drive: $HOOKLAB_CHROMIUM, else the first of chromium/chromium-browser/
    google-chrome on PATH (Debian's package installs /usr/bin/chromium)."""
    explicit = os.environ.get("HOOKLAB_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).exists() else None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def add_raises_tags(path: Path) -> None:
    """Give every cell marked ``# NBVAL_RAISES_EXCEPTION`` the cell tag ``raises-exception`` (in a
    copy): JupyterLab's Run All otherwise stops at the first error. (A separate test requires the
    committed notebooks to carry the tag, for learners.)"""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and has_marker(cell, RAISES):
            tags = cell.metadata.setdefault("tags", [])
            if "raises-exception" not in tags:
                tags.append("raises-exception")
    nbformat.write(nb, path)


def settings_files(target: Path, overrides: dict[str, dict[str, Any]]) -> None:
    """Write ``{"package:plugin": {...}}`` settings as JupyterLab user-settings files."""
    for plugin_id, values in overrides.items():
        package, plugin = plugin_id.rsplit(":", 1)
        path = target / package / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values, indent=2))


class Lab:
    """JupyterLab on 127.0.0.1 serving ``<workdir>/root`` (a copy of notebooks/ in
    ``root/notebooks``), with a fresh token; settings, workspaces and runtime files in workdir.

    Use as a context manager: the server and every kernel it started are shut down on exit,
    also when the test failed.
    """

    def __init__(self, notebooks: list[Path], workdir: Path, *, python: str = sys.executable,
                 user_settings: bool = True, env: dict[str, str] | None = None) -> None:
        self.python, self.user_settings, self.extra_env = python, user_settings, env or {}
        self.workdir = workdir
        self.root = workdir / "root"
        self.token = secrets.token_hex(24)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "jupyterlab.log"
        self.proc: subprocess.Popen[bytes] | None = None
        (self.root / "notebooks").mkdir(parents=True)
        for nb in notebooks:
            shutil.copy2(nb, self.root / "notebooks" / nb.name)
            add_raises_tags(self.root / "notebooks" / nb.name)

    # ------------------------------------------------------------------ server
    def __enter__(self) -> "Lab":
        settings = self.workdir / "settings"
        if self.user_settings:  # the classroom settings Binder gets, plus the test's own
            overrides = json.loads(BINDER_OVERRIDES.read_text()) if BINDER_OVERRIDES.exists() else {}
            for plugin_id, values in TEST_SETTINGS.items():
                overrides[plugin_id] = {**overrides.get(plugin_id, {}), **values}
            settings_files(settings, overrides)
        env = dict(os.environ,
                   JUPYTERLAB_SETTINGS_DIR=str(settings),
                   JUPYTERLAB_WORKSPACES_DIR=str(self.workdir / "workspaces"),
                   JUPYTER_RUNTIME_DIR=str(self.workdir / "runtime"),
                   JUPYTER_CONFIG_DIR=str(self.workdir / "config"),
                   PYTHONUTF8="1", **self.extra_env)
        env.pop("PYTHONPATH", None)
        cmd = [self.python, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
               "--port-retries=0", f"--IdentityProvider.token={self.token}",
               f"--ServerApp.root_dir={self.root}", "--ServerApp.terminals_enabled=False",
               "--LabApp.expose_app_in_browser=True"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")  # CI runs as root; the token still guards the server
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, cwd=self.root, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        try:
            self._wait_until_up(timeout=90)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _wait_until_up(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {self.proc.returncode}:\n{self.log()}")
            try:
                self.api("GET", "/api/status")
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.25)
        raise RuntimeError(f"JupyterLab did not answer within {timeout:.0f} s:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def api(self, method: str, path: str, timeout: float = 10, body: dict[str, Any] | None = None) -> Any:
        request = urllib.request.Request(self.url + path, method=method,
                                         headers={"Authorization": f"token {self.token}",
                                                  "Content-Type": "application/json"})
        if method in ("POST", "PUT", "PATCH"):
            request.data = json.dumps(body or {}).encode()
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = response.read()
        return json.loads(answer) if answer else None

    def start_session(self, name: str, timeout: float = 90) -> dict[str, Any]:
        """Start a kernel for ``notebooks/<name>`` as opening it in JupyterLab would (a session for
        its path, the python3 kernel, in the notebook's folder); the page that opens the notebook
        later connects to this kernel. Returns the session (its ``kernel`` has the kernel's id).
        Refuses when the path has a session already: the server would hand back its used kernel."""
        path = f"notebooks/{name}"
        left = [s["kernel"]["id"] for s in self.api("GET", "/api/sessions") if s["path"] == path]
        if left:
            raise RuntimeError(f"{path} already has a session with kernel {left[0]}: a check before this one "
                               "did not shut its kernel down")
        return self.api("POST", "/api/sessions", timeout=timeout, body={
            "path": path, "type": "notebook", "name": name, "kernel": {"name": "python3"}})

    def connection_file(self, kernel_id: str) -> Path:
        """The connection file of a kernel this server started (for a client of its own)."""
        return self.workdir / "runtime" / f"kernel-{kernel_id}.json"

    def kernel_pid(self, kernel_id: str) -> int | None:
        """The process of that kernel (found by its connection file), or None: no such process, or no
        /proc to look in."""
        marker = str(self.connection_file(kernel_id)).encode()
        found = [pid for pid, cmdline in _processes() if marker in cmdline]
        return found[0] if found else None

    def shutdown_kernels(self) -> None:
        """Shut down every kernel (each notebook's test ends with this: memory and CPU back)."""
        try:
            for session in self.api("GET", "/api/sessions"):
                self.api("DELETE", f"/api/sessions/{session['id']}", timeout=30)
            for kernel in self.api("GET", "/api/kernels"):
                self.api("DELETE", f"/api/kernels/{kernel['id']}", timeout=30)
        except (urllib.error.URLError, OSError):
            pass

    def _kernel_pids(self) -> list[int]:
        """Processes started with a connection file from this server's runtime dir (its kernels)."""
        marker = str(self.workdir / "runtime").encode()
        return [pid for pid, cmdline in _processes() if marker in cmdline]

    def __exit__(self, *exc: Any) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.poll() is None:
                self.shutdown_kernels()
                try:
                    self.api("POST", "/api/shutdown")
                except (urllib.error.URLError, OSError):
                    pass
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGTERM)
                    try:
                        proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait(timeout=10)
        finally:
            for pid in self._kernel_pids():  # kernels run in sessions of their own
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            self._log.close()


def _processes() -> list[tuple[int, bytes]]:
    """(pid, command line) of every process /proc shows (none where there is no /proc)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            found.append((int(proc.name), (proc / "cmdline").read_bytes()))
        except OSError:
            continue
    return found


def running(pid: int) -> bool:
    """Whether the process is there and not a zombie (ended, not yet reaped by its parent)."""
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


# ---------------------------------------------------------------------- the page
_JS_CURRENT = "window.jupyterapp && window.jupyterapp.shell.currentWidget"

_JS_KERNEL_READY = """() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!(k && k.status === 'idle' && w.content && w.content.widgets.length > 0);
}"""

# Count what the kernel has finished, as JupyterLab sees it: iopubMessage fires after JupyterLab
# (and ipywidgets) dealt with every earlier message, so an "idle" counted here means the page
# already shows what the request changed. (anyMessage fires on arrival, ahead of that: it counts
# the comm messages the page sends, so that a change still on its way to the kernel is seen.)
_JS_LISTEN = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const k = w.sessionContext.session.kernel;
  const s = window.__hooklab = {executed: 0, commSent: 0, commDone: 0, status: k.status};
  k.anyMessage.connect((_, a) => {
    if (a.direction === 'send' && a.msg.header.msg_type === 'comm_msg') s.commSent += 1;
  });
  k.iopubMessage.connect((_, m) => {
    if (m.header.msg_type !== 'status') return;
    s.status = m.content.execution_state;
    const parent = (m.parent_header || {}).msg_type;
    if (s.status === 'idle' && parent === 'execute_request') s.executed += 1;
    if (s.status === 'idle' && parent === 'comm_msg') s.commDone += 1;
  });
  return true;
}"""

_JS_CELLS = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  return w.content.widgets.map((c, i) => {
    const m = c.model;
    const out = m.type === 'code' ? m.outputs.toJSON() : [];
    return {index: i, type: m.type, source: m.sharedModel.getSource(),
            tags: (m.getMetadata && m.getMetadata('tags')) || [],
            count: m.type === 'code' ? m.executionCount : null,
            outputs: out.map(o => ({type: o.output_type, ename: o.ename || '', evalue: o.evalue || '',
                                    mimes: Object.keys(o.data || {})}))};
  });
}"""

_JS_PANELS = """async (withPlot) => {
  async function digest(img) {
    if (!img || !img.src) return '';
    try {
      const buf = await (await fetch(img.src)).arrayBuffer();
      const h = await crypto.subtle.digest('SHA-256', buf);
      return Array.from(new Uint8Array(h)).slice(0, 12).map(b => b.toString(16).padStart(2, '0')).join('');
    } catch (e) { return 'unreadable:' + e; }
  }
  const panels = [];
  for (const p of document.querySelectorAll('.hooklab-panel')) {
    const title = (p.querySelector(':scope > .widget-html') || {}).innerText || '';
    const controls = [];
    const box = p.querySelector('.hooklab-controls');
    for (const c of box ? box.children : []) {
      const cl = c.classList;
      const label = ((c.querySelector('.widget-label-basic span') || c.querySelector('.widget-label')) || {}).innerText || '';
      if (cl.contains('widget-checkbox')) {
        const input = c.querySelector('input');
        controls.push({kind: 'checkbox', label: label.trim(), value: input.checked, disabled: input.disabled});
      } else if (cl.contains('widget-slider')) {
        const h = c.querySelector('.noUi-handle');
        const readout = c.querySelector('.widget-readout');
        controls.push({kind: 'slider', label: label.trim(), value: readout ? readout.innerText.trim() : '',
                       min: parseFloat(h.getAttribute('aria-valuemin')), max: parseFloat(h.getAttribute('aria-valuemax')),
                       now: parseFloat(h.getAttribute('aria-valuenow')),
                       disabled: c.querySelector('.slider').hasAttribute('disabled') || !!c.querySelector('[disabled]')});
      } else if (cl.contains('widget-text')) {
        const input = c.querySelector('input');
        controls.push({kind: 'text', label: label.trim(), value: input.value, disabled: input.disabled});
      } else if (cl.contains('widget-dropdown')) {
        const sel = c.querySelector('select');
        // ipywidgets shows spaces in option labels as no-break spaces: give them back as spaces
        const text = o => o.text.replace(/\u00a0/g, ' ');
        controls.push({kind: 'dropdown', label: label.trim(), value: sel.options[sel.selectedIndex] ? text(sel.options[sel.selectedIndex]) : '',
                       options: Array.from(sel.options).map(text), disabled: sel.disabled});
      } else {
        controls.push({kind: 'unknown', label: label.trim(), classes: c.className, disabled: false});
      }
    }
    const view = p.querySelector('.hooklab-view');
    const rows = {};
    if (view) for (const tr of view.querySelectorAll('tr')) {
      const td = tr.querySelectorAll('td');
      if (td.length >= 2) rows[td[0].innerText.trim()] = td[1].innerText.trim();
    }
    panels.push({title: title.trim(), controls, rows,
                 text: view ? view.innerText.trim() : '',
                 error: view && view.querySelector("pre[style*='#b00']") ? view.innerText.trim() : '',
                 plot: withPlot ? await digest(p.querySelector('.hooklab-plot img, img.hooklab-plot')) : ''});
  }
  return panels;
}"""


# Per panel, in the page: the input events on its controls and, from a MutationObserver, the moments
# its status line shows the busy state and its view shows a new update count. Mutation records
# list every node added, so a busy state shown and cleared before the observer runs is still seen.
_JS_WATCH = """(index) => {
  const panel = document.querySelectorAll('.hooklab-panel')[index];
  if (!panel) return false;
  if (panel.__hooklab) return true;
  const w = panel.__hooklab = {inputs: [], events: []};
  const note = e => { if (e.type !== 'keydown' || e.key !== 'Tab') w.inputs.push(performance.now()); };
  for (const type of ['click', 'change', 'keydown']) panel.addEventListener(type, note, true);
  const has = (node, cls) => node.nodeType === 1 && (node.classList.contains(cls) || !!node.querySelector('.' + cls));
  new MutationObserver(records => {
    const t = performance.now();
    for (const r of records) for (const node of r.addedNodes) {
      if (has(node, 'hooklab-busy')) w.events.push({t, kind: 'busy'});
      if (has(node, 'hooklab-view-body')) {
        const body = node.classList.contains('hooklab-view-body') ? node : node.querySelector('.hooklab-view-body');
        w.events.push({t, kind: 'update', n: parseInt(body.dataset.update)});
      }
    }
  }).observe(panel, {childList: true, subtree: true});
  return true;
}"""

# The panel has settled: no comm message of the page is still unanswered, the kernel is idle, and the
# view's HTML, the plot's source and those counts are what they were at the previous poll.
_JS_SETTLED = """(index) => {
  const p = document.querySelectorAll('.hooklab-panel')[index];
  const view = p.querySelector('.hooklab-view'), img = p.querySelector('.hooklab-plot img, img.hooklab-plot');
  const s = window.__hooklab;
  const now = [view ? view.innerHTML : '', img ? img.src : '', s.commSent, s.commDone, s.status].join('\\u0000');
  const same = p.__hooklabLast === now;
  p.__hooklabLast = now;
  return same && s.status === 'idle' && s.commDone >= s.commSent;
}"""

_JS_UPDATE = """(index) => {
  const body = document.querySelectorAll('.hooklab-panel')[index].querySelector('.hooklab-view-body');
  return body ? parseInt(body.dataset.update) : -1;
}"""

# Before a change: watch the panel (_JS_WATCH), forget its earlier events; the view's update count
# (_JS_UPDATE) and the number of comm messages answered so far; _JS_SETTLED starts afresh. One round trip.
_JS_BEFORE_ACTION = f"""(index) => {{
  ({_JS_WATCH})(index);
  const p = document.querySelectorAll('.hooklab-panel')[index], w = p.__hooklab;
  w.inputs = []; w.events = []; p.__hooklabLast = null;
  return [({_JS_UPDATE})(index), window.__hooklab.commDone];
}}"""

_JS_BUSY = """(index) => !!document.querySelectorAll('.hooklab-panel')[index]
  .querySelector('.hooklab-status .hooklab-busy')"""

#: The accessibility roles a panel's parts must have (queried from Chromium's accessibility tree).
PANEL_ROLES = ("heading", "checkbox", "slider", "combobox", "textbox", "button")


@dataclass(frozen=True)
class ConsoleError:
    """An error the page logged in the browser's console."""
    text: str
    url: str  # where it came from: the script, or the resource that failed to load

    def __str__(self) -> str:
        return f"{self.text} ({self.url or 'no address'})"


@dataclass
class Timing:
    """One change of one control, timed in the page (ms after the input event)."""
    what: str
    kind: str  # checkbox, slider, dropdown, text, reset
    view_ms: float | None  # to the new view (its update count arrived)
    busy_ms: float | None  # to the busy state shown (None: never seen)


@dataclass
class View:
    """What a panel shows: its table rows (label -> displayed text), all its text, the plot's hash."""
    rows: dict[str, str]
    text: str
    plot: str
    error: str

    def __str__(self) -> str:
        return "; ".join(f"{k}: {v}" for k, v in self.rows.items()) if self.rows else repr(self.text[:300])


@dataclass
class NotebookPage:
    """One notebook open in JupyterLab in a browser page."""
    page: Any
    lab: Lab
    name: str
    timeout_s: float = 300.0  # Run All of the slowest notebook on a busy machine
    panel_index: int = 0
    log: list[str] = field(default_factory=list)
    timings: list[Timing] = field(default_factory=list)
    _seen: tuple[bool, list[dict[str, Any]]] | None = field(default=None, repr=False)  # panels(), read once

    # ------------------------------------------------------------------ opening and running
    def load_lab(self) -> None:
        """Load JupyterLab in the page (a fresh workspace: only the Launcher open)."""
        self.forget()
        self.page.goto(f"{self.lab.url}/lab?reset&token={self.lab.token}")
        self.page.wait_for_function("() => !!window.jupyterapp", timeout=self.timeout_s * 1000)
        self.page.evaluate("async () => { await window.jupyterapp.restored; return true; }")

    def open(self, reload: bool = True) -> None:
        """Open the notebook as File > Open would, in JupyterLab loaded in this page (loaded anew
        when ``reload`` or when a dialog is in the way); wait until its kernel is idle."""
        self.forget()
        if reload or self.page.evaluate("() => !window.jupyterapp || !!document.querySelector('.jp-Dialog')"):
            self.load_lab()
        path = f"notebooks/{self.name}"
        self.page.evaluate("async (path) => { await window.jupyterapp.commands.execute('docmanager:open', {path}); }",
                           path)
        self.page.wait_for_function(
            f"() => {_JS_CURRENT} && window.jupyterapp.shell.currentWidget.context && "
            f"window.jupyterapp.shell.currentWidget.context.path === {json.dumps(path)}", timeout=30_000)
        self.page.wait_for_function(_JS_KERNEL_READY, timeout=self.timeout_s * 1000)
        self.page.evaluate(_JS_LISTEN)
        # every cell rendered (markdown included) before anyone looks at the page
        self.page.wait_for_function(
            f"() => {_JS_CURRENT}.content.widgets.every(c => c.isAttached && (c.model.type !== 'markdown' || c.rendered))",
            timeout=30_000)

    def close(self) -> None:
        """Close the notebook's tab without saving (the copy is thrown away anyway)."""
        self.page.evaluate("""async () => {
          const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
          if (!w || !w.context) return;
          w.context.model.dirty = false;
          await w.close();
        }""")

    def cells(self) -> list[dict[str, Any]]:
        return self.page.evaluate(_JS_CELLS)

    def unexpected_errors(self) -> list[str]:
        """Error outputs in cells not marked NBVAL_RAISES_EXCEPTION, and error text on the page."""
        problems = []
        for cell in self.cells():
            if cell["type"] != "code":
                continue
            node = nbformat.v4.new_code_cell(cell["source"], metadata={"tags": cell["tags"]})
            for o in cell["outputs"]:
                if o["type"] == "error" and not has_marker(node, RAISES):
                    problems.append(f"cell {cell['index']} shows {o['ename']}: {o['evalue'][:200]}")
        text = "\n".join(self.page.locator(".jp-Notebook .jp-OutputArea").all_inner_texts())
        for needle in PAGE_ERROR_TEXTS:
            if needle in text:
                at = text.index(needle)
                problems.append(f"the page says {text[max(0, at - 80):at + 160]!r}")
        return problems

    def run_all(self) -> float:
        """Run > Run All Cells from the menu; wait until every code cell has run and the kernel is
        idle. Returns the seconds it took."""
        start = time.perf_counter()
        code = [c for c in self.cells() if c["type"] == "code" and c["source"].strip()]
        self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).first.click()
        self.page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).first.click()
        self.page.wait_for_function(
            f"() => window.__hooklab.executed >= {len(code)} && window.__hooklab.status === 'idle'",
            timeout=self.timeout_s * 1000)
        try:  # each cell's prompt number is set a moment after its last message
            self.page.wait_for_function(
                f"() => {_JS_CURRENT}.content.widgets.every(c => c.model.type !== 'code' || "
                "!c.model.sharedModel.getSource().trim() || c.model.executionCount !== null)", timeout=10_000)
        except Exception:
            pass  # cells left unrun: reported below
        seconds = time.perf_counter() - start
        cells = self.cells()
        not_run = [c["index"] for c in cells if c["type"] == "code" and c["source"].strip() and c["count"] is None]
        if not_run:
            errors = [f"cell {c['index']}: {o['ename']}: {o['evalue'][:200]}" for c in cells
                      for o in c["outputs"] if o["type"] == "error"]
            raise AssertionError(f"{self.name}: Run All left cells {not_run} unrun: the kernel stopped at an error "
                                 "in an earlier cell:\n  " + "\n  ".join(errors or ["(no error output found)"]))
        self.page.wait_for_timeout(300)  # let the last widget views render
        self.forget()
        return seconds

    def kernel_id(self) -> str:
        """The id of the kernel the open notebook is connected to."""
        return self.page.evaluate(f"() => {_JS_CURRENT}.sessionContext.session.kernel.id")

    def run_cells(self, indexes: list[int]) -> float:
        """Run these cells (indexes among all the notebook's cells) one after another, as a learner
        selecting each and pressing Shift+Enter would (Run > Run Selected Cell, without moving on);
        wait until each has run and the kernel is idle. Returns the seconds it took."""
        start = time.perf_counter()
        cells = self.cells()
        wrong = [i for i in indexes if i >= len(cells) or cells[i]["type"] != "code"]
        assert not wrong, f"{self.name}: cells {wrong} are not code cells of the notebook open in the page"
        for index in indexes:
            self.page.evaluate("""async (i) => {
              const w = window.jupyterapp.shell.currentWidget;
              w.content.activeCellIndex = i;
              await window.jupyterapp.commands.execute('notebook:run-cell');
            }""", index)
        self.page.wait_for_function(
            f"() => window.__hooklab.executed >= {len(indexes)} && window.__hooklab.status === 'idle'",
            timeout=self.timeout_s * 1000)
        seconds = time.perf_counter() - start
        self.page.wait_for_timeout(300)  # let the last widget views render
        self.forget()
        return seconds

    # ------------------------------------------------------------------ panels
    def panels(self, with_plot: bool = False) -> list[dict[str, Any]]:
        """Every panel on the page: title, controls, view rows and text (and a hash of the plot).
        Read from the page once after each change (:meth:`_acted` forgets it before acting)."""
        if self._seen is None or (with_plot and not self._seen[0]):
            self._seen = (with_plot, self.page.evaluate(_JS_PANELS, with_plot))
        return self._seen[1]

    def forget(self) -> None:
        """Read the panels from the page again next time (after anything that may change them)."""
        self._seen = None

    def live_panels(self) -> list[int]:
        """Indexes of panels whose controls are enabled (a re-built panel disables the older one)."""
        return [i for i, p in enumerate(self.panels())
                if p["controls"] and not all(c["disabled"] for c in p["controls"])]

    def panel(self, with_plot: bool = False) -> dict[str, Any]:
        return self.panels(with_plot)[self.panel_index]

    def view(self) -> View:
        p = self.panel(with_plot=True)
        return View(p["rows"], p["text"], p["plot"], p["error"])

    def settled_view(self, most_s: float = 3.0) -> View:
        """The view once the panel has settled (:data:`_JS_SETTLED`, polled in the page): ipywidgets
        applies a kernel's update asynchronously (a plot's bytes are decoded first), and a control may
        send a second message after the first is answered. After ``most_s`` the view as it is."""
        try:
            self.page.wait_for_function(_JS_SETTLED, arg=self.panel_index, polling=25, timeout=most_s * 1000)
        except Exception:
            pass  # still changing: the caller compares what it shows
        self.forget()
        return self.view()

    def control(self, label: str) -> dict[str, Any]:
        for c in self.panel()["controls"]:
            if c["label"] == label:
                return c
        raise AssertionError(f"{self.name}: the panel has no control {label!r}; it has "
                             f"{[c['label'] for c in self.panel()['controls']]}")

    def _control_locator(self, label: str) -> Any:
        controls = self.page.locator(".hooklab-panel").nth(self.panel_index).locator(".hooklab-controls > *")
        labels = [c["label"] for c in self.panel()["controls"]]
        return controls.nth(labels.index(label))

    def busy_shown(self) -> bool:
        return self.page.evaluate(_JS_BUSY, self.panel_index)

    def _acted(self, action: Any, what: str, kind: str = "", settle: bool = True) -> View:
        """Do ``action`` (one change of one control), wait until the kernel has dealt with it and
        the view shows the next update count; time it (:attr:`timings`)."""
        count, before = self.page.evaluate(_JS_BEFORE_ACTION, self.panel_index)
        self.forget()
        action()
        try:
            self.page.wait_for_function(f"(i) => window.__hooklab.commDone > {before} && window.__hooklab.status === "
                                        f"'idle' && ({_JS_UPDATE})(i) > {count}", arg=self.panel_index, timeout=30_000)
        except Exception as exc:
            raise AssertionError(f"{self.name}: the kernel did not answer after {what} (or the view's update "
                                 f"count stayed {count})") from exc
        self.timings.append(self._timing(what, kind, count))
        view = self.settled_view() if settle else self.view()
        self.log.append(f"{what} -> {view}")
        if view.error:
            raise AssertionError(f"{self.name}: after {what} the panel shows an error: {view.error}")
        return view

    def _timing(self, what: str, kind: str, count: int) -> Timing:
        w = self.page.evaluate("(i) => document.querySelectorAll('.hooklab-panel')[i].__hooklab", self.panel_index)
        update = next((e["t"] for e in w["events"] if e["kind"] == "update" and e["n"] > count), None)
        inputs = [t for t in w["inputs"] if update is None or t <= update]
        start = inputs[-1] if inputs else None
        busy = next((e["t"] for e in w["events"] if e["kind"] == "busy" and (start is None or e["t"] >= start)), None)
        return Timing(what, kind, None if start is None or update is None else update - start,
                      None if start is None or busy is None else busy - start)

    def reset(self) -> View:
        """Click the panel's reset button."""
        button = self.page.locator(".hooklab-panel").nth(self.panel_index).locator(".hooklab-reset")
        return self._acted(lambda: button.click(), "reset", "reset")

    def accessibility(self) -> dict[str, Any]:
        """What Chromium's accessibility tree says about the panel: ``roles`` (role -> names of
        the panel's nodes with that role, in page order), ``live`` (the view body's aria-live) and
        ``snapshot`` (playwright's ARIA snapshot of the panel, for the report)."""
        cdp = self.page.context.new_cdp_session(self.page)
        try:
            def element(js: str) -> str:
                return cdp.send("Runtime.evaluate", {"expression": js})["result"]["objectId"]
            panel_js = f"document.querySelectorAll('.hooklab-panel')[{self.panel_index}]"
            panel = element(panel_js)
            roles = {}
            for role in PANEL_ROLES:
                nodes = cdp.send("Accessibility.queryAXTree", {"objectId": panel, "role": role})["nodes"]
                roles[role] = [n.get("name", {}).get("value", "") for n in nodes if not n.get("ignored")]
            view = cdp.send("Accessibility.getPartialAXTree",
                            {"objectId": element(panel_js + ".querySelector('.hooklab-view-body')"),
                             "fetchRelatives": False})["nodes"]
            props = {p["name"]: p["value"].get("value") for n in view[:1] for p in n.get("properties", [])}
        finally:
            cdp.detach()
        snapshot = self.page.locator(".hooklab-panel").nth(self.panel_index).aria_snapshot()
        return {"roles": roles, "live": props.get("live"), "snapshot": snapshot}

    def click(self, label: str) -> View:
        """Click a checkbox (ticks or unticks it)."""
        control = self.control(label)
        target = "untick" if control["value"] else "tick"
        box = self._control_locator(label).locator("input[type=checkbox]")
        view = self._acted(lambda: box.click(), f"{target} {label!r}", "checkbox")
        now = self.control(label)["value"]
        assert now == (target == "tick"), f"{self.name}: the checkbox {label!r} did not {target}"
        return view

    def set_checkbox(self, label: str, value: bool) -> View:
        return self.click(label) if self.control(label)["value"] != value else self.view()

    def move_slider(self, label: str, key: str) -> View:
        """Move a slider with the keyboard, as a person can: ``key`` is Home, End, ArrowLeft..."""
        handle = self._control_locator(label).locator(".noUi-handle")
        before = self.control(label)["value"]

        def act() -> None:
            handle.focus()
            self.page.keyboard.press(key)
        view = self._acted(act, f"move {label!r} with {key} (from {before})", "slider")
        assert self.control(label)["value"] != before, f"{self.name}: slider {label!r} did not move with {key}"
        return view

    def set_slider(self, label: str, value: float) -> View:
        """Type a value into a slider's readout, press Enter."""
        control = self.control(label)
        if abs(float(control["now"]) - float(value)) < 1e-12:
            return self.view()
        readout = self._control_locator(label).locator(".widget-readout")

        def act() -> None:
            readout.click()
            self.page.keyboard.press("Control+A")
            self.page.keyboard.type(repr(float(value)))
            self.page.keyboard.press("Enter")
        view = self._acted(act, f"set {label!r} to {value}", "slider")
        now = float(self.control(label)["now"])
        assert abs(now - float(value)) < 1e-9, f"{self.name}: slider {label!r} shows {now}, not {value}"
        return view

    def pick(self, label: str, option: str) -> View:
        """Pick an option of a dropdown."""
        control = self.control(label)
        if control["value"] == option:
            return self.view()
        assert option in control["options"], f"{self.name}: dropdown {label!r} has no option {option!r}: {control['options']}"
        index = control["options"].index(option)
        select = self._control_locator(label).locator("select")
        view = self._acted(lambda: select.select_option(index=index), f"pick {option!r} in {label!r}", "dropdown")
        assert self.control(label)["value"] == option, f"{self.name}: dropdown {label!r} did not show {option!r}"
        return view

    def type_text(self, label: str, text: str) -> View:
        """Type ``text`` into a text box (replacing what it held) and press Enter."""
        if self.control(label)["value"] == text:
            return self.view()
        box = self._control_locator(label).locator("input")

        def act() -> None:
            box.click()
            self.page.keyboard.press("Control+A")
            self.page.keyboard.press("Backspace")
            if text:
                self.page.keyboard.type(text)
            self.page.keyboard.press("Enter")
        view = self._acted(act, f"type {text!r} into {label!r}", "text")
        assert self.control(label)["value"] == text, f"{self.name}: the text box {label!r} does not show {text!r}"
        return view

    def set(self, label: str, value: Any) -> View:
        kind = self.control(label)["kind"]
        if kind == "checkbox":
            return self.set_checkbox(label, bool(value))
        if kind == "slider":
            return self.set_slider(label, float(value))
        if kind == "dropdown":
            return self.pick(label, str(value))
        if kind == "text":
            return self.type_text(label, str(value))
        raise AssertionError(f"{self.name}: cannot set control {label!r} of kind {kind}")

    # ------------------------------------------------------------------ pictures
    def screenshot(self, suffix: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{Path(self.name).stem}-{suffix}.png"
        panels = self.page.locator(".hooklab-panel")
        if panels.count() > self.panel_index:
            panels.nth(self.panel_index).scroll_into_view_if_needed()
        self.page.screenshot(path=str(path))
        return path
