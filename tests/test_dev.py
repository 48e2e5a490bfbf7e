"""dev.py: the two commands of the README, the security defaults of `lab`, and what each installs:
`lab` the learner's requirements-lab.txt (torch from PyTorch's CPU wheel index where it answers),
`test` the contributor's requirements.txt, into one .venv, each only when its files changed."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import urllib.error
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("dev", ROOT / "dev.py")
dev = importlib.util.module_from_spec(spec)
spec.loader.exec_module(dev)


@pytest.fixture
def captured(monkeypatch, tmp_path):
    calls: list[list[str]] = []
    monkeypatch.setattr(dev, "setup", lambda lab=False: None)
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
    monkeypatch.setattr(dev, "setup", lambda lab=False: None)
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
    monkeypatch.setattr(dev, "setup", lambda lab=False: None)
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
    test = re.search(r"^python3 dev\.py test --site -m site -n 0 tests/test_site\.py\s*$", ci, re.M)
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
    if not dev.LAB_STAMP.exists() or dev.LAB_STAMP.read_text() != dev.lab_digest():
        pytest.fail(".venv's learner's stamp does not match requirements-lab.txt: run `python3 dev.py setup` first")
    for name in ("dev.py", "requirements.txt", "requirements-lab.txt", "pyproject.toml", "tests/nbval_sanitize.cfg"):
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
    # the learner's install after the contributor's: nothing to do either
    done = subprocess.run([python, "dev.py", "setup", "--lab"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and "[dev] installing" not in done.stdout + done.stderr, done.stdout + done.stderr


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
    lab = (ROOT / "requirements-lab.txt").read_text().splitlines()
    assert "torch==2.14.1" in lab and "torchvision==0.29.1" in lab
    assert "-e ." in lab
    reqs = (ROOT / "requirements.txt").read_text().splitlines()
    assert "-r requirements-lab.txt" in reqs
    pinned = [r for r in reqs + lab if r and not r.startswith(("#", "-"))]
    assert all("==" in r for r in pinned), f"unpinned: {[r for r in pinned if '==' not in r]}"


# ---------------------------------------------------------------------- what each command installs
REAL_REACHABLE = dev.cpu_index_reachable


def test_lab_asks_for_the_learners_install_and_every_other_command_for_the_full_one(monkeypatch):
    asked: list[bool] = []
    monkeypatch.setattr(dev, "setup", lambda lab=False: asked.append(lab))
    monkeypatch.setattr(dev, "run", lambda cmd, extra_env=None: 0)
    monkeypatch.setattr(dev, "classroom_settings", lambda: None)
    for argv in (["lab"], ["setup", "--lab"], ["test"], ["setup"], ["execute"], ["bench"], ["class"]):
        asked.clear()
        dev.main(argv)
        assert asked == [argv[0] == "lab" or "--lab" in argv], (argv, asked)


@pytest.fixture
def fake_venv(monkeypatch, tmp_path):
    """dev.py's paths in a scratch checkout (copies of the three files the stamps cover) whose .venv
    holds only an empty `python`; pip's runs are recorded, not made; PyTorch's CPU index does not answer."""
    root = tmp_path / "checkout"
    venv_dir = root / ".venv"
    (venv_dir / "bin").mkdir(parents=True)
    (venv_dir / "bin" / "python").write_text("")
    for name in ("requirements.txt", "requirements-lab.txt", "pyproject.toml"):
        (root / name).write_bytes((ROOT / name).read_bytes())
    for attr, value in {"ROOT": root, "VENV": venv_dir, "PY": venv_dir / "bin" / "python",
                        "STAMP": venv_dir / ".hooklab-installed", "LAB_STAMP": venv_dir / ".hooklab-lab-installed",
                        "REQUIREMENTS": root / "requirements.txt",
                        "LAB_REQUIREMENTS": root / "requirements-lab.txt"}.items():
        monkeypatch.setattr(dev, attr, value)
    installs: list[list[str]] = []  # pip's runs
    compiled: list[list[str]] = []  # compileall's, after each install
    checked: list[bool] = []  # compileall's check=: a file that does not compile must not fail the install

    def record(cmd: list[str], **kw: object) -> None:
        if cmd[1:3] == ["-m", "compileall"]:
            compiled.append(cmd)
            checked.append(bool(kw.get("check")))
        else:
            installs.append(cmd)

    monkeypatch.setattr(dev.subprocess, "run", record)
    monkeypatch.setattr(dev, "cpu_index_reachable", lambda timeout=10: False)
    monkeypatch.setattr(dev, "cpu_torch_installed", lambda: False)
    return SimpleNamespace(root=root, installs=installs, compiled=compiled, checked=checked)


def test_an_install_leaves_bytecode_to_one_compileall_on_every_core(fake_venv):
    """pip compiles one file after the other; dev.py turns that off and compiles the venv with
    compileall on every core (-j 0), once per install, and not when nothing was installed."""
    dev.setup()
    assert "--no-compile" in fake_venv.installs[0], fake_venv.installs
    assert fake_venv.compiled == [[str(dev.PY), "-m", "compileall", "-qq", "-j", "0", str(dev.VENV / "lib")]]
    assert fake_venv.checked == [False], "torch ships a file this Python cannot compile: pip ignores it, so must we"
    dev.setup()
    assert len(fake_venv.compiled) == 1, "compiled again with nothing installed"
    dev.setup(lab=True)  # the learner's set came with the full one
    assert len(fake_venv.compiled) == 1


def test_test_after_a_cpu_lab_install_puts_pypis_torch_back(fake_venv, monkeypatch):
    """pip keeps torch's +cpu build for requirements.txt's pin; the stored outputs need PyPI's build
    (notebook 08's CUDA autocast detour). `lab` itself never removes anything."""
    monkeypatch.setattr(dev, "cpu_torch_installed", lambda: True)
    dev.setup(lab=True)
    assert [c[3] for c in fake_venv.installs] == ["install"]
    dev.setup()
    uninstall, install = fake_venv.installs[1:]
    assert uninstall[1:4] == ["-m", "pip", "uninstall"] and uninstall[-2:] == ["torch", "torchvision"], uninstall
    assert installed(install) == "requirements.txt"


def test_cpu_torch_installed_reads_the_venvs_torch(monkeypatch, tmp_path):
    """Asked of .venv's Python (torch's metadata, torch not imported); no torch there: no CPU build."""
    from importlib import metadata

    assert dev.cpu_torch_installed() is metadata.version("torch").endswith("+cpu")  # this .venv, for real
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\necho "$FAKE_TORCH"\nexit "$FAKE_RC"\n')
    fake.chmod(0o755)
    monkeypatch.setattr(dev, "PY", fake)
    for version, rc, cpu in (("2.14.1+cpu", 0, True), ("2.14.1", 0, False), ("2.14.1+cu128", 0, False),
                             ("PackageNotFoundError: No package metadata was found for torch", 1, False)):
        monkeypatch.setenv("FAKE_TORCH", version)
        monkeypatch.setenv("FAKE_RC", str(rc))
        assert dev.cpu_torch_installed() is cpu, version


def installed(cmd: list[str]) -> str:
    """The requirements file a recorded pip command installs."""
    assert cmd[1:4] == ["-m", "pip", "install"] and cmd[-2] == "-r", cmd
    return Path(cmd[-1]).name


def test_lab_alone_installs_only_the_learners_set(fake_venv):
    dev.setup(lab=True)
    assert [installed(c) for c in fake_venv.installs] == ["requirements-lab.txt"]
    dev.setup(lab=True)
    assert len(fake_venv.installs) == 1, "a second `lab` installed again"


def test_lab_after_test_installs_nothing_and_test_after_lab_completes_the_set(fake_venv):
    dev.setup()
    dev.setup(lab=True)
    assert [installed(c) for c in fake_venv.installs] == ["requirements.txt"], "`lab` after `test` installed again"
    (fake_venv.root / "requirements.txt").write_text((ROOT / "requirements.txt").read_text() + "tqdm==4.67.1\n")
    dev.setup(lab=True)
    assert len(fake_venv.installs) == 1, "a contributor's new test tool made `lab` install"
    dev.setup()
    assert [installed(c) for c in fake_venv.installs] == ["requirements.txt"] * 2


def test_test_after_lab_installs_the_full_set(fake_venv):
    dev.setup(lab=True)
    dev.setup()
    dev.setup()
    assert [installed(c) for c in fake_venv.installs] == ["requirements-lab.txt", "requirements.txt"]


def test_a_changed_lab_file_is_installed_by_both_commands(fake_venv):
    dev.setup()
    lab_file = fake_venv.root / "requirements-lab.txt"
    lab_file.write_text(lab_file.read_text().replace("pillow==13.0.0", "pillow==13.0.1"))
    dev.setup(lab=True)
    dev.setup()
    assert [installed(c) for c in fake_venv.installs] == ["requirements.txt", "requirements-lab.txt",
                                                          "requirements.txt"]
    dev.setup(lab=True)
    dev.setup()
    assert len(fake_venv.installs) == 3


class _Page:
    """What urlopen returns for a page that answered."""
    status = 200

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_lab_takes_torch_from_the_cpu_index_when_it_answers(fake_venv, monkeypatch):
    asked = []
    monkeypatch.setattr(dev, "cpu_index_reachable", REAL_REACHABLE)
    monkeypatch.setattr(dev.sys, "platform", "linux")
    monkeypatch.setattr(dev.urllib.request, "urlopen", lambda url, timeout: asked.append(url) or _Page())
    dev.setup(lab=True)
    cmd = fake_venv.installs[0]
    assert asked == [f"{dev.CPU_INDEX}/torch/"]
    assert "--extra-index-url" in cmd and cmd[cmd.index("--extra-index-url") + 1] == dev.CPU_INDEX, cmd
    assert installed(cmd) == "requirements-lab.txt"


@pytest.mark.parametrize("failure", [urllib.error.URLError("Name or service not known"), TimeoutError("timed out"),
                                     ConnectionRefusedError(111, "refused")])
def test_lab_falls_back_to_pypi_when_the_cpu_index_does_not_answer(fake_venv, monkeypatch, capsys, failure):
    def urlopen(url, timeout):
        raise failure

    monkeypatch.setattr(dev, "cpu_index_reachable", REAL_REACHABLE)
    monkeypatch.setattr(dev.sys, "platform", "linux")
    monkeypatch.setattr(dev.urllib.request, "urlopen", urlopen)
    dev.setup(lab=True)
    cmd = fake_venv.installs[0]
    assert installed(cmd) == "requirements-lab.txt" and not any("index" in arg for arg in cmd), cmd
    assert "cannot be reached: torch comes from PyPI" in capsys.readouterr().out


def test_lab_does_not_ask_the_cpu_index_off_linux(fake_venv, monkeypatch):
    """PyPI's torch is CPU-only on macOS and Windows: no probe, no extra index."""
    monkeypatch.setattr(dev, "cpu_index_reachable", lambda timeout=10: pytest.fail("asked the CPU index"))
    monkeypatch.setattr(dev.sys, "platform", "darwin")
    dev.setup(lab=True)
    assert not any("index" in arg for arg in fake_venv.installs[0])


def test_the_contributors_install_never_asks_the_cpu_index(fake_venv, monkeypatch):
    monkeypatch.setattr(dev, "cpu_index_reachable", lambda timeout=10: pytest.fail("asked the CPU index"))
    monkeypatch.setattr(dev.sys, "platform", "linux")
    dev.setup()
    assert not any("index" in arg for arg in fake_venv.installs[0])


def test_dev_and_binder_use_the_same_cpu_index():
    from .binder_env import CPU_INDEX

    assert dev.CPU_INDEX == CPU_INDEX
    assert f"--extra-index-url {dev.CPU_INDEX}" in (ROOT / "binder" / "requirements.txt").read_text()
