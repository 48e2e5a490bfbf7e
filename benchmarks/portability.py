"""Do the notebooks' stored outputs hold for other trained models and other CPU kernels?

A trained model's digits change with the machine (other float kernels, another thread count):
that is why the notebooks print claims that hold everywhere and mark per-run figures with ``≈``
(:mod:`hooklab.claims`), which the tests mask. ``python3 dev.py test`` and
``python3 dev.py test --other-cpu`` check the stored outputs for the notebooks' own seed on two
kernel sets. This section goes further: it executes every notebook that trains a model with
*other* seeds (:data:`hooklab.course.shapes.SEED`), each under this CPU's kernels and under the other
kernel set of ``dev.py test --other-cpu``, and compares every checked output, sanitized as nbval
compares it, with the stored one. Another seed is a harsher test than another CPU: it changes the
initial weights and the batch order, not only the last bits of each sum.

Floor: no checked cell differs, for any seed on either kernel set.

Run alone: ``python -m benchmarks.portability notebooks/06_training_diagnostics.ipynb 3`` executes
one notebook with one seed here and prints the differing cells as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: The notebooks whose outputs come from trained models (the others train nothing).
TRAINED = ("06", "07")
#: Seeds other than the notebooks' own 0 (and than 1 and 2, which notebook 07 trains by name).
SEEDS = (3, 4, 5)
KERNEL_SETS = ("this CPU", "other CPU")


def other_cpu_env() -> dict[str, str]:
    import importlib.util
    spec = importlib.util.spec_from_file_location("dev", ROOT / "dev.py")
    dev = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(dev)
    return dict(dev.OTHER_CPU)


def differences(path: Path, seed: int) -> dict[str, Any]:
    """Execute the notebook at ``path`` with ``hooklab.course.shapes.SEED = seed`` in a fresh kernel (in
    this process's environment) and list the checked cells whose sanitized output differs from the
    stored one."""
    import nbformat

    from tests.nbtools import IGNORE, SKIP, client_for, code_cells, has_marker, normalise, read, sanitize_patterns, \
        tag_error_cells

    stored, nb = read(path), read(path)
    tag_error_cells(nb)
    nb.cells.insert(0, nbformat.v4.new_code_cell(f"import hooklab.course.shapes\nhooklab.course.shapes.SEED = {seed}"))
    started = time.perf_counter()
    client_for(nb).execute()
    patterns = sanitize_patterns()
    differing = []
    for index, cell in code_cells(stored):
        if has_marker(cell, SKIP) or has_marker(cell, IGNORE):
            continue
        want, got = normalise(cell.outputs, patterns), normalise(nb.cells[index + 1].outputs, patterns)
        if want != got:
            differing.append({"cell": index, "stored": want, "this run": got})
    return {"notebook": path.name, "seed": seed, "seconds": time.perf_counter() - started, "differing": differing}


def _one(number: str, seed: int, kernel_set: str) -> dict[str, Any]:
    from tests.nbtools import notebooks
    path = next(p for p in notebooks() if p.name.startswith(number))
    env = dict(os.environ, PYTHONUTF8="1", **(other_cpu_env() if kernel_set == "other CPU" else {}))
    out = subprocess.run([sys.executable, "-m", "benchmarks.portability", str(path), str(seed)], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    if out.returncode != 0:
        return {"notebook": number, "seed": seed, "seconds": 0.0,
                "differing": [{"cell": None, "error": out.stderr[-2000:]}], "kernels": kernel_set}
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "kernels": kernel_set}


def run(notebooks: tuple[str, ...] = TRAINED, seeds: tuple[int, ...] = SEEDS,
        kernel_sets: tuple[str, ...] = KERNEL_SETS) -> dict[str, Any]:
    """Every notebook x seed x kernel set, two at a time (each notebook trains on one thread)."""
    jobs = [(n, s, k) for n in notebooks for s in seeds for k in kernel_sets]
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = list(pool.map(lambda job: _one(*job), jobs))
    return {"seeds": list(seeds), "kernel_sets": list(kernel_sets), "runs": runs,
            "ok": all(not r["differing"] for r in runs)}


def floors(result: dict[str, Any]) -> list[tuple[str, str, bool]]:
    bad = sum(len(r["differing"]) for r in result["runs"])
    return [(f"notebooks {', '.join(sorted({r['notebook'][:2] for r in result['runs']}))} with seeds "
             f"{', '.join(map(str, result['seeds']))} on {' and '.join(result['kernel_sets'])}: checked cells that "
             "differ from the stored outputs = 0", str(bad), bad == 0)]


def markdown(result: dict[str, Any]) -> list[str]:
    lines = ["", "## Portable outputs: other seeds, other kernels", "",
             "Each notebook that trains a model, executed with `hooklab.course.shapes.SEED` set to another seed (other "
             "initial weights, another batch order), once with this CPU's kernels and once with the other kernel "
             "set of `python3 dev.py test --other-cpu`; every checked output compared with the stored one as nbval "
             "compares it (per-run figures marked `≈` masked, every claim compared).", "",
             "| notebook | seed | kernels | seconds | checked cells that differ |", "| --- | --- | --- | --- | --- |"]
    for r in result["runs"]:
        cells = ", ".join(str(d["cell"]) for d in r["differing"]) or "none"
        lines.append(f"| {r['notebook']} | {r['seed']} | {r['kernels']} | {r['seconds']:.1f} | {cells} |")
    return lines


if __name__ == "__main__":
    print(json.dumps(differences(Path(sys.argv[1]), int(sys.argv[2]))))
