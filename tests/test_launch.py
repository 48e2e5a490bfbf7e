"""Where the notebooks run: one repository URL, launch links, the install cell, version drift.

* pyproject.toml's ``[project.urls] Repository`` is the only place that names the repository:
  every launch link and install URL in the README, TEACHING.md and the notebooks is the one
  tests/notebook_header.py derives from it; in CI, the clone's ``origin`` and GITHUB_REPOSITORY
  must name the same repository;
* every notebook starts with the header tests/notebook_header.py writes (launch links for Binder,
  Colab, Kaggle and SageMaker Studio Lab; the install cell right after the title);
* the install cell prints nothing where hooklab is installed (nbval checks its stored empty
  output), and where hooklab is missing it installs hooklab from the repository at the release tag,
  alone, without touching torch (a slow test runs it in a fresh environment, from a local clone);
* ``hooklab.recorded_with`` is silent with the torch that recorded the outputs, and says so once,
  in one line, with another one;
* Panel works with the oldest ipywidgets pyproject.toml accepts (7.7.1, what Colab ships): a slow
  test runs the panel tests and every notebook with it.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import nbformat
import pytest

import hooklab
from hooklab import claims

from . import notebook_header as header
from .browser import in_ci
from .nbtools import IGNORE, SKIP, code_cells, has_marker, normalise, notebooks, read, sanitize_patterns

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = notebooks()
IDS = [p.name for p in NOTEBOOKS]
#: The oldest ipywidgets pyproject.toml accepts: Colab's (Feb 2026: ipywidgets 7.7.1, for years).
OLDEST_IPYWIDGETS = "7.7.1"

#: Launch and install URLs, by service: each names the repository once.
LAUNCH_URL = re.compile(
    r"https://mybinder\.org/v2/gh/(?P<binder>[^/\s]+/[^/\s]+)/[^\s)\"'>]*"
    r"|https://colab\.research\.google\.com/github/(?P<colab>[^/\s]+/[^/\s]+)/[^\s)\"'>]*"
    r"|https://(?:www\.)?kaggle\.com/kernels/welcome\?src=https://github\.com/(?P<kaggle>[^/\s]+/[^/\s]+)/[^\s)\"'>]*"
    r"|https://studiolab\.sagemaker\.aws/import/github/(?P<studiolab>[^/\s]+/[^/\s]+)/[^\s)\"'>]*"
    r"|git\+https://github\.com/(?P<install>[^/\s@\"']+/[^/\s@\"']+)[^\s\"']*")


def texts() -> dict[str, str]:
    """Every text a learner or a contributor reads a link in."""
    found = {p.name: p.read_text() for p in (ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "TEACHING.md") if p.exists()}
    for path in NOTEBOOKS:
        found[path.name] = "\n".join(c.source for c in read(path).cells)
    return found


# ---------------------------------------------------------------------- one repository URL
def test_pyproject_names_the_repository() -> None:
    assert header.repository_url() == f"https://github.com/{header.slug()}"
    assert re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", header.slug())
    assert header.release_ref() == f"v{hooklab.__version__}", "pyproject's version and hooklab.__version__ differ"


def test_every_launch_and_install_link_names_the_pyproject_repository() -> None:
    found = 0
    for name, text in texts().items():
        for m in LAUNCH_URL.finditer(text):
            found += 1
            named = next(v for v in m.groupdict().values() if v)
            assert named == header.slug(), (f"{name}: {m.group(0)} names {named}, but pyproject.toml's "
                                            f"[project.urls] Repository is {header.repository_url()}")
    assert found >= 5 * len(NOTEBOOKS), "fewer launch links than expected: is the pattern still right?"


def test_readme_links_are_the_generated_ones() -> None:
    readme = (ROOT / "README.md").read_text()
    links = header.links("00_start_here.ipynb")
    assert f"[![Open on Binder]({header.BINDER_BADGE})]({links.binder})" in readme, "README: the Binder badge"
    for url in (links.colab, links.kaggle, links.studio_lab):
        assert url in readme, f"README should link notebook 00 on every hosted service: {url}"


def test_readme_links_the_site_where_github_pages_publishes_it() -> None:
    """The site's URL is derived from pyproject's repository, as every launch link is."""
    assert f"<{header.site_url()}>" in (ROOT / "README.md").read_text(), f"README should link {header.site_url()}"
    for name, text in texts().items():
        for url in re.findall(r"https://[\w.-]+\.github\.io/[^\s)\"'>]*", text):
            assert url.startswith(header.site_url()), f"{name}: {url} is not the site of {header.repository_url()}"


@pytest.mark.parametrize("url, slug", [
    ("https://github.com/hooklab/hooklab.git", "hooklab/hooklab"),
    ("https://github.com/hooklab/hooklab", "hooklab/hooklab"),
    ("git@github.com:someone/fork.git", "someone/fork"),
    ("ssh://git@github.com/someone/fork", "someone/fork"),
    ("https://x-access-token:abc@github.com/org/repo.git", "org/repo"),
    ("/srv/git/hooklab.git", None),
    ("https://gitlab.com/hooklab/hooklab.git", None),
])
def test_remote_urls_name_their_repository(url: str, slug: str | None) -> None:
    assert header.slug_from_remote(url) == slug


def repository_mismatches(origin: str | None, github_repository: str | None) -> list[str]:
    """What names another repository than pyproject.toml: the origin remote (if it is on GitHub)
    and GITHUB_REPOSITORY (set by GitHub Actions)."""
    wrong = []
    named = header.slug_from_remote(origin) if origin else None
    if named and named.lower() != header.slug().lower():
        wrong.append(f"git remote origin is {origin} ({named})")
    if github_repository and github_repository.lower() != header.slug().lower():
        wrong.append(f"GITHUB_REPOSITORY is {github_repository}")
    return wrong


def test_mismatch_rule_both_ways() -> None:
    assert repository_mismatches(f"https://github.com/{header.slug()}.git", header.slug()) == []
    assert repository_mismatches(None, None) == [] and repository_mismatches("/srv/git/x.git", None) == []
    assert len(repository_mismatches("git@github.com:someone/fork.git", "someone/fork")) == 2


def test_the_clone_is_the_repository_pyproject_names() -> None:
    origin = subprocess.run(["git", "remote", "get-url", "origin"], cwd=ROOT, capture_output=True, text=True)
    wrong = repository_mismatches(origin.stdout.strip() if origin.returncode == 0 else None,
                                  os.environ.get("GITHUB_REPOSITORY"))
    if wrong and not in_ci():
        pytest.skip("outside CI a fork may differ: " + "; ".join(wrong))
    assert not wrong, ("this clone belongs to another repository than pyproject.toml's [project.urls] Repository "
                       f"({header.repository_url()}): " + "; ".join(wrong) +
                       ". Change Repository there, run `python -m tests.notebook_header`, then `python3 dev.py execute`.")


# ---------------------------------------------------------------------- the header of each notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_header_is_the_generated_one(path: Path) -> None:
    nb = read(path)
    problems = header.header_problems(nb, path.name)
    assert not problems, (f"{path.name}: " + "; ".join(problems) +
                          ". Run `python -m tests.notebook_header`, then `python3 dev.py execute`.")
    links = header.links(path.name)
    first = nb.cells[0].source
    for url in (links.binder, links.colab, links.kaggle, links.studio_lab):
        assert url in first, f"{path.name}: the first cell lacks {url}"
    assert f"/blob/{header.release_ref()}/notebooks/{path.name}" in links.colab


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_install_cell_is_checked_and_stores_nothing(path: Path) -> None:
    """nbval compares the install cell's output with the stored one, which is empty: locally it
    must print nothing (no install, and the torch that recorded the outputs)."""
    cell = read(path).cells[1]
    assert header.is_install_cell(cell) and cell.source.startswith(header.INSTALL_FIRST_LINE)
    assert not has_marker(cell, IGNORE) and not has_marker(cell, SKIP), "the install cell must stay checked"
    assert cell.outputs == [], f"{path.name}: the install cell stored output: {cell.outputs}"
    assert "--no-deps" in cell.source and f"@{header.release_ref()}" in cell.source


def test_header_follows_pyproject(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another repository and version in pyproject.toml give other links and another install ref;
    applying the header twice changes nothing the second time."""
    project = dict(header.project(), version="9.9.9", urls={"Repository": "https://github.com/octo/fork"})
    monkeypatch.setattr(header, "project", lambda: project)
    nb = copy.deepcopy(read(NOTEBOOKS[0]))
    assert header.apply(nb, NOTEBOOKS[0].name)
    first, install = nb.cells[0].source, nb.cells[1].source
    assert "https://colab.research.google.com/github/octo/fork/blob/v9.9.9/notebooks/00_start_here.ipynb" in first
    assert "https://mybinder.org/v2/gh/octo/fork/HEAD?urlpath=lab/tree/notebooks/00_start_here.ipynb" in first
    assert "hooklab/hooklab" not in first and '"hooklab @ git+https://github.com/octo/fork@v9.9.9"' in install
    assert not header.apply(nb, NOTEBOOKS[0].name), "applying the header a second time changed it again"
    assert [c.cell_type for c in nb.cells[:3]] == [c.cell_type for c in read(NOTEBOOKS[0]).cells[:3]]
    fresh = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# 99 · New\n\nSome text."),
                                            nbformat.v4.new_code_cell("import hooklab")])
    assert header.apply(fresh, "99_new.ipynb") and fresh.cells[1].source.startswith(header.INSTALL_FIRST_LINE)
    assert fresh.cells[0].source.splitlines()[2].startswith("[![Open this notebook on Binder]")
    with pytest.raises(ValueError, match="Markdown title"):
        header.apply(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), "x.ipynb")


