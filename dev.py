#!/usr/bin/env python3
"""Set up and run hooklab: one command each.

    python3 dev.py lab       open JupyterLab on notebooks/00_start_here.ipynb (127.0.0.1, with a token),
                             with Binder's classroom settings (binder/overrides.json)
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

Each command first creates .venv (or reuses it) and installs requirements.txt into it when that
file changed since the last install. Extra arguments go to the tool: `python3 dev.py test -k hooks`.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / ("python.exe" if os.name == "nt" else "python")
STAMP = VENV / ".hooklab-installed"
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


def requirements_digest() -> str:
    """What .venv was installed for (kept in STAMP): requirements.txt and pyproject.toml."""
    return hashlib.sha256((ROOT / "requirements.txt").read_bytes() + (ROOT / "pyproject.toml").read_bytes()).hexdigest()


def setup() -> None:
    """Create .venv and install requirements.txt (again only when it or pyproject.toml changed)."""
    if sys.version_info < (3, 10):
        sys.exit(f"hooklab needs Python 3.10 or newer (3.11 recommended); this is {sys.version.split()[0]}.")
    digest = requirements_digest()
    if PY.exists() and STAMP.exists() and STAMP.read_text() == digest:
        return
    if not PY.exists():
        say(f"creating {VENV.relative_to(ROOT)} with Python {sys.version.split()[0]}")
        venv.EnvBuilder(with_pip=True).create(VENV)
    say("installing requirements.txt (the first time takes a few minutes: PyTorch is large)")
    start = time.time()
    subprocess.run([str(PY), "-m", "pip", "install", "--disable-pip-version-check", "-q",
                    "-r", str(ROOT / "requirements.txt")], cwd=ROOT, check=True)
    STAMP.write_text(digest)
    say(f"installed in {time.time() - start:.0f} s")


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
    setup()
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
