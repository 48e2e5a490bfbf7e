#!/usr/bin/env python3
"""Set up and run hooklab: one command each.

    python3 dev.py lab       open JupyterLab on notebooks/00_start_here.ipynb (127.0.0.1, with a token),
                             with Binder's classroom settings (binder/overrides.json); it needs
                             only the learner's install, requirements-lab.txt
    python3 dev.py setup [--lab]
                             install only: requirements.txt, or with --lab requirements-lab.txt
    python3 dev.py test      check the project: unit tests, every notebook under nbval, re-run,
                             hygiene, the browser tests (where Chromium is installed)
    python3 dev.py test --environments
                             the checks that build other environments (cached outside the
                             repository, built once): Binder's, the oldest torch and ipywidgets
                             pyproject.toml accepts, the install cell in a fresh environment
    python3 dev.py test --other-cpu
                             the checks whose results depend on the CPU (every notebook under
                             nbval and run twice, the trained-model tests) as another CPU runs
                             them: other float kernels, one thread
    python3 dev.py execute   re-run every notebook top to bottom and store its outputs
                             (add notebook paths to execute only those)
    python3 dev.py bench     measure what hooks and notebooks cost; writes benchmarks/RESULTS.md
                             (--quick: a short run, written to benchmarks/out/)
    python3 dev.py site      build the course's website from the stored notebooks into _site/
                             (installs requirements-site.txt into .venv the first time; docs/build.py)
    python3 dev.py class --out DIR
                             for a class that grades the exercises: student copies of the notebooks
                             and of hooklab without the worked solutions, and an answer key (TEACHING.md)

Each command first creates .venv (or reuses it) and installs into it what it needs when that changed
since the last install: `lab` the learner's requirements-lab.txt (the notebooks' packages and
hooklab; on Linux, torch and torchvision from PyTorch's CPU wheel index, which leaves out the CUDA
libraries, or from PyPI when that index cannot be reached), every other command requirements.txt
(requirements-lab.txt and the tools that test the project, with PyPI's torch, which recorded the
stored outputs). Both share .venv: `lab` after `test` installs nothing. Extra arguments go to the
tool: `python3 dev.py test -k hooks`.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
import urllib.request
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / ("python.exe" if os.name == "nt" else "python")
STAMP = VENV / ".hooklab-installed"
REQUIREMENTS = ROOT / "requirements.txt"
LAB_REQUIREMENTS = ROOT / "requirements-lab.txt"
LAB_STAMP = VENV / ".hooklab-lab-installed"
#: PyTorch's own index of CPU-only wheels: torch and torchvision as "+cpu" builds, which pip prefers to
#: PyPI's build of the same version (on Linux that one brings CUDA libraries, a few GB). pip counts
#: torch==2.14.1 as installed by 2.14.1+cpu and the other way round: `lab` after `test` keeps PyPI's
#: build; `test` after `lab` replaces the CPU build (setup).
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
SITE_REQUIREMENTS = ROOT / "requirements-site.txt"
SITE_STAMP = VENV / ".hooklab-site-installed"


#: Another CPU on this machine: PyTorch picks other convolution and matrix kernels (SSE4.1 instead
#: of AVX2/AVX-512) and one thread instead of all cores, so float sums come out in another order.
#: The stored outputs must match under these as they do natively.
OTHER_CPU = {
    "ONEDNN_MAX_CPU_ISA": "SSE41",
    "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
    "ATEN_CPU_CAPABILITY": "default",
    "OMP_NUM_THREADS": "1",
    "HOOKLAB_OTHER_CPU": "1",
}


def say(msg: str) -> None:
    print(f"[dev] {msg}", flush=True)


def _digest(*paths: Path) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in paths)).hexdigest()


def requirements_digest() -> str:
    """What .venv was installed for (kept in STAMP): requirements.txt, the requirements-lab.txt it
    includes, and pyproject.toml."""
    return _digest(REQUIREMENTS, LAB_REQUIREMENTS, ROOT / "pyproject.toml")


def lab_digest() -> str:
    """What the learner's part of .venv was installed for (kept in LAB_STAMP)."""
    return _digest(LAB_REQUIREMENTS, ROOT / "pyproject.toml")


def cpu_index_reachable(timeout: float = 10) -> bool:
    """Whether PyTorch's CPU wheel index answers (its torch page), within ``timeout`` seconds."""
    try:
        with urllib.request.urlopen(f"{CPU_INDEX}/torch/", timeout=timeout) as page:
            return page.status == 200
    except (OSError, ValueError):  # no network, a proxy that refuses, a timeout (URLError is an OSError)
        return False


def torch_index() -> list[str]:
    """pip's options for the learner's torch: PyTorch's CPU wheel index on Linux, where PyPI's torch
    brings CUDA libraries; none elsewhere (PyPI's torch is CPU-only on macOS and Windows), and none
    when the index cannot be reached (PyPI's torch works on a CPU too, it is only larger)."""
    if not sys.platform.startswith("linux"):
        return []
    if cpu_index_reachable():
        return ["--extra-index-url", CPU_INDEX]
    say(f"PyTorch's CPU wheel index ({CPU_INDEX}) cannot be reached: torch comes from PyPI, "
        "with its CUDA libraries (a few GB more)")
    return []


def cpu_torch_installed() -> bool:
    """Whether .venv holds torch's "+cpu" build, from a `lab` install through PyTorch's CPU index."""
    found = subprocess.run([str(PY), "-c", "from importlib.metadata import version; print(version('torch'))"],
                           capture_output=True, text=True)
    return found.returncode == 0 and found.stdout.strip().endswith("+cpu")