def test_header_check_command_reports_a_stale_header(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture) -> None:
    assert header.main(["--check"]) == 0
    monkeypatch.setattr(header, "recorded_torch", lambda: "1.0.0")
    assert header.main(["--check"]) == 1
    assert "python -m tests.notebook_header" in capsys.readouterr().out


# ---------------------------------------------------------------------- version drift
def test_recorded_torch_is_the_one_these_tests_run() -> None:
    import torch

    assert torch.__version__.split("+")[0] == header.recorded_torch(), (
        "the tests run another torch than requirements.txt pins: the stored outputs were recorded with the pin")


def test_recorded_with_is_silent_with_the_recording_torch(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture) -> None:
    import torch

    monkeypatch.setattr(claims, "_noted", set())
    assert hooklab.recorded_with(torch=header.recorded_torch()) is None
    monkeypatch.setattr(torch, "__version__", f"{header.recorded_torch()}+cpu")  # Binder's CPU wheel
    assert hooklab.recorded_with(torch=header.recorded_torch()) is None
    assert capsys.readouterr().out == ""


def test_recorded_with_says_so_once_with_another_torch(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture) -> None:
    import torch

    monkeypatch.setattr(claims, "_noted", set())
    monkeypatch.setattr(torch, "__version__", "2.10.0+cu128")  # Colab's, February 2026
    line = hooklab.recorded_with(torch="2.14.1")
    assert line == ("Note: the stored outputs were recorded with torch 2.14.1; this is torch 2.10.0+cu128, "
                    "so a few printed digits may differ from them.")
    assert hooklab.recorded_with(torch="2.14.1") is None  # a second cell (or a re-run) stays quiet
    assert capsys.readouterr().out == line + "\n"


