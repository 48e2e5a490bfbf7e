"""The oldest torch pyproject.toml accepts, for real: every notebook run there, errors only.

    python -m tests.oldest_torch --build           build (or reuse) the environment and say where it is
    python -m tests.oldest_torch [NOTEBOOK ...]    run the notebooks there (all by default), print the
                                                   cells that raised where no error is meant
    python -m tests.oldest_torch --torch 2.6.0 --torchvision 0.21.0 [...]
                                                   the same with another release (how the floor was found)

The environment is what a hosted notebook service that is a few releases behind gives a learner:
Python 3.12, :data:`TORCH` and :data:`TORCHVISION` (the oldest pair pyproject.toml accepts),
ipywidgets 7.7.1 (the oldest it accepts), and the notebooks' other packages at requirements.txt's
pins. It is built once (several minutes: PyPI's torch is a CUDA build of several GB) and reused
while those pins do not change (tests/cached_env.py says where it is kept). hooklab is installed
for each run as a notebook's install cell installs it, ``pip install --no-deps``, from a copy of
this repository, into a folder of its own: the cached environment never holds it.

Each notebook runs top to bottom in a fresh kernel. Its outputs are not compared (another release
prints other digits); a cell that raises counts unless it is marked ``NBVAL_RAISES_EXCEPTION``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The oldest pair pyproject.toml accepts (``torch>=`` and ``torchvision>=`` name their minor releases).
TORCH = "2.5.1"
TORCHVISION = "0.20.1"
IPYWIDGETS = "7.7.1"
PYTHON = "3.12"
#: The notebooks' other packages, at requirements.txt's pins.
OTHERS = ["matplotlib", "numpy", "pillow", "ipykernel", "nbclient", "nbformat"]
MARK = "HOOKLAB-OLDEST "


def python_path(version: str = PYTHON) -> Path | None:
    """A Python ``version`` interpreter on this machine (pyenv's, or one on PATH), or None."""
    found = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python")))
    if found:
        return Path(found[-1])
    on_path = shutil.which(f"python{version}")
    return Path(on_path) if on_path else None


def pins(torch: str = TORCH, torchvision: str = TORCHVISION) -> list[str]:
    from .binder_env import read_pins

    root = read_pins(ROOT / "requirements.txt")
    return [f"torch=={torch}", f"torchvision=={torchvision}", f"ipywidgets=={IPYWIDGETS}",
            *(f"{name}=={root[name]}" for name in OTHERS)]


def environment(torch: str = TORCH, torchvision: str = TORCHVISION, python: Path | None = None) -> Path:
    """The environment (built once per set of pins and Python release, then reused)."""
    from . import cached_env

    python = python or python_path()
    if python is None:
        raise RuntimeError(f"no Python {PYTHON} here (pyenv install {PYTHON} makes one)")
    release = subprocess.run([str(python), "-c", "import sys; print(sys.version.split()[0])"], check=True,
                             capture_output=True, text=True).stdout.strip()
    wanted = pins(torch, torchvision)

    def build(folder: Path) -> dict:
        subprocess.run([str(python), "-m", "venv", str(folder)], check=True)
        log = folder / "build.log"
        result = cached_env.run_logged([str(folder / "bin" / "python"), "-m", "pip", "install", "--no-cache-dir",
                                        "--disable-pip-version-check", *wanted], log, timeout=3600)
        if result.returncode != 0:
            raise RuntimeError(f"building the oldest-torch environment failed; see {log}:\n{result.stderr[-3000:]}")
        return {"python": release, "pins": wanted}

    return cached_env.environment(f"torch-{torch}-py{release}", cached_env.digest(release, *wanted), build)


def install_hooklab(env: Path, target: Path) -> Path:
    """hooklab as the install cell installs it (``pip install --no-deps``), from a copy of this
    repository, into ``target`` (a folder that goes on the kernel's PYTHONPATH)."""
    from .binder_env import repository_copy

    with tempfile.TemporaryDirectory() as tmp:
        source = repository_copy(Path(tmp) / "hooklab")
        subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-cache-dir",
                        "--disable-pip-version-check", "--target", str(target), str(source)],
                       check=True, capture_output=True, text=True)
    return target


