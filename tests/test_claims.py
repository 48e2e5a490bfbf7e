"""Stored outputs hold on any CPU: the sanitize patterns mask only what may differ between machines,
and never a claim.

The rule (README, "Tests"): a figure that depends on the machine is printed either as a claim that
holds everywhere (``test accuracy ≥ 90%: yes``) or as a per-run figure marked ``≈`` (``≈96.1%``,
:func:`hooklab.claims.approx`), which the tests mask. These tests prove, for every pattern in
``tests/nbval_sanitize.cfg``, that two runs differing only in what the pattern is for compare equal,
and that a real change anywhere else, above all a claim turning from ``yes`` to ``NO``, still fails.
"""

from __future__ import annotations

import os
import re

import pytest
import torch

from hooklab import claims

from .nbtools import code_cells, named_sanitize_patterns, normalise, notebooks, read, sanitize, sanitize_patterns

PATTERNS = sanitize_patterns()
sanitized = sanitize


def test_the_per_run_pattern_is_the_one_hooklab_documents():
    assert (claims.MASK, claims.MASKED) in PATTERNS
    assert claims.approx(0.96123, ".1%") == "≈96.1%" and claims.is_per_run("≈96.1%")


# By the name each pattern has in tests/nbval_sanitize.cfg: two runs that must compare equal, then
# changes that must still fail.
CASES = {
    "memory addresses": (
        ("<torch.utils.hooks.RemovableHandle object at 0x7f3a2c1b9d50>",
         "<torch.utils.hooks.RemovableHandle object at 0x7fe01122aa10>"),
        ["<torch.utils.hooks.RemovableHandle object at 0x7f3a2c1b9d50> and another",
         "<torch.utils.hooks.OtherHandle object at 0x7f3a2c1b9d50>",
         "<torch.utils.hooks.RemovableHandle object at 10x7f3a2c1b9d50>",  # not a word of its own
         "<torch.utils.hooks.RemovableHandle object at 0x7f3a2c1b9d50g>"],
    ),
    "per-run figures": (
        ("test accuracy ≈96.1%  (≥ 90%: yes)\nrow ≈10, column ≈27\nmean   ≈1.059  0.0\nloss ≈-3.84e-05",
         "test accuracy ≈91.0% (≥ 90%: yes)\nrow ≈9, column ≈3\nmean ≈10.125 0.0\nloss ≈-1.2e-04"),
        ["test accuracy ≈96.1%  (≥ 90%: NO)\nrow ≈10, column ≈27\nmean   ≈1.059  0.0\nloss ≈-3.84e-05",
         "test accuracy ≈96.1%  (≥ 95%: yes)\nrow ≈10, column ≈27\nmean   ≈1.059  0.0\nloss ≈-3.84e-05",
         "test accuracy ≈96.1%  (≥ 90%: yes)\nrow ≈10, column ≈27\nmean   ≈1.059  0.1\nloss ≈-3.84e-05",
         "test accuracy ≈96.1%  (≥ 90%: yes)\nrow ≈10, line ≈27\nmean   ≈1.059  0.0\nloss ≈-3.84e-05",
         "test accuracy 96.1%  (≥ 90%: yes)\nrow ≈10, column ≈27\nmean   ≈1.059  0.0\nloss ≈-3.84e-05",
         # the sign, the exponent's sign and the unit are not per-run: another CPU does not flip them
         "test accuracy ≈96.1%  (≥ 90%: yes)\nrow ≈10, column ≈27\nmean   ≈1.059  0.0\nloss ≈3.84e-05",
         "test accuracy ≈96.1%  (≥ 90%: yes)\nrow ≈10, column ≈27\nmean   ≈-1.059  0.0\nloss ≈-3.84e-05",
         "test accuracy ≈96.1%  (≥ 90%: yes)\nrow ≈10, column ≈27\nmean   ≈1.059  0.0\nloss ≈-3.84e+05",
         "test accuracy ≈96.1%  (≥ 90%: yes)\nrow ≈10, column ≈27\nmean   ≈1.059  0.0\nloss ≈-0.0000384",
         "test accuracy ≈0.961  (≥ 90%: yes)\nrow ≈10, column ≈27\nmean   ≈1.059  0.0\nloss ≈-3.84e-05",
         "test accuracy ≈96.1%  (≥ 90%: yes)\nrow ≈10%, column ≈27\nmean   ≈1.059  0.0\nloss ≈-3.84e-05"],
    ),
}