def test_hooklab_declares_the_torch_range_pyproject_declares() -> None:
    """recorded_with reads the range from the installed hooklab's metadata: it must be pyproject's."""
    from importlib import metadata

    declared = [d.replace(" ", "") for d in header.project()["dependencies"] if re.match(r"torch\b", d)]
    installed = [r.replace(" ", "") for r in metadata.requires("hooklab") or [] if re.match(r"torch\b", r)]
    assert declared and installed == declared, (installed, declared)


@pytest.mark.parametrize("version", ["2.4.1+cu121", "1.13.1", "2.0.0"])
def test_recorded_with_names_the_supported_range_outside_it(version: str, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture) -> None:
    """A torch older than pyproject's floor (the notebooks' install cell installs hooklab without its
    requirements, so a hosted service's old torch stays): the one line says what is supported."""
    import torch

    from .oldest_torch import TORCH

    floor = re.search(r"torch>=([\d.]+)", "".join(header.project()["dependencies"])).group(1)
    assert TORCH.startswith(f"{floor}."), f"tests/oldest_torch.py tests torch {TORCH}; pyproject's floor is {floor}"
    monkeypatch.setattr(claims, "_noted", set())
    monkeypatch.setattr(torch, "__version__", version)
    line = hooklab.recorded_with(torch="2.14.1")
    assert line == (f"Note: the stored outputs were recorded with torch 2.14.1; this is torch {version}, so a few "
                    f"printed digits may differ from them. hooklab supports torch>={floor}: some cells may fail.")
    assert hooklab.recorded_with(torch="2.14.1") is None
    assert capsys.readouterr().out == line + "\n"


