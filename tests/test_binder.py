"""Binder: binder/ holds what repo2docker needs, and Binder's environment resolves and serves the notebooks.

Fast:

* binder/requirements.txt pins the learner's packages exactly as requirements.txt does, with
  PyTorch's CPU wheel index (Binder has no GPU); the only other pins are base packages pinned so
  that they fit a pinned one (notebook for jupyterlab);
* tests/binder_base/base-py3.11.txt is what tests/binder_env.py derives from the lock file of the
  repo2docker release requirements.txt pins, and tests/binder_base/Dockerfile is what that
  repo2docker generates for this repository now (``--no-build``: no Docker needed);
* binder/overrides.json holds real JupyterLab settings (checked against JupyterLab's schemas);
* each notebook's first cell links to itself on Binder (tests/test_launch.py checks every link
  against pyproject's [project.urls]).

Slow (tests/binder_env.py builds the environment once and caches it outside the repository): the base
rebuilt in a fresh venv with pip, binder/requirements.txt installed on top (torch from the default
index instead of the unreachable CPU index), then, for every run of the tests, binder/postBuild run
from a copy of the repository; ``pip check`` must report nothing; JupyterLab and Notebook 7 started
from that environment (127.0.0.1, a token) serve the notebooks; notebook 00 run there gives its
stored outputs; in a browser, the classroom settings of overrides.json are in effect.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import nbformat
import pytest

from . import binder_env
from .browser import Lab
from .browser_session import required, shared_chromium
from .nbtools import code_cells, normalise, read, sanitize_patterns

ROOT = Path(__file__).resolve().parents[1]
BINDER = ROOT / "binder"
#: What a learner's notebook needs at run time; the testing tools stay out of Binder.
RUNTIME = ["torch", "torchvision", "jupyterlab", "ipywidgets", "ipykernel", "matplotlib", "numpy", "pillow"]
#: Base packages that binder/requirements.txt may pin, and the pinned package each one must fit.
FITS = {"notebook": "jupyterlab"}
CPU_INDEX = binder_env.CPU_INDEX


def pins(path: Path) -> dict[str, str]:
    """``name==version`` lines of a requirements file (names normalised)."""
    return binder_env.read_pins(path)


def options(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip().startswith("-")]


# ---------------------------------------------------------------------- pins and settings
def test_binder_pins_match_requirements() -> None:
    root, binder = pins(ROOT / "requirements.txt"), pins(BINDER / "requirements.txt")
    missing_at_root = [name for name in RUNTIME if name not in root]
    assert not missing_at_root, f"requirements.txt does not pin {missing_at_root}"
    wrong = {name: (binder.get(name), root[name]) for name in RUNTIME if binder.get(name) != root[name]}
    assert not wrong, ("binder/requirements.txt must pin what requirements.txt pins; "
                       f"differences (binder, requirements.txt): {wrong}")
    extra = sorted(set(binder) - set(RUNTIME) - set(FITS))
    assert not extra, f"binder/requirements.txt pins packages a learner does not need: {extra}"


def test_binder_pins_a_base_package_only_with_what_depends_on_it() -> None:
    """Pinning a package the base has replaces the base's copy; whatever in the base depends on it
    must then be pinned to a version that accepts it (the slow test's `pip check` proves they fit)."""
    base, binder = pins(binder_env.PINS), pins(BINDER / "requirements.txt")
    for name, fits in FITS.items():
        assert name in base, f"{name} is not in Binder's base environment; drop it from FITS"
        if fits in binder and binder[fits] != base.get(fits):
            assert name in binder, (f"binder/requirements.txt pins {fits}=={binder[fits]} (the base has {base.get(fits)}) "
                                    f"but not {name}, which depends on it: pin a {name} that accepts it")
    for name in set(binder) & set(base) - set(FITS):
        assert name in RUNTIME, f"binder/requirements.txt replaces the base's {name} without a reason (FITS)"


def test_binder_uses_pytorch_cpu_wheels() -> None:
    opts = options(BINDER / "requirements.txt")
    assert f"--extra-index-url {CPU_INDEX}" in opts, (
        f"binder/requirements.txt needs `--extra-index-url {CPU_INDEX}` (torch and torchvision as CPU wheels)")
    assert not any(o.startswith(("-e", "--editable", "-r", "-c")) for o in opts), (
        "binder/requirements.txt must not refer to files (repo2docker then installs it before copying the "
        "repository) and must not install hooklab itself: postBuild does")


def test_binder_python_version() -> None:
    runtime = (BINDER / "runtime.txt").read_text().strip()
    assert runtime == "python-3.11", f"binder/runtime.txt says {runtime!r}; the project is built and tested on 3.11"
    assert "3.11" in binder_env.LOCK, "tests/binder_env.py must read the lock file of the Python that runtime.txt names"


def test_postbuild_is_a_strict_bash_script() -> None:
    post = BINDER / "postBuild"
    text = post.read_text()
    assert text.startswith("#!/usr/bin/env bash") or text.startswith("#!/bin/bash"), "postBuild needs a bash shebang"
    assert re.search(r"^set -e", text, re.M), "postBuild must stop at the first failing command (`set -e`)"
    assert os.access(post, os.X_OK), "binder/postBuild must be executable (chmod +x)"
    subprocess.run(["bash", "-n", str(post)], check=True)


def test_overrides_are_real_jupyterlab_settings() -> None:
    """Every plugin and setting in binder/overrides.json exists in this JupyterLab and its value is
    valid (a misspelt key would be ignored silently on Binder)."""
    import jsonschema  # JupyterLab's settings server needs it, so it is always there: never a skip
    from jupyterlab.commands import get_app_dir

    schemas = Path(get_app_dir()) / "schemas"
    overrides = json.loads((BINDER / "overrides.json").read_text())
    assert "@jupyterlab/apputils-extension:notification" in overrides, "the news prompt must be switched off"
    notification = overrides["@jupyterlab/apputils-extension:notification"]
    assert notification.get("fetchNews") == "false" and notification.get("checkForUpdates") is False
    for plugin_id, values in overrides.items():
        package, plugin = plugin_id.rsplit(":", 1)
        path = schemas / package / f"{plugin}.json"
        assert path.exists(), f"overrides.json: JupyterLab has no settings plugin {plugin_id!r}"
        schema = json.loads(path.read_text())
        unknown = sorted(set(values) - set(schema.get("properties", {})))
        assert not unknown, f"overrides.json: {plugin_id} has no settings {unknown}"
        jsonschema.validate(values, schema)
    # the editor font: CodeMirror's customStyles (added to the schema at run time, so checked here;
    # the slow browser check below measures it). Theme font sizes in overrides.json are not applied
    # by JupyterLab (it reads them from user settings only), so none may sit there looking useful.
    styles = overrides["@jupyterlab/codemirror-extension:plugin"]["defaultConfig"]["customStyles"]
    assert set(styles) <= {"fontFamily", "fontSize", "lineHeight"}, styles
    assert isinstance(styles["fontSize"], int) and 14 <= styles["fontSize"] <= 24, styles
    # widget messages on the kernel's main shell, after the running cell: a panel's hooks never
    # change in the middle of a cell (TEACHING.md, "Widgets and a running cell")
    assert overrides["@jupyterlab/apputils-extension:kernels-settings"] == {"commsOverSubshells": "disabled"}
    assert "@jupyterlab/apputils-extension:themes" not in overrides, (
        "theme overrides (font sizes) in overrides.json are ignored by JupyterLab; TEACHING.md says how to set them")


# ---------------------------------------------------------------------- the named repo2docker release
def test_base_pins_come_from_the_named_repo2docker_lock() -> None:
    version = binder_env.repo2docker_version()
    assert pins(ROOT / "requirements.txt")["jupyter-repo2docker"] == version
    header = binder_env.PINS.read_text().splitlines()[0]
    assert f"repo2docker {version}'s" in header, f"{binder_env.PINS.name} was written for another release: {header}"
    derived = {re.sub(r"[-_.]+", "-", k).lower(): v for k, v in binder_env.base_pins(binder_env.lock_text()).items()}
    assert pins(binder_env.PINS) == derived, (
        "tests/binder_base/base-py3.11.txt differs from the lock of the installed repo2docker: "
        "run `python -m tests.binder_env --write`")
    for name, version in {"jupyterlab": "4.4.9", "notebook": "7.4.7", "ipywidgets": "8.1.7", "ipykernel": "7.0.1"}.items():
        assert derived[name] == version, f"the base's {name} is {derived.get(name)}; CONTRIBUTING.md and TEACHING quote {version}"


def test_repo2docker_generates_the_committed_build_steps(tmp_path: Path) -> None:
    """``repo2docker --no-build`` for a copy of this repository: the Dockerfile Binder would build."""
    repo = binder_env.repository_copy(tmp_path / "hooklab")
    generated = binder_env.generated_dockerfile(repo)
    committed = binder_env.DOCKERFILE.read_text()
    assert committed.endswith(generated), (
        "repo2docker now generates other build steps than tests/binder_base/Dockerfile (binder/ changed?): "
        "look at the difference, then run `python -m tests.binder_env --write`")
    # what this project relies on, step by step
    assert "COPY --chown=1000:1000 build_script_files/environment.py-3.11-linux-64.lock /tmp/env/environment.lock" in generated
    assert "ENV KERNEL_PYTHON_PREFIX=${NB_PYTHON_PREFIX}" in generated  # one environment for server and kernel
    steps = [generated.index(s) for s in ('RUN ${KERNEL_PYTHON_PREFIX}/bin/pip install --no-cache-dir -r "binder/requirements.txt"',
                                          "COPY --chown=1000:1000 src/ ${REPO_DIR}/", "RUN ./binder/postBuild")]
    assert steps == sorted(steps), "expected: requirements.txt installed, then the repository copied, then postBuild"


# ---------------------------------------------------------------------- Binder's environment, for real
def _env(binder: SimpleNamespace, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "JUPYTER"))}
    env.update(PATH=f"{binder.env / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", HOME=str(binder.home),
               VIRTUAL_ENV=str(binder.env), PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    return env


def _py(binder: SimpleNamespace, code: str, **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run([str(binder.python), "-c", code], capture_output=True, text=True, env=_env(binder),
                          cwd=binder.home, timeout=300, **kw)


@pytest.fixture(scope="module")
def binder(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Binder's environment (built once, cached), then postBuild from a fresh copy of the repository."""
    env = binder_env.environment()
    tmp = tmp_path_factory.mktemp("binder")
    ns = SimpleNamespace(env=env, python=env / "bin" / "python", home=tmp / "home", tmp=tmp)
    ns.home.mkdir()
    # what postBuild adds must come from this run: no hooklab, no settings left from an earlier one
    subprocess.run([str(ns.python), "-m", "pip", "uninstall", "-q", "-y", "hooklab"], capture_output=True,
                   env=_env(ns))
    app_dir = env / "share" / "jupyter" / "lab"
    (app_dir / "settings" / "overrides.json").unlink(missing_ok=True)
    ns.before = _py(ns, "import hooklab")
    ns.repo = binder_env.repository_copy(tmp / "repo")
    # as repo2docker runs it: from the repository's root, as the notebook user (here: this user)
    subprocess.run(["chmod", "+x", "binder/postBuild"], cwd=ns.repo, check=True)
    ns.postbuild = subprocess.run(["./binder/postBuild"], cwd=ns.repo, env=_env(ns), capture_output=True, text=True,
                                  timeout=900)
    ns.app_dir = app_dir
    return ns


@pytest.mark.slow
@pytest.mark.environments
def test_binder_base_plus_requirements_pass_pip_check(binder: SimpleNamespace) -> None:
    stamp = json.loads((binder.env / binder_env.cached_env.STAMP).read_text())
    check = subprocess.run([str(binder.python), "-m", "pip", "check"], capture_output=True, text=True, env=_env(binder))
    assert check.returncode == 0 and check.stdout.strip() == "No broken requirements found.", (
        f"pip check in Binder's environment (base + binder/requirements.txt + postBuild):\n{check.stdout}{check.stderr}")
    # and the pinned versions are the ones installed (pip may have upgraded unpinned base packages
    # that a pinned one needs newer, e.g. jupyter-server for jupyterlab: pip check covers them)
    want = pins(BINDER / "requirements.txt")
    code = f"import json, importlib.metadata as m; print(json.dumps({{n: m.version(n) for n in {sorted(want)!r}}}))"
    got = json.loads(_py(binder, code).stdout)
    assert got == want, (got, stamp)
    extensions = subprocess.run([str(binder.env / "bin" / "jupyter"), "labextension", "list"], capture_output=True,
                                text=True, env=_env(binder), cwd=binder.home)
    listing = re.sub(r"\x1b\[[0-9;]*m", "", extensions.stdout + extensions.stderr)  # no colours
    assert "enabled OK" in listing and " X" not in listing and "incompatible" not in listing, listing


@pytest.mark.slow
@pytest.mark.environments
def test_postbuild_installs_hooklab_and_the_classroom_settings(binder: SimpleNamespace) -> None:
    assert binder.before.returncode != 0, "hooklab was importable before postBuild ran: the check proves nothing"
    result = binder.postbuild
    assert result.returncode == 0, f"postBuild failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr and "ERROR" not in result.stderr, result.stderr
    check = _py(binder, "import hooklab, torch; print(hooklab.__file__); "
                        "p = hooklab.Panel('binder check', lambda p: {'ok': 1}); print(p.state())")
    assert check.returncode == 0, check.stderr
    location = Path(check.stdout.splitlines()[0]).resolve()
    assert location.is_relative_to(binder.env.resolve()), f"hooklab imports from {location}, not Binder's environment"
    assert "'ok': 1" in check.stdout
    installed = binder.app_dir / "settings" / "overrides.json"
    assert installed.exists(), f"postBuild did not put overrides.json in {installed.parent}:\n{result.stdout}"
    assert json.loads(installed.read_text()) == json.loads((BINDER / "overrides.json").read_text())


@pytest.fixture(scope="module")
def binder_lab(binder: SimpleNamespace) -> Iterator[Lab]:
    if binder.postbuild.returncode != 0:
        pytest.fail(f"postBuild failed:\n{binder.postbuild.stderr}")
    server_env = {k: v for k, v in _env(binder).items() if not k.startswith("PIP_")}
    with Lab(sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")), binder.tmp / "lab", python=str(binder.python),
             user_settings=False, env=server_env) as lab:
        yield lab


def _get(lab: Lab, path: str) -> tuple[int, str]:
    request = urllib.request.Request(lab.url + path, headers={"Authorization": f"token {lab.token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, response.read().decode("utf-8", "replace")


@pytest.mark.slow
@pytest.mark.environments
def test_binder_lab_serves_the_notebooks(binder_lab: Lab) -> None:
    status, page = _get(binder_lab, "/lab/tree/notebooks/00_start_here.ipynb")
    assert status == 200 and '"appVersion": "4.6.6"' in page, page[:500]
    status, page = _get(binder_lab, "/tree/notebooks")  # Notebook 7's file browser (Binder's default command)
    assert status == 200 and '"appVersion": "7.6.5"' in page, page[:500]
    status, body = _get(binder_lab, "/api/contents/notebooks/00_start_here.ipynb?content=1")
    model = json.loads(body)
    stored = read(ROOT / "notebooks" / "00_start_here.ipynb")
    assert model["type"] == "notebook" and len(model["content"]["cells"]) == len(stored.cells)
    assert model["content"]["cells"][0]["source"] == stored.cells[0].source
    # the classroom settings are JupyterLab's defaults there
    for plugin_id, values in json.loads((BINDER / "overrides.json").read_text()).items():
        answer = binder_lab.api("GET", f"/lab/api/settings/{urllib.parse.quote(plugin_id, safe='@:')}")
        defaults = {key: answer["schema"]["properties"][key].get("default") for key in values}
        assert defaults == values, f"JupyterLab on Binder would start {plugin_id} with {defaults}, not {values}"


@pytest.mark.slow
@pytest.mark.environments
def test_binder_environment_reproduces_notebook_00(binder: SimpleNamespace) -> None:
    """Notebook 00 run top to bottom by Binder's Jupyter (nbclient, ipykernel) gives its stored outputs."""
    source = ROOT / "notebooks" / "00_start_here.ipynb"
    out = binder.tmp / "00-run.ipynb"
    result = subprocess.run([str(binder.env / "bin" / "jupyter"), "nbconvert", "--to", "notebook", "--execute",
                             "--ExecutePreprocessor.kernel_name=python3", f"--output={out}", str(source)],
                            capture_output=True, text=True, env=_env(binder), cwd=ROOT / "notebooks", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    ran, stored = nbformat.read(out, as_version=4), read(source)
    patterns = sanitize_patterns()
    different = [i for (i, a), (_, b) in zip(code_cells(stored), code_cells(ran))
                 if normalise(a.outputs, patterns) != normalise(b.outputs, patterns)]
    assert not different, f"in Binder's environment, code cells {different} of 00_start_here.ipynb print other outputs"


@pytest.mark.slow
@pytest.mark.environments
@pytest.mark.browser
def test_binder_lab_in_a_browser_has_the_classroom_settings(binder_lab: Lab, request: pytest.FixtureRequest) -> None:
    chromium = required(shared_chromium(request.config))  # this process's (tests/browser_session.py)

    font_size = json.loads((BINDER / "overrides.json").read_text())[
        "@jupyterlab/codemirror-extension:plugin"]["defaultConfig"]["customStyles"]["fontSize"]
    page = chromium.new_page(viewport={"width": 1300, "height": 900})
    try:
        page.goto(f"{binder_lab.url}/lab/tree/notebooks/00_start_here.ipynb?reset&token={binder_lab.token}")
        page.wait_for_selector(".jp-Notebook .cm-lineNumbers", timeout=120_000)
        page.wait_for_timeout(1000)  # the settings arrive with the editor; give them a moment
        seen = page.evaluate("""() => ({
          editor: getComputedStyle(document.querySelector('.jp-Notebook .cm-content')).fontSize,
          lineNumbers: document.querySelectorAll('.jp-Notebook .jp-CodeCell .cm-lineNumbers').length > 0,
          errors: document.querySelector('.jp-Notebook').innerText.includes('Error displaying')})""")
        assert seen == {"editor": f"{font_size}px", "lineNumbers": True, "errors": False}, seen
        comms = page.evaluate("""async () => (await window.jupyterapp.serviceManager.settings.fetch(
          '@jupyterlab/apputils-extension:kernels-settings')).schema.properties.commsOverSubshells.default""")
        assert comms == "disabled", f"JupyterLab serves commsOverSubshells = {comms!r}"
        page.evaluate("async () => { await window.jupyterapp.commands.execute('application:toggle-presentation-mode'); }")
        assert page.evaluate("() => document.querySelector('#main').classList.contains('jp-mod-presentationMode')")
    finally:
        page.close()
