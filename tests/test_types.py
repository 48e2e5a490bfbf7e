"""Typed means checked: mypy over the hooklab package (configuration in pyproject.toml).

mypy keeps what it learnt about each module in a cache outside the checkout (``$HOOKLAB_CACHE/mypy``,
by default ``~/.cache/hooklab/mypy``), so a fresh clone on a machine that ran the tests before checks
in a second or two instead of half a minute. A module whose file changed in any way is checked
again (mypy compares each file's size, time and hash with what the cache recorded), and a module's
errors are kept in the cache and reported again, so the cache only saves work, never an error.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .cached_env import cache_home

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_finds_no_error_in_hooklab():
    # a file per module, each replaced whole (not SQLite, which two checkouts at once could lock)
    result = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache_home() / "mypy"),
                             "--no-sqlite-cache"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, f"mypy found errors:\n{result.stdout}{result.stderr}"
    assert "no issues found" in result.stdout