def test_recorded_with_inside_the_range_says_only_that_digits_may_differ(monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture) -> None:
    """The oldest supported release itself, and a newer one than recorded, are inside the range."""
    import torch

    from .oldest_torch import TORCH

    for version in (TORCH, f"{TORCH}+cu124", "2.15.0"):
        monkeypatch.setattr(claims, "_noted", set())
        monkeypatch.setattr(torch, "__version__", version)
        assert hooklab.recorded_with(torch="2.14.1") == (
            f"Note: the stored outputs were recorded with torch 2.14.1; this is torch {version}, "
            "so a few printed digits may differ from them.")
    capsys.readouterr()


# ---------------------------------------------------------------------- the install cell, for real
def _links_to_installed(target: Path) -> Path:
    """A folder of links to this environment's packages without hooklab and without .pth files:
    what a hosted service has (torch, ipywidgets, ...), hooklab missing."""
    source = Path(sysconfig.get_paths()["purelib"])
    target.mkdir()
    for entry in source.iterdir():
        name = entry.name.lower()
        if name.startswith(("hooklab", "__editable__", "_hooklab")) or name.endswith(".pth"):
            continue
        (target / entry.name).symlink_to(entry)
    return target


@pytest.mark.slow
@pytest.mark.environments
def test_install_cell_installs_hooklab_alone_where_it_is_missing(tmp_path: Path) -> None:
    """The install cell, run by IPython in a fresh environment that has torch and the rest but no
    hooklab, installs hooklab from a clone of this repository at the release tag (a local copy
    stands in for GitHub), imports it, leaves torch where it was, and is silent the second time."""
    ref = header.release_ref()
    clone = tmp_path / "clone"
    subprocess.run(["git", "init", "-q", str(clone)], check=True)
    repo = clone  # the repository as it is now (committed or not), tagged like a release
    from .binder_env import repository_copy
    repository_copy(repo)
    git = ["git", "-C", str(repo), "-c", "user.name=test", "-c", "user.email=test@example.invalid"]
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "release"], check=True)
    subprocess.run(git + ["tag", ref], check=True)

    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "_service.pth").write_text(f"{_links_to_installed(tmp_path / 'service')}\n")
    # (pip takes a git+file URL in `name @ url` form only with a host: file://localhost/...)
    cell = header.install_source(repository=f"file://localhost{repo}", ref=ref)
    script = tmp_path / "run_cell.py"
    script.write_text(
        "import io, json, sys, contextlib\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "shell = InteractiveShell.instance()\n"
        f"cell = {cell!r}\n"
        "import torch\n"
        "torch_file = torch.__file__\n"
        "runs = []\n"
        "for _ in range(2):\n"
        "    out = io.StringIO()\n"
        "    with contextlib.redirect_stdout(out):\n"
        "        result = shell.run_cell(cell)\n"
        "    runs.append({'ok': result.success, 'error': repr(result.error_in_exec), 'out': out.getvalue()})\n"
        "import hooklab, importlib.metadata as m\n"
        "print(json.dumps({'runs': runs, 'hooklab': hooklab.__file__, 'torch_before': torch_file,\n"
        "                  'torch_after': sys.modules['torch'].__file__,\n"
        "                  'direct_url': m.distribution('hooklab').read_text('direct_url.json')}))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(PATH=f"{env_dir / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", VIRTUAL_ENV=str(env_dir),
               PIP_DISABLE_PIP_VERSION_CHECK="1", HOME=str(tmp_path))
    before = subprocess.run([str(python), "-c", "import hooklab"], capture_output=True, env=env, cwd=tmp_path)
    assert before.returncode != 0, "hooklab is importable before the cell runs: this test would prove nothing"
    result = subprocess.run([str(python), str(script)], capture_output=True, text=True, env=env, cwd=tmp_path,
                            timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    first, second = report["runs"]
    assert first["ok"], f"the install cell failed where hooklab was missing: {first}\n{result.stderr[-2000:]}"
    assert Path(report["hooklab"]).resolve().is_relative_to(site.resolve()), report["hooklab"]
    assert json.loads(report["direct_url"])["vcs_info"]["requested_revision"] == ref
    assert report["torch_before"] == report["torch_after"], "torch was replaced"
    installed = sorted(p.name.split("-")[0].lower() for p in site.glob("*.dist-info"))
    assert installed == ["hooklab"], f"the install cell installed more than hooklab: {installed}"
    assert second == {"ok": True, "error": "None", "out": ""}, f"the second run was not silent: {second}"


# ---------------------------------------------------------------------- the oldest ipywidgets
def test_pyproject_accepts_the_ipywidgets_colab_ships() -> None:
    deps = header.project()["dependencies"]
    assert f"ipywidgets>={OLDEST_IPYWIDGETS}" in deps, (
        f"pyproject.toml should accept ipywidgets {OLDEST_IPYWIDGETS} (Colab's): {deps}")


@pytest.fixture(scope="module")
def oldest_ipywidgets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ipywidgets 7.7.1 (and ipython_genutils, which it needs), pure Python, in a folder that goes
    in front of this environment's packages (PYTHONPATH)."""
    cache = ROOT / ".venv" / "hooklab-cache" / f"ipywidgets-{OLDEST_IPYWIDGETS}"
    if not (cache / "ipywidgets").exists():
        tmp = tmp_path_factory.mktemp("ipywidgets")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp),
                        f"ipywidgets=={OLDEST_IPYWIDGETS}", "ipython_genutils==0.2.0"], check=True)
        cache.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(cache, ignore_errors=True)
        shutil.copytree(tmp, cache)
    return cache


