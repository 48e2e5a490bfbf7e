"""dev.py: the two commands of the README, and the security defaults of `lab`."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("dev", ROOT / "dev.py")
dev = importlib.util.module_from_spec(spec)
spec.loader.exec_module(dev)


@pytest.fixture
def captured(monkeypatch, tmp_path):
    calls: list[list[str]] = []
    monkeypatch.setattr(dev, "setup", lambda: None)
    monkeypatch.setattr(dev, "run", lambda cmd: calls.append(cmd) or 0)
    monkeypatch.setattr(dev, "VENV", tmp_path / "venv")  # where `lab` puts the classroom settings
    return calls


def test_lab_opens_start_here_on_localhost_with_token(captured):
    assert dev.main(["lab"]) == 0
    cmd = captured[0]
    assert cmd[1:3] == ["lab", "notebooks/00_start_here.ipynb"]
    assert "--ip=127.0.0.1" in cmd
    assert not any("token" in arg.lower() or "password" in arg.lower() for arg in cmd)


def test_lab_gets_binders_classroom_settings(captured):
    """`dev.py lab` starts JupyterLab with binder/overrides.json as its defaults, as postBuild does
    on Binder (the settings/ folder of the environment's JupyterLab application directory)."""
    target = dev.VENV / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    assert not target.exists()
    dev.main(["lab"])
    assert target.read_text() == (ROOT / "binder" / "overrides.json").read_text()
    target.write_text("{}")  # an older copy is replaced
    dev.main(["lab"])
    assert target.read_text() == (ROOT / "binder" / "overrides.json").read_text()


def test_test_runs_pytest_and_passes_arguments_through(captured):
    dev.main(["test", "-k", "hooks"])
    assert captured[0][1:] == ["-m", "pytest", "-k", "hooks"]


def test_other_cpu_runs_the_kernel_dependent_tests_with_other_kernels(monkeypatch):
    calls: list[tuple[list[str], dict]] = []
    monkeypatch.setattr(dev, "setup", lambda: None)
    monkeypatch.setattr(dev, "run", lambda cmd, extra_env=None: calls.append((cmd, extra_env)) or 0)
    dev.main(["test", "--other-cpu", "-x"])
    cmd, env = calls[0]
    assert cmd[1:] == ["-m", "pytest", "-m", "kernels", "--once", "-x"]
    assert env["ATEN_CPU_CAPABILITY"] == "default" and env["ONEDNN_MAX_CPU_ISA"] == "SSE41"
    assert env["OMP_NUM_THREADS"] == "1" and env["HOOKLAB_OTHER_CPU"] == "1"


def test_environments_runs_only_the_checks_that_build_environments(captured):
    dev.main(["test", "--environments", "-x"])
    assert captured[0][1:] == ["-m", "pytest", "--environments", "-m", "environments", "-x"]


def test_ci_runs_the_environment_checks():
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^python3 dev\.py test\s*$", ci, re.M)
    assert re.search(r"^python3 dev\.py test --environments\s*$", ci, re.M)


def test_ci_runs_both_kernel_sets():
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^python3 dev\.py test --other-cpu\s*$", ci, re.M)


def test_site_installs_its_requirements_once_then_builds(monkeypatch, tmp_path):
    """`dev.py site` installs requirements-site.txt into .venv the first time and when it changes,
    never otherwise, then runs docs/build.py with the extra arguments."""
    installs, runs = [], []
    monkeypatch.setattr(dev, "setup", lambda: None)
    monkeypatch.setattr(dev, "SITE_STAMP", tmp_path / "stamp")
    monkeypatch.setattr(dev, "SITE_REQUIREMENTS", tmp_path / "requirements-site.txt")
    monkeypatch.setattr(dev.subprocess, "run", lambda cmd, **kw: installs.append(cmd))
    monkeypatch.setattr(dev, "run", lambda cmd: runs.append(cmd) or 0)
    dev.SITE_REQUIREMENTS.write_text("Sphinx==9.0.4\n")
    assert dev.main(["site", "-E"]) == 0 and dev.main(["site"]) == 0
    assert len(installs) == 1 and installs[0][-2:] == ["-r", str(dev.SITE_REQUIREMENTS)]
    assert runs == [[str(dev.PY), "docs/build.py", "-E"], [str(dev.PY), "docs/build.py"]]
    dev.SITE_REQUIREMENTS.write_text("Sphinx==9.0.5\n")
    dev.main(["site"])
    assert len(installs) == 2, "a changed requirements-site.txt was not installed"


def test_site_requirements_are_pinned():
    reqs = [r for r in (ROOT / "requirements-site.txt").read_text().splitlines() if r and not r.startswith("#")]
    assert reqs and all("==" in r for r in reqs), reqs


def test_ci_builds_the_site_then_runs_its_test():
    ci = (ROOT / ".ci" / "run").read_text()
    build = re.search(r"^python3 dev\.py site\s*$", ci, re.M)
    test = re.search(r"^python3 dev\.py test --site -m site tests/test_site\.py\s*$", ci, re.M)
    assert build and test and build.start() < test.start()


def test_the_site_test_is_skipped_without_site(tmp_path):
    """A contributor's `dev.py test` neither builds nor checks the site."""
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-n", "0", "-q", "-rs",
                             "tests/test_site.py"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and " passed" not in result.stdout, result.stdout[-2000:]
    assert re.search(r"\d+ skipped", result.stdout) and "run with --site" in result.stdout, result.stdout[-2000:]


def test_ci_sets_ci_whatever_it_inherits():
    """An inherited CI=false would turn a browser test that cannot run into a skip."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^export CI=true\s*$", ci, re.M) and "${CI" not in ci


#: Run by `dev.py test` in a copy of the checkout: what dev.py promises the tests' environment is.
PROBE = """
import importlib.util, os, sys
from pathlib import Path

def test_the_environment_dev_py_gives():
    root = Path(__file__).resolve().parents[1]
    venv_bin = Path(sys.executable).parent
    assert venv_bin == Path(os.environ["HOOKLAB_PROBE_ROOT"]) / ".venv" / "bin"  # the checkout's .venv
    assert sys.prefix != sys.base_prefix  # a virtual environment
    assert os.environ["PATH"].split(os.pathsep)[0] == str(venv_bin)  # its tools first (jupyter, ...)
    assert os.environ["PYTHONUTF8"] == "1" and "PYTHONPATH" not in os.environ
    assert Path.cwd().resolve() == root  # run from the checkout's root
    assert importlib.util.find_spec("hooklab") is not None  # installed in .venv (found, not imported)
"""


def test_dev_py_test_runs_pytest_in_the_venv_for_real(tmp_path):
    """No stub: `python3 dev.py test` in a copy of the checkout (dev.py and what it reads) whose .venv
    is this checkout's (a link), with a stray PYTHONPATH in the environment; one small test runs.
    (No conftest.py in the copy, and the probe imports nothing heavy: a few seconds.)"""
    if not dev.STAMP.exists() or dev.STAMP.read_text() != dev.requirements_digest():
        pytest.fail(".venv was not installed for this requirements.txt and pyproject.toml (dev.py would "
                    "install it now, from the copy): run `python3 dev.py setup` first")
    for name in ("dev.py", "requirements.txt", "pyproject.toml", "tests/nbval_sanitize.cfg"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "tests" / "test_probe.py").write_text(PROBE)
    (tmp_path / ".venv").symlink_to(dev.VENV, target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONUTF8", "VIRTUAL_ENV")}
    env.update(PYTHONPATH=str(tmp_path / "nowhere"), HOOKLAB_PROBE_ROOT=str(tmp_path),
               PATH=os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(str(ROOT))))
    python = shutil.which("python3", path=env["PATH"]) or sys.executable  # as a person types it
    done = subprocess.run([python, "dev.py", "test", "-n", "0", "-q", "tests/test_probe.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "1 passed" in out, out[-3000:]
    assert "[dev] installing" not in out  # the stamp matched: nothing installed


def test_unknown_command_prints_usage(captured, capsys):
    assert dev.main(["nope"]) == 2
    assert "python3 dev.py lab" in capsys.readouterr().out
    assert captured == []


def test_readme_names_the_two_commands_and_ci_calls_the_test_one():
    readme = (ROOT / "README.md").read_text()
    assert "python3 dev.py lab" in readme and "python3 dev.py test" in readme
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^python3 dev\.py test\s*$", ci, re.M)


def test_requirements_pin_torch_pair_and_install_hooklab():
    reqs = (ROOT / "requirements.txt").read_text().splitlines()
    assert "torch==2.14.1" in reqs and "torchvision==0.29.1" in reqs
    assert "-e ." in reqs
    pinned = [r for r in reqs if r and not r.startswith(("#", "-"))]
    assert all("==" in r for r in pinned), f"unpinned: {[r for r in pinned if '==' not in r]}"
