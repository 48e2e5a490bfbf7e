"""Binder: binder/ holds what repo2docker needs, and every notebook opens itself on Binder.

* binder/requirements.txt pins the runtime packages exactly as requirements.txt does, with
  PyTorch's CPU wheel index (Binder has no GPU);
* binder/overrides.json holds real JupyterLab settings (checked against JupyterLab's schemas);
* binder/postBuild runs cleanly in a fresh environment (a new venv that sees the already
  installed pinned packages, as Binder's image has them after requirements.txt, and no hooklab),
  offline, and afterwards hooklab imports from that environment and a JupyterLab started there
  has the classroom settings as its defaults;
* each notebook's first cell links to itself on Binder (JupyterLab opened on that notebook).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sysconfig
import urllib.parse
import venv
from pathlib import Path

import pytest

from .browser import Lab
from .nbtools import notebooks, read

ROOT = Path(__file__).resolve().parents[1]
BINDER = ROOT / "binder"
#: What a learner's notebook needs at run time; the testing tools stay out of Binder.
RUNTIME = ["torch", "torchvision", "jupyterlab", "ipywidgets", "ipykernel", "matplotlib", "numpy", "pillow"]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
BINDER_URL = "https://mybinder.org/v2/gh/hooklab/hooklab/HEAD?urlpath=lab/tree/notebooks/{name}"
BADGE = "https://mybinder.org/badge_logo.svg"

NOTEBOOKS = notebooks()
IDS = [p.name for p in NOTEBOOKS]


def pins(path: Path) -> dict[str, str]:
    """``name==version`` lines of a requirements file (names lower-cased)."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*==\s*(\S+)", line)
        if m:
            found[m.group(1).lower().replace("_", "-")] = m.group(2)
    return found


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
    extra = sorted(set(binder) - set(RUNTIME))
    assert not extra, f"binder/requirements.txt pins packages a learner does not need: {extra}"


def test_binder_uses_pytorch_cpu_wheels() -> None:
    opts = options(BINDER / "requirements.txt")
    assert f"--extra-index-url {CPU_INDEX}" in opts, (
        f"binder/requirements.txt needs `--extra-index-url {CPU_INDEX}` (torch and torchvision as CPU wheels)")
    assert not any(o.startswith(("-e", "--editable")) or o == "-e ." for o in opts), \
        "binder/requirements.txt must not install hooklab itself: postBuild does"


def test_binder_python_version() -> None:
    runtime = (BINDER / "runtime.txt").read_text().strip()
    assert runtime == "python-3.11", f"binder/runtime.txt says {runtime!r}; the project is built and tested on 3.11"


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
    jsonschema = pytest.importorskip("jsonschema")
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


# ---------------------------------------------------------------------- postBuild, for real
def _base_site_packages(target: Path) -> Path:
    """A folder of links to this environment's installed packages, without hooklab and without
    .pth files: what Binder's image holds after binder/requirements.txt, before postBuild."""
    source = Path(sysconfig.get_paths()["purelib"])
    target.mkdir()
    for entry in source.iterdir():
        name = entry.name.lower()
        if name.startswith(("hooklab", "__editable__", "_hooklab")) or name.endswith(".pth"):
            continue
        (target / entry.name).symlink_to(entry)
    return target


@pytest.mark.slow
def test_postbuild_runs_cleanly_in_a_fresh_environment(tmp_path: Path) -> None:
    # the repository as Binder clones it (only what postBuild reads)
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, repo / name)
    shutil.copytree(ROOT / "hooklab", repo / "hooklab", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(BINDER, repo / "binder")

    # a fresh environment that already has the pinned packages (without reinstalling torch)
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    base = _base_site_packages(tmp_path / "base-site-packages")
    (site / "_binder_base.pth").write_text(f"{base}\n")
    # JupyterLab's application files, as installing jupyterlab into this prefix puts them
    from jupyterlab.commands import get_app_dir
    app_dir = env_dir / "share" / "jupyter" / "lab"
    app_dir.mkdir(parents=True)
    for part in ("static", "schemas", "themes"):
        if (Path(get_app_dir()) / part).exists():
            (app_dir / part).symlink_to(Path(get_app_dir()) / part)

    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "JUPYTER"))}
    env.update(PATH=f"{env_dir / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", HOME=str(home),
               # offline: no index; the build backend (setuptools) comes from the environment
               PIP_NO_INDEX="1", PIP_NO_BUILD_ISOLATION="0", PIP_DISABLE_PIP_VERSION_CHECK="1",
               VIRTUAL_ENV=str(env_dir))
    result = subprocess.run(["bash", "binder/postBuild"], cwd=repo, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, f"postBuild failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr

    # hooklab is installed in the new environment (not taken from the repository) and works
    check = subprocess.run([str(python), "-c", "import hooklab, torch; print(hooklab.__file__); "
                            "p = hooklab.Panel('binder check', lambda p: {'ok': 1}); print(p.state())"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stderr
    location = Path(check.stdout.splitlines()[0]).resolve()
    assert location.is_relative_to(env_dir.resolve()), f"hooklab imports from {location}, not the new environment"
    assert "'ok': 1" in check.stdout

    # the classroom settings are where JupyterLab reads them, and become its defaults
    installed = app_dir / "settings" / "overrides.json"
    assert installed.exists(), f"postBuild did not put overrides.json in {installed.parent}:\n{result.stdout}"
    assert json.loads(installed.read_text()) == json.loads((BINDER / "overrides.json").read_text())
    server_env = {k: v for k, v in env.items() if not k.startswith("PIP_")}
    with Lab([], tmp_path / "lab", python=str(python), user_settings=False, env=server_env) as lab:
        for plugin_id, values in json.loads(installed.read_text()).items():
            answer = lab.api("GET", f"/lab/api/settings/{urllib.parse.quote(plugin_id, safe='@:')}")
            defaults = {key: answer["schema"]["properties"][key].get("default") for key in values}
            assert defaults == values, f"JupyterLab on Binder would start {plugin_id} with {defaults}, not {values}"


# ---------------------------------------------------------------------- links to Binder
def test_binder_url_shape() -> None:
    url = BINDER_URL.format(name="00_start_here.ipynb")
    assert url == "https://mybinder.org/v2/gh/hooklab/hooklab/HEAD?urlpath=lab/tree/notebooks/00_start_here.ipynb"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_links_to_itself_on_binder(path: Path) -> None:
    first = read(path).cells[0]
    url = BINDER_URL.format(name=path.name)
    links = re.findall(r"https://mybinder\.org/v2/[^\s)\"'>]+", first.source)
    assert first.cell_type == "markdown" and links, f"{path.name}: the first cell has no Binder link"
    assert links == [url], f"{path.name}: the first cell links to {links}; it should link to itself: {url}"
    assert f"[![Open this notebook on Binder]({BADGE})]({url})" in first.source, (
        f"{path.name}: the Binder link should be the badge: [![Open this notebook on Binder]({BADGE})]({url})")


def test_readme_badge_opens_the_first_notebook() -> None:
    readme = ROOT / "README.md"
    assert readme.exists(), "README.md is missing"
    url = BINDER_URL.format(name="00_start_here.ipynb")
    assert re.search(rf"\[!\[[^\]]*\]\({re.escape(BADGE)}\)\]\({re.escape(url)}\)", readme.read_text()), (
        f"README.md needs the Binder badge opening JupyterLab on notebooks/00_start_here.ipynb: {url}")
