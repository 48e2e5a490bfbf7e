"""nb02.compare_bars (the gradient plot of notebook 02's live lab)."""

from __future__ import annotations

import warnings

import torch

import hooklab
from hooklab.course import nb02_tensor_hooks as nb02


def test_compare_bars_draws_one_bar_per_value_and_a_legend():
    fig = hooklab.plots.figure((4.5, 2.2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no layout-engine warning
        ax = nb02.compare_bars(fig, ["-1", "0", "1"], {"plain": torch.tensor([-2.0, 0.0, 2.0]),
                                                               "hooked": [-1.0, 0.0, 1.0]}, xlabel="v")
        png = hooklab.plots.to_png(fig)
    assert png[:4] == b"\x89PNG"
    assert len(ax.patches) == 6
    assert [t.get_text() for t in ax.get_xticklabels()] == ["-1", "0", "1"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["plain", "hooked"]
    heights = [p.get_height() for p in ax.patches]
    assert heights == [-2.0, 0.0, 2.0, -1.0, 0.0, 1.0]
    assert fig.get_layout_engine() is None


def test_compare_bars_with_one_series_centres_the_bars():
    fig = hooklab.plots.figure()
    ax = nb02.compare_bars(fig, ["a", "b"], {"only": [1, 2]})
    assert [round(p.get_x() + p.get_width() / 2, 6) for p in ax.patches] == [0.0, 1.0]