def setup(lab: bool = False) -> None:
    """Create .venv and install requirements.txt, or with ``lab`` only requirements-lab.txt, again only
    when the files changed. requirements.txt includes requirements-lab.txt, so its install counts
    for both (two stamps say what .venv holds); a lab install leaves the rest to the next full one."""
    if sys.version_info < (3, 10):
        sys.exit(f"hooklab needs Python 3.10 or newer (3.11 recommended); this is {sys.version.split()[0]}.")
    stamp, digest = (LAB_STAMP, lab_digest()) if lab else (STAMP, requirements_digest())
    if PY.exists() and stamp.exists() and stamp.read_text() == digest:
        return
    if not PY.exists():
        say(f"creating {VENV.relative_to(ROOT)} with Python {sys.version.split()[0]}")
        venv.EnvBuilder(with_pip=True).create(VENV)
    source = LAB_REQUIREMENTS if lab else REQUIREMENTS
    index = torch_index() if lab else []
    if not lab and cpu_torch_installed():
        # The stored outputs come from PyPI's build (notebook 08's CUDA autocast detour needs a build
        # with CUDA support), and pip would keep the "+cpu" one, which satisfies the same pin.
        say("the tests need PyPI's build of torch, which recorded the stored outputs: replacing the CPU-only one")
        subprocess.run([str(PY), "-m", "pip", "uninstall", "--disable-pip-version-check", "-q", "-y",
                        "torch", "torchvision"], cwd=ROOT, check=True)
    say(f"installing {source.name} (the first time takes a few minutes: PyTorch is large)")
    start = time.time()
    subprocess.run([str(PY), "-m", "pip", "install", "--disable-pip-version-check", "-q", "--no-compile", *index,
                    "-r", str(source)], cwd=ROOT, check=True)
    compile_bytecode()
    stamp.write_text(digest)
    if not lab:
        LAB_STAMP.write_text(lab_digest())  # the learner's set was part of it
    say(f"installed in {time.time() - start:.0f} s")


def compile_bytecode() -> None:
    """Compile what .venv holds to bytecode on every core at once (pip's own compiling, which
    `--no-compile` turns off, takes one file after the other: fresh installs on 2 cores took 148 s
    with it against 120 s this way in one pair of runs, 184 s against 152 and 185 s in a slower half
    hour: the disk's speed varies about as much as this saves). Files that do not compile are left, as
    pip leaves them (torch ships one written for a newer Python): no check of compileall's status."""
    subprocess.run([str(PY), "-m", "compileall", "-qq", "-j", "0", str(VENV / ("Lib" if os.name == "nt" else "lib"))],
                   cwd=ROOT)


def setup_site() -> None:
    """Install requirements-site.txt into .venv (again only when it changed): the site's generator."""
    digest = hashlib.sha256(SITE_REQUIREMENTS.read_bytes()).hexdigest()
    if SITE_STAMP.exists() and SITE_STAMP.read_text() == digest:
        return
    say("installing requirements-site.txt (Sphinx, myst-nb, the book theme)")
    subprocess.run([str(PY), "-m", "pip", "install", "--disable-pip-version-check", "-q",
                    "-r", str(SITE_REQUIREMENTS)], cwd=ROOT, check=True)
    SITE_STAMP.write_text(digest)


def classroom_settings(app_dir: Path | None = None) -> Path:
    """JupyterLab's defaults for this project's lab, as on Binder: binder/overrides.json in the
    settings/ folder of .venv's JupyterLab application directory (the user's own settings win)."""
    target = (app_dir or VENV / "share" / "jupyter" / "lab") / "settings" / "overrides.json"
    source = (ROOT / "binder" / "overrides.json").read_text()
    if not target.exists() or target.read_text() != source:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source)
    return target


def run(cmd: list[str], extra_env: dict[str, str] | None = None) -> int:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONUTF8="1", **(extra_env or {}))
    env.pop("PYTHONPATH", None)
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"lab", "test", "execute", "bench", "site", "class", "setup"}:
        print(__doc__)
        return 2
    command, rest = argv[0], argv[1:]
    setup(lab=command == "lab" or (command == "setup" and "--lab" in rest))  # the learner's set, or all
    if command == "setup":
        return 0
    if command == "lab":
        # JupyterLab's defaults are kept: a token, and only this machine (127.0.0.1) may connect.
        # (Running as root, e.g. in a container, JupyterLab refuses to start without --allow-root.)
        as_root = ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
        classroom_settings()  # a readable editor font, line numbers, no news prompt (binder/overrides.json)
        return run([str(BIN / "jupyter"), "lab", "notebooks/00_start_here.ipynb", "--ip=127.0.0.1", *as_root, *rest])
    if command == "execute":
        return run([str(PY), "-m", "tests.execute", *rest])
    if command == "bench":
        return run([str(PY), "-m", "benchmarks", *rest])
    if command == "site":
        setup_site()
        return run([str(PY), "docs/build.py", *rest])
    if command == "class":
        return run([str(PY), "-m", "tests.classroom_build", *rest])
    if "--other-cpu" in rest:
        rest.remove("--other-cpu")
        say("as another CPU: " + " ".join(f"{k}={v}" for k, v in OTHER_CPU.items()))
        return run([str(PY), "-m", "pytest", "-m", "kernels", "--once", *rest], OTHER_CPU)
    if "--environments" in rest:
        rest.remove("--environments")
        return run([str(PY), "-m", "pytest", "--environments", "-m", "environments", *rest])
    return run([str(PY), "-m", "pytest", *rest])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