def _old_env(folder: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(folder), "PYTHONUTF8": "1"}


@pytest.mark.slow
@pytest.mark.environments
def test_panel_tests_pass_with_the_oldest_ipywidgets(oldest_ipywidgets: Path) -> None:
    env = _old_env(oldest_ipywidgets)
    version = subprocess.run([sys.executable, "-c", "import ipywidgets; print(ipywidgets.__version__)"],
                             capture_output=True, text=True, env=env, cwd=ROOT)
    assert version.stdout.strip() == OLDEST_IPYWIDGETS, version.stderr
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-o", "addopts=", "-p", "no:cacheprovider",
                             "tests/test_panel_checker_misc.py", "tests/test_doctests.py", "-k", "anel or widgets"],
                            capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert result.returncode == 0, f"with ipywidgets {OLDEST_IPYWIDGETS}:\n{result.stdout[-4000:]}"


_DISPLAY_CHECK = """
from IPython.core.interactiveshell import InteractiveShell
import hooklab
shell = InteractiveShell.instance()
shell.run_cell("import hooklab")
shell.run_cell("panel = hooklab.Panel('shown', lambda p: {'rows': 1})\\npanel")  # displayed as a cell's last line
print("VIEW", repr(shell.user_ns["panel"].view.value))
try:
    print("BUNDLE", sorted(hooklab.Panel("bundle", lambda p: {"rows": 2})._repr_mimebundle_()))
except Exception as exc:
    print("BUNDLE", repr(exc))
"""