def run_here(paths: list[Path]) -> dict[str, list[list]]:
    """Run in the environment's Python: each notebook in a fresh kernel, its unexpected errors
    as ``[cell index, execution count, exception name, last line of its message]``."""
    import nbformat
    from nbclient import NotebookClient

    from .nbtools import RAISES, code_cells, has_marker

    found: dict[str, list[list]] = {}
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        try:
            NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                           resources={"metadata": {"path": str(path.parent)}}).execute()
        except Exception as exc:  # a cell timed out or the kernel died: that counts too
            found[path.name] = [[None, None, type(exc).__name__, str(exc)[:500]]]
            continue
        found[path.name] = [[i, cell.execution_count, o["ename"], (o["evalue"].strip().splitlines() or [""])[-1][:300]]
                            for i, cell in code_cells(nb) if not has_marker(cell, RAISES)
                            for o in cell.outputs if o["output_type"] == "error"]
    return found


def run(env: Path, hooklab_dir: Path, paths: list[Path], timeout: int = 3600) -> dict[str, list[list]]:
    """The notebooks run by the environment's Python and kernel, hooklab from ``hooklab_dir``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "JUPYTER", "CONDA"))}
    clean.update(PATH=f"{env / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", VIRTUAL_ENV=str(env),
                 PYTHONPATH=str(hooklab_dir), PYTHONUTF8="1")
    # the runner itself is this module, imported from a copy of tests/ (nothing of hooklab's source
    # on the kernel's path: the kernel starts in notebooks/ and imports the installed copy)
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(ROOT / "tests", Path(tmp) / "tests",
                        ignore=shutil.ignore_patterns("__pycache__", "screenshots"))
        code = (f"import json, sys; from pathlib import Path; from tests.oldest_torch import run_here, MARK; "
                f"print(MARK + json.dumps(run_here([Path(p) for p in {[str(p) for p in paths]!r}])))")
        result = subprocess.run([str(env / "bin" / "python"), "-c", code], cwd=tmp, env=clean, capture_output=True,
                                text=True, timeout=timeout)
    lines = [line for line in result.stdout.splitlines() if line.startswith(MARK)]
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"running the notebooks failed ({result.returncode}):\n{result.stdout[-2000:]}"
                           f"\n{result.stderr[-4000:]}")
    return json.loads(lines[-1][len(MARK):])


def versions(env: Path, hooklab_dir: Path) -> dict[str, str]:
    """What the kernel would import: the releases of torch, torchvision, ipywidgets, hooklab's path."""
    code = ("import json, sys, torch, torchvision, ipywidgets, hooklab; print(json.dumps({'python': "
            "sys.version.split()[0], 'torch': torch.__version__, 'torchvision': torchvision.__version__, "
            "'ipywidgets': ipywidgets.__version__, 'hooklab': hooklab.__file__}))")
    env_vars = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    result = subprocess.run([str(env / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True,
                            env={**env_vars, "PYTHONPATH": str(hooklab_dir)}, cwd=tempfile.gettempdir())
    return json.loads(result.stdout)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.oldest_torch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--torch", default=TORCH)
    parser.add_argument("--torchvision", default=TORCHVISION)
    parser.add_argument("--build", action="store_true", help="only build (or reuse) the environment")
    parser.add_argument("notebooks", nargs="*", type=Path)
    args = parser.parse_args(argv)
    env = environment(args.torch, args.torchvision)
    print(f"environment: {env} {(env / '.hooklab-env').read_text()}", flush=True)
    if args.build:
        return 0
    from .nbtools import notebooks

    paths = [p.resolve() for p in args.notebooks] or notebooks()
    with tempfile.TemporaryDirectory() as tmp:
        target = install_hooklab(env, Path(tmp) / "hooklab")
        print(json.dumps(versions(env, target)), flush=True)
        errors = run(env, target, paths)
    for name, found in errors.items():
        print(f"{name}: {len(found)} unexpected error(s)", *(f"\n  cell {c[0]} [{c[1]}] {c[2]}: {c[3]}" for c in found))
    return 1 if any(errors.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
