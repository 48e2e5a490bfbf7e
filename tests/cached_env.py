"""Environments the slow checks build once and reuse (``python3 dev.py test --environments``).

Each one lives in a folder of its own under :func:`root` (``$HOOKLAB_ENVS``, by default ``envs`` in
:func:`cache_home`, ``~/.cache/hooklab/envs``: outside the repository, so a fresh clone on the same
machine reuses it), named after what it holds and a digest of what went into it (its pins, its Python): the same pins
give the same folder, other pins another one. ``.hooklab-env`` in it, written last, says it is
complete; a build that died leaves none and is started again. A lock file keeps two test processes
from building the same environment at once. When an environment of the same name is built for new
pins, the ones not used for a day are deleted (each of them takes several GB).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable

STAMP = ".hooklab-env"
STALE_S = 24 * 3600


def cache_home() -> Path:
    """Where the tests keep what outlives a checkout (these environments, mypy's cache):
    ``$HOOKLAB_CACHE``, by default ``~/.cache/hooklab``."""
    return Path(os.environ.get("HOOKLAB_CACHE") or Path.home() / ".cache" / "hooklab")


def root() -> Path:
    return Path(os.environ.get("HOOKLAB_ENVS") or cache_home() / "envs")


def digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


def run_logged(cmd: list[str], log: Path, **kw) -> subprocess.CompletedProcess:
    """Run ``cmd`` (output captured), append it and its output to ``log``."""
    start = time.perf_counter()
    result = subprocess.run(cmd, capture_output=True, text=True, **kw)
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}   # {time.perf_counter() - start:.1f} s, exit {result.returncode}\n"
                f"{result.stdout}{result.stderr}\n")
    return result


def complete(folder: Path) -> bool:
    return (folder / STAMP).exists()


def environment(name: str, key: str, build: Callable[[Path], dict], *, where: Path | None = None) -> Path:
    """The folder of environment ``name`` built for ``key``: built by ``build(folder)`` the first
    time (it returns what the stamp records, e.g. each step's seconds), reused after that."""
    folder = where or root() / f"{name}-{key}"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process building it: wait for it, then reuse it
        stamp = folder / STAMP
        if stamp.exists() and json.loads(stamp.read_text()).get("key") == key:
            os.utime(stamp)  # last used now
            return folder
        if folder.exists():
            shutil.rmtree(folder)
        start = time.perf_counter()
        record = build(folder)
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
        stamp.write_text(json.dumps({"key": key, "build_s": round(time.perf_counter() - start, 1),
                                     "size_mb": size // 2**20, **record}))
    if where is None:
        prune(name, keep=folder)
    return folder


def prune(name: str, keep: Path) -> list[Path]:
    """Delete the other environments called ``name`` that were not used for a day."""
    gone = []
    for other in keep.parent.glob(f"{name}-*"):
        if other == keep or not other.is_dir():
            continue
        stamp = other / STAMP
        last = stamp.stat().st_mtime if stamp.exists() else other.stat().st_mtime
        if time.time() - last > STALE_S:
            shutil.rmtree(other, ignore_errors=True)
            gone.append(other)
    return gone