def test_every_sanitize_pattern_has_a_case_by_its_name():
    assert list(CASES) == list(named_sanitize_patterns())
    assert list(named_sanitize_patterns().values()) == PATTERNS


@pytest.mark.parametrize("name", list(CASES))
def test_a_pattern_masks_what_it_is_for_and_nothing_else(name):
    (run_a, run_b), broken = CASES[name]
    alone = [named_sanitize_patterns()[name]]
    assert sanitized(run_a, alone) == sanitized(run_b, alone), \
        f"{name}: two runs that differ only in what it masks compare unequal"
    assert sanitized(run_a) == sanitized(run_b), f"{name}: the patterns together no longer mask what it masks"
    for text in broken:
        assert sanitized(text) != sanitized(run_a), f"{name}: the mask hides a real change: {text!r}"


def test_a_word_after_the_mark_is_never_masked():
    assert sanitized("peak ≈yes") != sanitized("peak ≈no")
    assert sanitized("≈ 96.1%") != sanitized("≈ 91.0%")  # a space after the mark: not a per-run figure


def _stored_texts():
    for path in notebooks():
        for index, cell in code_cells(read(path)):
            for key, values in normalise(cell.outputs, []).items():
                for value in values:
                    if isinstance(value, str) and "≈" in value:
                        yield f"{path.name} cell {index} {key}", value


STORED = list(_stored_texts())


def test_some_notebook_prints_per_run_figures():
    assert STORED, "no stored output has a per-run figure: the mutation test below would check nothing"


@pytest.mark.parametrize("where,text", STORED, ids=[w for w, _ in STORED])
def test_no_mask_hides_a_change_in_a_stored_output(where, text):
    """Change every digit outside the masked figures, and every claim's answer, one at a time:
    each change must survive sanitizing (so nbval would report it)."""
    masked = [m.span() for m in re.finditer(claims.MASK, text)]
    inside = {i for start, end in masked for i in range(start, end)}
    base = sanitized(text)
    changes = [text[:i] + str((int(c) + 1) % 10) + text[i + 1:]
               for i, c in enumerate(text) if c in "0123456789" and i not in inside]  # ASCII digits (β₁ is a name)
    for m in re.finditer(claims.MASK, text):  # a figure's sign, its exponent's sign, its unit
        sign, exponent, unit = m.span(1), m.span(2), m.span(3)
        flip = {"": "-", "-": "", "+": "-"}
        changes.append(text[:sign[0]] + flip[m.group(1)] + text[sign[1]:])
        if m.group(2):
            changes.append(text[:exponent[0]] + "e" + ("+" if m.group(2) == "e-" else "-") + text[exponent[1]:])
        changes.append(text[:unit[0]] + ("" if m.group(3) else "%") + text[unit[1]:])
    changes += [text[:m.start()] + ": NO" + text[m.end():] for m in re.finditer(r": yes\b", text)]
    changes += [text[:m.start()] + "False" + text[m.end():] for m in re.finditer(r"\bTrue\b", text)]
    hidden = [c for c in changes if sanitized(c) == base]
    assert not hidden, f"{where}: the sanitize patterns hide {len(hidden)} real change(s), e.g. {hidden[0]!r}"


@pytest.mark.kernels
def test_the_other_cpu_run_uses_other_kernels():
    """``python3 dev.py test --other-cpu`` must really change the kernels: generic ATen kernels and one thread."""
    if not os.environ.get("HOOKLAB_OTHER_CPU"):
        pytest.skip("only in `python3 dev.py test --other-cpu`")
    assert torch.backends.cpu.get_cpu_capability() == "DEFAULT"
    assert torch.get_num_threads() == 1
