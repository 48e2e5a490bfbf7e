"""Binder's environment, rebuilt here with pip: what tests/test_binder.py checks.

    python -m tests.binder_env --write    write tests/binder_base/ again from the installed repo2docker
    python -m tests.binder_env --build    build (or reuse) the environment and say where it is

Binder builds the repository with repo2docker. For ``binder/runtime.txt`` = ``python-3.11`` its
base environment is a conda lock file inside the jupyter-repo2docker package
(``repo2docker/buildpacks/conda/environment.py-3.11-linux-64.lock``); then it runs
``pip install --no-cache-dir -r binder/requirements.txt`` in that same environment, then
``binder/postBuild``. tests/binder_base/ holds, for the release requirements.txt pins:

* ``base-py3.11.txt``: that lock's Python packages as PyPI pins (:func:`base_pins` derives them);
* ``Dockerfile``: what ``repo2docker --no-build --debug`` generates for this repository (the
  build steps Binder runs), with this machine's paths taken out.

:func:`environment` rebuilds the base in a fresh venv with pip from ``base-py3.11.txt``, then
installs binder/requirements.txt on top, with one change: PyTorch's CPU wheel index is left out
(it cannot be reached from here), so torch and torchvision come from the default index (PyPI or
this machine's local copy of it). The result is cached outside the repository (tests/cached_env.py
says where; ``HOOKLAB_BINDER_ENV`` names another folder) and built again only when one of those
files or the Python changes (about 5 minutes; about 6 GB, because PyPI's torch brings CUDA libraries
that the CPU wheels on Binder leave out).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import venv
from pathlib import Path

from . import cached_env

ROOT = Path(__file__).resolve().parents[1]
BINDER = ROOT / "binder"
HERE = ROOT / "tests" / "binder_base"
PINS = HERE / "base-py3.11.txt"
DOCKERFILE = HERE / "Dockerfile"

#: The lock file repo2docker uses for ``python-3.11`` on linux-64 (in the package's directory).
LOCK = "buildpacks/conda/environment.py-3.11-linux-64.lock"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"

#: conda-forge names whose PyPI name differs.
RENAMED = {"brotli-python": "brotli", "cached_property": "cached-property", "python-fastjsonschema": "fastjsonschema",
           "nbconvert-core": "nbconvert", "jupyterhub-base": "jupyterhub"}
#: conda metapackages that stand for a PyPI package with extras.
EXTRAS = {"bleach-with-css": "bleach[css]", "jsonschema-with-format-nongpl": "jsonschema[format-nongpl]"}
#: conda-only packages without a Python build string that are not Python distributions: the
#: interpreter's ABI marker, data packages, and metapackages for a package listed under its other name.
NOT_ON_PYPI = {"python_abi", "tzdata", "ca-certificates", "typing-extensions", "cached-property",
               "jupyterhub-singleuser"}


# ---------------------------------------------------------------------- the base, as PyPI pins
def repo2docker_version() -> str:
    from importlib.metadata import version

    return version("jupyter-repo2docker")


def lock_text() -> str:
    import repo2docker

    return (Path(repo2docker.__file__).parent / LOCK).read_text()


def base_pins(lock: str) -> dict[str, str]:
    """``{pypi_name: version}`` for the Python packages of a conda lock (``@EXPLICIT`` URLs).

    A package counts as Python when its conda build string starts with ``py`` (``pyhd8ed1ab_0``,
    ``py311h...``): that covers noarch and compiled Python packages. Other noarch entries must be
    known (:data:`EXTRAS` or :data:`NOT_ON_PYPI`), so that a new kind of entry in a newer lock fails
    loudly instead of being dropped. Compiled non-Python packages (libraries, the interpreter,
    nodejs) are left out.

    >>> base_pins("https://conda.anaconda.org/conda-forge/noarch/notebook-7.4.7-pyhd8ed1ab_0.conda#x\\n"
    ...           "https://conda.anaconda.org/conda-forge/linux-64/libgcc-15.2.0-h767d61c_7.conda#x\\n"
    ...           "https://conda.anaconda.org/conda-forge/noarch/bleach-with-css-6.2.0-h82add2a_4.conda#x")
    {'notebook': '7.4.7', 'bleach[css]': '6.2.0'}
    """
    pins: dict[str, str] = {}
    for line in lock.splitlines():
        if not line.startswith("https://"):
            continue
        path = line.split("#", 1)[0]
        subdir, file = path.split("/")[-2:]
        stem = re.sub(r"\.(conda|tar\.bz2)$", "", file)
        name, version, build = stem.rsplit("-", 2)
        if build.startswith("py"):
            pins[RENAMED.get(name, name)] = version
        elif name in EXTRAS:
            pins[EXTRAS[name]] = version
        elif subdir == "noarch" and name not in NOT_ON_PYPI:
            raise ValueError(f"{LOCK}: don't know what the noarch package {name}-{version}-{build} is on PyPI; "
                             "add it to EXTRAS, RENAMED or NOT_ON_PYPI in tests/binder_env.py")
    return pins


def pins_file_text(pins: dict[str, str], version: str) -> str:
    head = [
        f"# The Python packages of Binder's base environment for python-3.11: repo2docker {version}'s",
        f"# repo2docker/{LOCK}, as PyPI pins.",
        "# Written by `python -m tests.binder_env --write` from the installed jupyter-repo2docker (pinned in",
        "# requirements.txt): every lock entry whose conda build is a Python build (py*), conda names mapped",
        "# to PyPI names, two metapackages as extras (tests/binder_env.py says which). The lock's interpreter",
        "# (3.11.14), libraries and nodejs are not Python distributions and are left out.",
    ]
    return "\n".join(head + [f"{name}=={v}" for name, v in sorted(pins.items(), key=lambda kv: kv[0].lower())]) + "\n"


def read_pins(path: Path = PINS) -> dict[str, str]:
    """``name==version`` lines of a requirements file and of the files it includes (``-r FILE``,
    relative to it), names normalised (lower case, ``-``)."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        included = re.fullmatch(r"(?:-r|--requirement)(?:\s+|=)(\S+)", line)
        if included:
            found.update(read_pins(path.parent / included.group(1)))
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+(?:\[[^\]]+\])?)\s*==\s*(\S+)", line)
        if m:
            found[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
    return found


# ---------------------------------------------------------------------- repo2docker, without Docker
def repository_copy(target: Path) -> Path:
    """The repository as a clone has it: the files git knows (committed or new, not ignored)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target / rel)
    return target


def generated_dockerfile(repo: Path) -> str:
    """What ``repo2docker --no-build --debug`` prints for ``repo`` (no Docker needed), with the
    paths of this machine taken out: the build steps Binder runs."""
    result = subprocess.run([sys.executable, "-m", "repo2docker", "--no-build", "--debug", "--user-id", "1000",
                             "--user-name", "jovyan", str(repo)], capture_output=True, text=True, timeout=120,
                            cwd=repo.parent)
    if result.returncode != 0:
        raise RuntimeError(f"repo2docker --no-build failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    if "Building conda environment for python=3.11" not in result.stderr:
        raise RuntimeError(f"repo2docker did not pick the Python 3.11 conda environment:\n{result.stderr}")
    dockerfile = result.stdout[result.stdout.index("FROM "):].rstrip() + "\n"  # its log goes to stderr
    # build_script_files/<this machine's site-packages path, escaped>-<hash> -> build_script_files/<file>
    dockerfile = re.sub(r"build_script_files/\S*?-2f(?:buildpacks-2f)?((?:[a-z0-9]|-2d|-2e)+)-[0-9a-f]{6}\b",
                        lambda m: "build_script_files/" + m.group(1).replace("-2d", "-").replace("-2e", "."),
                        dockerfile)
    return re.sub(r'LABEL repo2docker\.repo="[^"]*"', 'LABEL repo2docker.repo="hooklab"', dockerfile)


def dockerfile_text(dockerfile: str, version: str) -> str:
    return (f"# Generated by `repo2docker --no-build --debug --user-id 1000 --user-name jovyan` (repo2docker {version})\n"
            "# for this repository, by `python -m tests.binder_env --write`; no Docker involved. This machine's\n"
            "# paths are replaced by file names. tests/test_binder.py checks that it is current.\n\n" + dockerfile)


# ---------------------------------------------------------------------- the environment
def binder_requirements_here(target: Path) -> Path:
    """binder/requirements.txt without PyTorch's CPU index (unreachable here); nothing else changed."""
    lines = [line for line in (BINDER / "requirements.txt").read_text().splitlines()
             if line.strip() != f"--extra-index-url {CPU_INDEX}"]
    target.write_text("\n".join(lines) + "\n")
    return target


def _key() -> str:
    return cached_env.digest(PINS.read_text(), (BINDER / "requirements.txt").read_text(), sys.version)


def environment() -> Path:
    """Binder's environment without hooklab (postBuild's job), built once per change of the pins."""

    def build(folder: Path) -> dict:
        venv.EnvBuilder(with_pip=True).create(folder)
        python = folder / "bin" / "python"
        log = folder / "build.log"
        base_pip = read_pins()["pip"]
        steps = {}
        for name, cmd in [
            ("pip", [str(python), "-m", "pip", "install", "-q", f"pip=={base_pip}"]),
            ("base", [str(python), "-m", "pip", "install", "--no-cache-dir", "-r", str(PINS)]),
            ("base check", [str(python), "-m", "pip", "check"]),
            ("binder/requirements.txt", [str(python), "-m", "pip", "install", "--no-cache-dir", "-r",
                                         str(binder_requirements_here(folder / "binder-requirements-here.txt"))]),
        ]:
            start = time.perf_counter()
            result = cached_env.run_logged(cmd, log, timeout=1800)
            steps[name] = round(time.perf_counter() - start, 1)
            output = result.stdout + result.stderr
            if result.returncode != 0 or "ERROR:" in output or (name == "base check" and "No broken" not in output):
                raise RuntimeError(f"building Binder's environment: step {name!r} failed; see {log}:\n{output[-3000:]}")
        return {"seconds": steps}

    where = Path(os.environ["HOOKLAB_BINDER_ENV"]) if os.environ.get("HOOKLAB_BINDER_ENV") else None
    return cached_env.environment("binder", _key(), build, where=where)


def main(argv: list[str]) -> int:
    if "--write" in argv:
        version = repo2docker_version()
        HERE.mkdir(exist_ok=True)
        PINS.write_text(pins_file_text(base_pins(lock_text()), version))
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            repo = repository_copy(Path(tmp) / "hooklab")
            DOCKERFILE.write_text(dockerfile_text(generated_dockerfile(repo), version))
        print(f"wrote {PINS.relative_to(ROOT)} and {DOCKERFILE.relative_to(ROOT)} (repo2docker {version})")
    if "--build" in argv:
        env = environment()
        print(f"Binder's environment: {env} ({(env / cached_env.STAMP).read_text()})")
    if not {"--write", "--build"} & set(argv):
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
