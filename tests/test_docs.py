"""The README is for the people who open it; CONTRIBUTING.md holds the rest; no link between them breaks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["README.md", "CONTRIBUTING.md", "TEACHING.md"]
#: A markdown link or image whose target is in this repository (not a URL, not an anchor alone).
LOCAL_LINK = re.compile(r"!?\[[^\]]*\]\((?!https?://|mailto:|#)([^)\s]+)\)")


def test_readme_is_short_and_sends_contributors_on() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 120, f"README.md has {len(readme.splitlines())} lines (at most 120)"
    assert "(CONTRIBUTING.md)" in readme and "(TEACHING.md)" in readme
    assert "(README.md)" in (ROOT / "CONTRIBUTING.md").read_text()


@pytest.mark.parametrize("name", DOCS)
def test_every_local_link_resolves(name: str) -> None:
    text = (ROOT / name).read_text()
    targets = LOCAL_LINK.findall(text)
    assert targets, f"{name}: no local link found (is the pattern still right?)"
    broken = [t for t in targets if not (ROOT / t.split("#", 1)[0]).exists()]
    assert not broken, f"{name} links to files that do not exist: {broken}"


def test_the_link_pattern_sees_links_and_skips_urls() -> None:
    text = "[a](CONTRIBUTING.md) ![b](x/y.png) [c](https://example.org) [d](#top) [e](TEACHING.md#order)"
    assert LOCAL_LINK.findall(text) == ["CONTRIBUTING.md", "x/y.png", "TEACHING.md#order"]
