"""Build the course's static site: ``python3 dev.py site`` (which installs requirements-site.txt first).

    python3 dev.py site            build _site/ from the stored notebooks (nothing is executed)

Sphinx reads a staged copy of the sources in build/site/src/, made here from the files that the
repository keeps elsewhere, so that each fact has one home:

* every ``notebooks/*.ipynb``, in file-name order (a new notebook becomes a page by itself), with
  three changes: the title cell's launch badges (images on the services' sites) become launch
  buttons that the site serves itself, with the URLs ``tests/notebook_header.py`` derives from
  ``[project.urls] Repository``; each live lab's stored view (the panel's HTML snapshot) gets a
  frame and a line saying it is live when the notebook runs; a cell the notebook shows collapsed
  (``jupyter.source_hidden`` / ``outputs_hidden``) is collapsed on the page too;
* README.md (the landing page includes parts of it) and TEACHING.md, with links to files that are
  not pages turned into links to the repository at the release tag;
* docs/*.md: the landing page and the API reference.

Sphinx writes to build/site/ (its HTML, its cache, and myst-nb's pictures beside them), and the HTML
is then copied to _site/ (git-ignored), what is published. Extra arguments go to sphinx-build
(``-v``, ``-E``...).
"""

from __future__ import annotations

import html
import re
import shutil
import sys
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import notebook_header as header  # noqa: E402  (the one place launch links come from)

DOCS = ROOT / "docs"
WORK = ROOT / "build" / "site"  # myst-nb puts its files beside Sphinx's output folder: all in here
STAGE, DOCTREES, HTML = WORK / "src", WORK / "doctrees", WORK / "html"
OUT = ROOT / "_site"

#: What a panel's stored HTML snapshot says (hooklab/lab/panel.py, Panel._repr_mimebundle_): how a
#: lab's stored view is told apart from other HTML outputs. The site test fails when none is found.
SNAPSHOT_MARK = "(a live panel: run the notebook to use its controls)"
LIVE_NOTE = ("This is the lab's view as the notebook stores it. Its controls are live when the notebook runs: "
             "open it with one of the buttons at the top of this page.")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
SERVICES = (("binder", "Binder"), ("colab", "Colab"), ("kaggle", "Kaggle"), ("studio_lab", "SageMaker Studio Lab"))


def launch_buttons(notebook: str) -> str:
    """The launch buttons of a notebook page: plain links, no images from the services' sites."""
    links = header.links(notebook)
    buttons = "".join(f'<a class="hooklab-launch-button" data-service="{key}" '
                      f'href="{html.escape(getattr(links, key))}">{label}</a>' for key, label in SERVICES)
    return f'<div class="hooklab-launch"><span>Run this notebook on</span>{buttons}</div>'


def snapshot(html_text: str) -> str:
    return (f'<div class="hooklab-lab-snapshot">{html_text}'
            f'<p class="hooklab-live-note">{html.escape(LIVE_NOTE)}</p></div>')


def stage_notebook(path: Path, target: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    title = nb.cells[0]
    line = header.launch_line(path.name)
    if line not in title.source:
        raise SystemExit(f"{path.name}: the title cell has no launch line; run `python -m tests.notebook_header`")
    title.source = title.source.replace(line, launch_buttons(path.name))
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        hidden = cell.metadata.get("jupyter", {})
        tags = cell.metadata.setdefault("tags", [])
        tags += [tag for key, tag in (("source_hidden", "hide-input"), ("outputs_hidden", "hide-output"))
                 if hidden.get(key) and tag not in tags]
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            data.pop(WIDGET_VIEW, None)  # no widget state is stored: the HTML snapshot beside it shows instead
            if SNAPSHOT_MARK in data.get("text/html", ""):
                data["text/html"] = snapshot(data["text/html"])
    nbformat.write(nb, target)


_LINK = re.compile(r"\]\((?!https?://|#|mailto:)([^)\s#]+)(#[^)\s]*)?\)")
#: A line of badges only (``[![alt](image)](link) ...``): images on the services' sites.
_BADGES = re.compile(r"^(?:\[!\[[^\]]*\]\([^)]*\)\]\([^)]*\)\s*)+\n", re.M)


def stage_markdown(path: Path, target: Path, pages: set[str]) -> None:
    """A copy without badge lines, whose links to files that are not pages of the site point to the
    repository instead."""
    base = f"{header.repository_url()}/blob/{header.release_ref()}/"

    def fix(m: re.Match[str]) -> str:
        link, anchor = m.group(1), m.group(2) or ""
        return m.group(0) if link in pages else f"]({base}{link}{anchor})"

    target.write_text(_LINK.sub(fix, _BADGES.sub("", path.read_text())))


def stage() -> None:
    shutil.rmtree(STAGE, ignore_errors=True)
    (STAGE / "notebooks").mkdir(parents=True)
    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
    for path in notebooks:
        stage_notebook(path, STAGE / "notebooks" / path.name)
    pages = {f"notebooks/{p.name}" for p in notebooks} | {"TEACHING.md"}
    for name in ("README.md", "TEACHING.md"):
        stage_markdown(ROOT / name, STAGE / name, pages)
    for page in DOCS.glob("*.md"):
        shutil.copy2(page, STAGE / page.name)


def main(argv: list[str]) -> int:
    from sphinx.cmd.build import build_main

    start = time.time()
    stage()
    # -W: a warning (a broken cross-reference, a missing image, a docstring Sphinx cannot read) fails the build
    code = build_main(["-b", "html", "-c", str(DOCS), "-d", str(DOCTREES), "-W", "--keep-going", "-q",
                       *argv, str(STAGE), str(HTML)])
    if code == 0:
        # the download button offers each notebook as the repository stores it, not the staged copy
        for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
            shutil.copy2(path, HTML / "_sources" / "notebooks" / path.name)
        shutil.rmtree(OUT, ignore_errors=True)
        shutil.copytree(HTML, OUT, ignore=shutil.ignore_patterns(".buildinfo", ".doctrees"))
        print(f"[site] built {OUT.relative_to(ROOT)}/ in {time.time() - start:.0f} s: open {OUT / 'index.html'}")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
