"""Sphinx configuration of the course's site (built by docs/build.py: ``python3 dev.py site``).

Why Sphinx with myst-nb and sphinx-book-theme: myst-nb renders a notebook's stored outputs as they
are (``nb_execution_mode = "off"``: nothing runs), HTML outputs such as the labs' snapshots and the
collapsed worked solutions included, and parses the Markdown cells in Python, so the build needs
nothing but pip packages (nbsphinx converts Markdown with pandoc, a separate program). The book
theme is made for notebooks read as a course: one page per notebook in a sidebar, a search page
that works without a server, a light and a dark mode, and a layout for phones. Everything the
pages load (scripts, styles, fonts) is served from the site itself.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import notebook_header as header  # noqa: E402

project = "hooklab"
author = "the hooklab authors"
copyright = "the hooklab authors; code MIT, notebooks CC BY 4.0"
release = header.project()["version"]

extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]  # napoleon: the docstrings' "Args:"
exclude_patterns = ["README.md"]  # only included, in parts, by the landing page
nb_execution_mode = "off"  # the site shows the stored outputs; no notebook runs
nb_ipywidgets_js: dict = {}  # no widget manager from a CDN: the panels' HTML snapshots show instead
nb_merge_streams = True
myst_heading_anchors = 3
suppress_warnings = ["myst.header"]  # a notebook's sections may skip a heading level

autodoc_member_order = "bysource"
autodoc_typehints = "description"

html_theme = "sphinx_book_theme"
html_title = "hooklab"
html_static_path = ["_static"]
html_css_files = ["hooklab-site.css"]
html_last_updated_fmt = None
html_show_sourcelink = False
# the light or dark mode follows the reader's system until the switch in the header says otherwise
html_context = {"default_mode": "auto"}
html_theme_options = {
    "repository_url": header.repository_url(),
    "repository_branch": header.release_ref(),
    "path_to_docs": "",
    "use_repository_button": True,
    "use_download_button": True,
    "show_toc_level": 2,
    "home_page_in_toc": True,
}