def _display_problems(env: dict[str, str]) -> list[str]:
    """What goes wrong when IPython displays a panel (empty list: nothing)."""
    result = subprocess.run([sys.executable, "-c", _DISPLAY_CHECK], capture_output=True, text=True, env=env,
                            cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if line.startswith(("VIEW ", "BUNDLE ")))
    problems = []
    if "<td><code>1</code></td>" not in lines.get("VIEW", ""):
        problems.append(f"the view is empty after the panel was displayed: {lines.get('VIEW')}")
    if "'text/html'" not in lines.get("BUNDLE", ""):
        problems.append(f"Panel._repr_mimebundle_ gives {lines.get('BUNDLE')}")
    return problems


def test_a_displayed_panel_shows_its_view() -> None:
    """Displayed as IPython displays it (the cell's last expression), a panel shows its view at once."""
    assert _display_problems(dict(os.environ)) == []


@pytest.mark.slow
@pytest.mark.environments
def test_a_displayed_panel_shows_its_view_with_the_oldest_ipywidgets(oldest_ipywidgets: Path) -> None:
    """The same with ipywidgets 7.7.1 (Colab), which displays a widget through ``_ipython_display_``
    and has no ``_repr_mimebundle_``: Panel defines the one and builds the other's bundle itself."""
    assert _display_problems(_old_env(oldest_ipywidgets)) == []


#: The notebooks run with the oldest ipywidgets: 00-05 (every kind of control: checkboxes, sliders,
#: dropdowns, plots). 06 and 07 use the same controls and spend their time training models.
OLDEST_IPYWIDGETS_NOTEBOOKS = [p for p in NOTEBOOKS if p.name[:2] <= "05"]


@pytest.mark.slow
@pytest.mark.environments
@pytest.mark.parametrize("path", OLDEST_IPYWIDGETS_NOTEBOOKS, ids=[p.name for p in OLDEST_IPYWIDGETS_NOTEBOOKS])
def test_notebook_with_the_oldest_ipywidgets(path: Path, oldest_ipywidgets: Path) -> None:
    """Notebooks 00-05, run with ipywidgets 7.7.1, print what they stored (their labs driven from
    code included), displayed panels too: the same HTML snapshot beside the live widget."""
    from nbclient import NotebookClient

    stored = read(path)
    nb = copy.deepcopy(stored)
    nb.cells.insert(0, nbformat.v4.new_code_cell("import ipywidgets; print(ipywidgets.__version__)"))
    # coalesce_streams: one print, one output (a busy machine can deliver it in two messages)
    NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True, coalesce_streams=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute(env=_old_env(oldest_ipywidgets))
    version = nb.cells.pop(0).outputs
    assert version and version[0]["text"].strip() == OLDEST_IPYWIDGETS, version
    patterns = sanitize_patterns()
    different = []
    for (i, want), (_, got) in zip(code_cells(stored), code_cells(nb)):
        a, b = normalise(want.outputs, patterns), normalise(got.outputs, patterns)
        if a != b:
            different.append((i, a, b))
    assert not different, f"{path.name} with ipywidgets {OLDEST_IPYWIDGETS}: cells differ: {different[:2]}"
