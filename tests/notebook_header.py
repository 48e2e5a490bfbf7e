"""The header every notebook starts with, written from pyproject.toml (re-runnable).

    python -m tests.notebook_header            rewrite the header of every notebook, then
                                               re-execute them: python3 dev.py execute
    python -m tests.notebook_header --check    say which notebooks differ (exit 1), change nothing

The header is two cells:

1. the title cell (Markdown) keeps its text; its launch line is rewritten: Binder, Colab, Kaggle
   and SageMaker Studio Lab, each opening this notebook;
2. a code cell right after it that installs hooklab where it is missing (the hosted services)
   and prints nothing where hooklab is installed (here, Binder, a learner's clone), then
   ``hooklab.recorded_with(torch=...)``, which prints one line when the installed torch is not
   the release that recorded the stored outputs.

Everything comes from one place each:

* the repository: ``[project.urls] Repository`` in pyproject.toml;
* the ref the hosted services open and install: the release tag ``v<version>`` (pyproject's
  ``version``). The notebook a service opens and the hooklab it installs come from the same tag,
  so they always fit each other. Making a release: bump ``version``, run this script, run
  ``python3 dev.py execute``, commit, tag ``v<version>``, push the tag. Binder builds hooklab
  from the commit it opens, so its links keep ``HEAD``;
* the torch release the outputs were recorded with: the ``torch==`` pin of requirements-lab.txt
  (which requirements.txt includes).
"""

from __future__ import annotations

import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import nbformat

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
REQUIREMENTS = ROOT / "requirements-lab.txt"

BINDER_BADGE = "https://mybinder.org/badge_logo.svg"
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
KAGGLE_BADGE = "https://kaggle.com/static/images/open-in-kaggle.svg"
STUDIO_LAB_BADGE = "https://studiolab.sagemaker.aws/studiolab.svg"

#: The first line of the install cell.
INSTALL_FIRST_LINE = "# Colab, Kaggle, SageMaker Studio Lab: installs hooklab if it is missing."


# ---------------------------------------------------------------------- the project
def project() -> dict:
    return tomllib.loads(PYPROJECT.read_text())["project"]


def repository_url() -> str:
    """``[project.urls] Repository`` of pyproject.toml: ``https://github.com/OWNER/NAME``."""
    url = project().get("urls", {}).get("Repository", "")
    if not re.fullmatch(r"https://github\.com/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", url):
        raise ValueError(f"pyproject.toml: [project.urls] Repository must be https://github.com/OWNER/NAME, "
                         f"not {url!r} (launch links and install cells are built from it).")
    return url


def slug() -> str:
    """``OWNER/NAME`` of the repository."""
    return urlparse(repository_url()).path.strip("/")


def release_ref() -> str:
    """The tag the hosted services open and install from: ``v`` + pyproject's version."""
    return f"v{project()['version']}"


def recorded_torch() -> str:
    """The torch release the stored outputs come from: requirements-lab.txt's pin."""
    m = re.search(r"^torch==(\S+)\s*$", REQUIREMENTS.read_text(), re.M)
    if not m:
        raise ValueError("requirements-lab.txt does not pin torch (`torch==X.Y.Z`)")
    return m.group(1)


def slug_from_remote(url: str) -> str | None:
    """``OWNER/NAME`` of a GitHub remote (https or ssh form), None for anything else."""
    m = re.fullmatch(r"(?:https://(?:[^@/]+@)?github\.com/|git@github\.com:|ssh://git@github\.com/)"
                     r"([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+?)(?:\.git)?/?", url.strip())
    return m.group(1) if m else None


# ---------------------------------------------------------------------- links
@dataclass(frozen=True)
class Links:
    binder: str
    colab: str
    kaggle: str
    studio_lab: str


def links(notebook: str, *, repo: str | None = None, ref: str | None = None) -> Links:
    """Where each service opens ``notebooks/<notebook>``."""
    repo, ref = repo or slug(), ref or release_ref()
    blob = f"{repo}/blob/{ref}/notebooks/{notebook}"
    return Links(
        binder=f"https://mybinder.org/v2/gh/{repo}/HEAD?urlpath=lab/tree/notebooks/{notebook}",
        colab=f"https://colab.research.google.com/github/{blob}",
        kaggle=f"https://kaggle.com/kernels/welcome?src=https://github.com/{blob}",
        studio_lab=f"https://studiolab.sagemaker.aws/import/github/{blob}",
    )


def site_url() -> str:
    """Where GitHub Pages publishes the course's site (.github/workflows/pages.yml):
    ``https://OWNER.github.io/NAME/``."""
    owner, name = slug().split("/")
    return f"https://{owner.lower()}.github.io/{name}/"


