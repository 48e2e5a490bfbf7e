"""Notebook helpers shared by the tests and by `python3 dev.py execute`.

    python -m tests.execute [NOTEBOOK ...]   re-executes notebooks in place (all by default)
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any, Iterator

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
SANITIZE_FILE = ROOT / "tests" / "nbval_sanitize.cfg"

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
#: Never compared (as in nbval): images, widget views (their model ids are random).
SKIP_MIME = {WIDGET_VIEW, "image/png", "image/jpeg"}

#: Markers a code cell may carry: a comment line holding the marker alone (that is all nbval
#: recognises: `# NBVAL_IGNORE_OUTPUT: why` is NOT a marker to nbval), followed by a comment line
#: giving the reason; or the equivalent cell tag.
IGNORE = "NBVAL_IGNORE_OUTPUT"
SKIP = "NBVAL_SKIP"
RAISES = "NBVAL_RAISES_EXCEPTION"
#: The only exemption from the re-run test: the cell's lesson is that running it again changes
#: its result (gradients accumulating, a duplicate hook stacking up).
RERUN = "RERUN_CHANGES_OUTPUT"
_TAGS = {IGNORE: "nbval-ignore-output", SKIP: "nbval-skip", RAISES: "raises-exception", RERUN: "rerun-changes-output"}


def notebooks() -> list[Path]:
    """Every notebook under notebooks/, in order."""
    return sorted(p for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def code_cells(nb: nbformat.NotebookNode) -> Iterator[tuple[int, nbformat.NotebookNode]]:
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            yield i, cell


def _comment(line: str) -> str | None:
    line = line.strip()
    return line.lstrip("#").strip() if line.startswith("#") else None


def has_marker(cell: nbformat.NotebookNode, marker: str) -> bool:
    """Whether the cell carries the marker exactly as nbval reads it (alone on a comment line) or as a tag."""
    return any(_comment(line) == marker for line in cell.source.splitlines()) or \
        _TAGS[marker] in cell.metadata.get("tags", [])


def malformed_markers(cell: nbformat.NotebookNode) -> list[str]:
    """Comment lines that look like a marker but that nbval would not recognise (text after it)."""
    return [line.strip() for line in cell.source.splitlines()
            if (c := _comment(line)) is not None and re.match(rf"({'|'.join(_TAGS)})\b", c) and c not in _TAGS]


def marker_reason(cell: nbformat.NotebookNode, marker: str) -> str:
    """The reason: the comment line right after the ``# MARKER`` line or, for a cell marked by
    its tag only, the cell's first comment line."""
    lines = cell.source.splitlines()
    for i, line in enumerate(lines):
        if _comment(line) == marker:
            return (_comment(lines[i + 1]) or "") if i + 1 < len(lines) else ""
    if _TAGS[marker] in cell.metadata.get("tags", []):
        return next((c for line in lines if (c := _comment(line))), "")
    return ""


def sanitize_patterns() -> list[tuple[str, str]]:
    """The (regex, replacement) pairs of the nbval sanitize file, read the way nbval reads it."""
    return re.findall(r"^regex: (.*)$\n^replace: (.*)$", SANITIZE_FILE.read_text(), flags=re.M)


def named_sanitize_patterns() -> dict[str, tuple[str, str]]:
    """The same pairs by the name each has in the file (the ``[name]`` line above it)."""
    named, name = {}, None
    lines = SANITIZE_FILE.read_text().splitlines()
    for line, after in zip(lines, lines[1:] + [""]):
        if re.fullmatch(r"\[(.+)\]", line):
            name = line[1:-1]
        elif line.startswith("regex: ") and after.startswith("replace: "):
            assert name and name not in named, f"{SANITIZE_FILE.name}: every pattern needs a [name] of its own"
            named[name] = (line[len("regex: "):], after[len("replace: "):])
    return named


def sanitize(text: str, patterns: list[tuple[str, str]] | None = None) -> str:
    """``text`` as nbval compares it: every sanitize pattern applied (per-run figures masked)."""
    for regex, repl in sanitize_patterns() if patterns is None else patterns:
        text = re.sub(regex, repl, text)
    return text


def normalise(outputs: list[Any], patterns: list[tuple[str, str]]) -> dict[str, list[Any]]:
    """Outputs flattened the way nbval compares them: by key (stream name, MIME type, error
    name/value), sanitized, images and widget views dropped."""

    def clean(value: Any) -> Any:
        if isinstance(value, list):
            value = "".join(value)
        return sanitize(value, patterns) if isinstance(value, str) else value

    out: dict[str, list[Any]] = {}
    streams: dict[str, str] = {}
    for o in outputs:
        kind = o["output_type"]
        if kind == "stream":
            streams[o["name"]] = streams.get(o["name"], "") + "".join(o["text"])
        elif kind in ("execute_result", "display_data"):
            for mime, value in o["data"].items():
                if mime not in SKIP_MIME:
                    out.setdefault(mime, []).append(clean(value))
        elif kind == "error":
            out.setdefault("error", []).append((o["ename"], clean(o["evalue"])))
    for name, text in streams.items():
        out[name] = [clean(text)]
    return out


def client_for(nb: nbformat.NotebookNode, timeout: int = 300) -> NotebookClient:
    # coalesce_streams: a print stored as one output, as JupyterLab shows it, however the kernel's messages split it
    return NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True, coalesce_streams=True,
                          record_timing=False, resources={"metadata": {"path": str(NOTEBOOKS)}})


def tag_error_cells(nb: nbformat.NotebookNode) -> None:
    """Turn a ``# NBVAL_RAISES_EXCEPTION`` comment line into the ``raises-exception`` cell tag.

    JupyterLab's Run All stops at a cell that raises unless it carries that tag, and nbval warns
    when a cell has both; the tag is what works everywhere, and learners never see it. The
    reason stays in the cell as its first comment line.
    """
    for _, cell in code_cells(nb):
        lines = cell.source.splitlines()
        if any(_comment(line) == RAISES for line in lines):
            cell.source = "\n".join(line for line in lines if _comment(line) != RAISES)
            tags = cell.metadata.setdefault("tags", [])
            if _TAGS[RAISES] not in tags:
                tags.append(_TAGS[RAISES])


def strip_for_storage(nb: nbformat.NotebookNode) -> None:
    """What is stored: no widget views (their models die with the kernel, and JupyterLab would
    show "Error displaying widget" on opening: the panel's HTML snapshot shows instead), no
    saved widget state, no run-specific metadata."""
    nb.metadata.pop("widgets", None)
    for _, cell in code_cells(nb):
        cell.metadata.pop("execution", None)
        for o in cell.outputs:
            if o.get("output_type") in ("display_data", "execute_result"):
                o["data"].pop(WIDGET_VIEW, None)


def execute(path: Path) -> float:
    """Re-run a notebook top to bottom in a fresh kernel and store its outputs; return seconds."""
    nb = read(path)
    tag_error_cells(nb)
    start = time.perf_counter()
    client_for(nb).execute()
    seconds = time.perf_counter() - start
    errors = [(i, o["ename"]) for i, c in code_cells(nb) for o in c.outputs
              if o["output_type"] == "error" and not has_marker(c, RAISES)]
    if errors:
        raise RuntimeError(f"{path.name}: unexpected errors in cells {errors}; not saved.")
    strip_for_storage(nb)
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    nbformat.write(nb, path)
    return seconds
