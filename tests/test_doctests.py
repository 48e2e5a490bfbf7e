"""The examples in hooklab's docstrings run and print what they say."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import hooklab

MODULES = sorted(m.name for m in pkgutil.walk_packages(hooklab.__path__, "hooklab."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.IGNORE_EXCEPTION_DETAIL)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"


def test_examples_exist_in_core_modules() -> None:
    finder = doctest.DocTestFinder()
    for name in ["hooklab.hooks", "hooklab.kinds", "hooklab.selection", "hooklab.recording", "hooklab.tracing",
                 "hooklab.inspection", "hooklab.nested", "hooklab.claims", "hooklab.callbacks", "hooklab.lab.panel", "hooklab.lab.controls",
                 "hooklab.lab.exercises", "hooklab.lab.explore", "hooklab.lab.summary", "hooklab.lab.picture",
                 "hooklab.lab.interventions"]:
        examples = sum(len(t.examples) for t in finder.find(importlib.import_module(name)))
        assert examples > 0, f"{name} has no docstring example"