def launch_line(notebook: str) -> str:
    """The badges of the title cell, on one line."""
    url = links(notebook)
    return " ".join([
        f"[![Open this notebook on Binder]({BINDER_BADGE})]({url.binder})",
        f"[![Open in Colab]({COLAB_BADGE})]({url.colab})",
        f"[![Open in Kaggle]({KAGGLE_BADGE})]({url.kaggle})",
        f"[![Open in SageMaker Studio Lab]({STUDIO_LAB_BADGE})]({url.studio_lab})",
    ])


# ---------------------------------------------------------------------- the install cell
def install_source(*, repository: str | None = None, ref: str | None = None) -> str:
    """The install cell. ``--no-deps``: every service ships torch, torchvision, ipywidgets and
    matplotlib, and nothing of theirs is replaced (pip would otherwise upgrade what hooklab's
    requirements allow it to)."""
    target = f"git+{repository or repository_url()}@{ref or release_ref()}"
    return "\n".join([
        INSTALL_FIRST_LINE,
        "# Only hooklab: the service's own torch and ipywidgets stay as they are.",
        "try:",
        "    import hooklab",
        "except ImportError:",
        f'    %pip install -q --no-deps "hooklab @ {target}"',
        "    import hooklab",
        f'hooklab.recorded_with(torch="{recorded_torch()}")  # one line if your torch is another release',
    ])


# ---------------------------------------------------------------------- applying it
_BADGE_LINE = re.compile(r"^\[!\[[^\]]*\]\(https://mybinder\.org/badge_logo\.svg\)\].*$", re.M)


def _title_cell(source: str, notebook: str) -> str:
    line = launch_line(notebook)
    if _BADGE_LINE.search(source):
        return _BADGE_LINE.sub(lambda _: line, source, count=1)
    title, _, rest = source.partition("\n")  # no launch line yet: right under the title
    return f"{title}\n\n{line}\n" + rest


def is_install_cell(cell: nbformat.NotebookNode) -> bool:
    """The install cell, also as an older version of this script wrote it."""
    return cell.cell_type == "code" and (cell.source.startswith(INSTALL_FIRST_LINE) or
                                         ("%pip install" in cell.source and "hooklab @ git+" in cell.source))


def apply(nb: nbformat.NotebookNode, notebook: str) -> bool:
    """Rewrite the header of ``nb`` in place; True when something changed."""
    if not nb.cells or nb.cells[0].cell_type != "markdown" or not nb.cells[0].source.startswith("# "):
        raise ValueError(f"{notebook}: the first cell must be the Markdown title (`# NN · ...`)")
    changed = False
    title = _title_cell(nb.cells[0].source, notebook)
    if title != nb.cells[0].source:
        nb.cells[0].source, changed = title, True
    source = install_source()
    second = nb.cells[1] if len(nb.cells) > 1 else None
    if second is not None and is_install_cell(second):
        if second.source != source:
            second.source, second.outputs, second.execution_count, changed = source, [], None, True
    else:
        nb.cells.insert(1, nbformat.v4.new_code_cell(source))
        changed = True
    return changed


def header_problems(nb: nbformat.NotebookNode, notebook: str) -> list[str]:
    """What differs from the header this script writes (empty: up to date)."""
    import copy

    fresh = copy.deepcopy(nb)
    try:
        if not apply(fresh, notebook):
            return []
    except ValueError as exc:
        return [str(exc)]
    problems = []
    if fresh.cells[0].source != nb.cells[0].source:
        problems.append("the launch line of the title cell is not the one pyproject.toml gives")
    if len(nb.cells) < 2 or nb.cells[1].source != fresh.cells[1].source:
        problems.append("the cell after the title is not the install cell pyproject.toml and requirements-lab.txt give")
    return problems


def main(argv: list[str]) -> int:
    from .nbtools import notebooks, read

    check = "--check" in argv
    changed = []
    for path in notebooks():
        nb = read(path)
        if check:
            problems = header_problems(nb, path.name)
            if problems:
                changed.append(path.name)
                print(f"{path.name}: " + "; ".join(problems))
        elif apply(nb, path.name):
            nbformat.write(nb, path)
            changed.append(path.name)
            print(f"{path.name}: header rewritten")
    if check:
        if changed:
            print("run `python -m tests.notebook_header`, then `python3 dev.py execute`")
        return 1 if changed else 0
    if changed:
        print("now re-execute them: python3 dev.py execute " + " ".join(f"notebooks/{n}" for n in changed))
    else:
        print("every header is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
