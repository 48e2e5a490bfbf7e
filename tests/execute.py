"""Re-execute notebooks in place so their stored outputs come from a real run.

    python3 dev.py execute                      every notebook
    python3 dev.py execute notebooks/01_*.ipynb  just these
"""

from __future__ import annotations

import sys
from pathlib import Path

from .nbtools import execute, notebooks


def main(argv: list[str]) -> int:
    paths = [Path(a).resolve() for a in argv] or notebooks()
    total = 0.0
    for path in paths:
        seconds = execute(path)
        total += seconds
        print(f"{path.name}: executed in {seconds:.1f} s", flush=True)
    print(f"{len(paths)} notebooks, {total:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
