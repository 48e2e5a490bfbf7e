"""nb02.LiveBars (the gradient plot of notebook 02's live lab) and the LiveCanvas it redraws with."""

from __future__ import annotations

import io
import warnings

import numpy as np
import torch
from PIL import Image

import hooklab
from hooklab.course import nb02_tensor_hooks as nb02


def pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGBA"))


def test_live_bars_draw_one_bar_per_value_and_a_legend():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no layout-engine warning
        bars = nb02.LiveBars(["-1", "0", "1"], ["plain", "hooked"], xlabel="v")
        png = bars.png({"plain": torch.tensor([-2.0, 0.0, 2.0]).tolist(), "hooked": [-1.0, 0.0, 1.0]})
    assert png[:4] == b"\x89PNG"
    assert len(bars.ax.patches) == 6
    assert [t.get_text() for t in bars.ax.get_xticklabels()] == ["-1", "0", "1"]
    assert [t.get_text() for t in bars.legend.get_texts()] == ["plain", "hooked"]
    assert [p.get_height() for p in bars.ax.patches] == [-2.0, 0.0, 2.0, -1.0, 0.0, 1.0]
    assert bars.fig.get_layout_engine() is None
    assert pixels(png).shape == (440, 900, 4)  # 4.5 x 2.2 inches at 200 dpi


def test_one_series_centres_the_bars():
    bars = nb02.LiveBars(["a", "b"], ["only"])
    assert [round(p.get_x() + p.get_width() / 2, 6) for p in bars.ax.patches] == [0.0, 1.0]


def test_a_redrawn_picture_equals_a_full_draw_of_the_same_state():
    """Blitting draws the bars over a kept background: the picture must be the one a full draw
    gives, pixel for pixel, for a new axis range and for a kept one."""
    bars = nb02.LiveBars([str(v) for v in range(-3, 5)], ["plain 2·v", "lab_v.grad"], xlabel="value of lab_v")
    plain = [2.0 * v for v in range(-3, 5)]
    states = [{"plain 2·v": plain, "lab_v.grad": plain},
              {"plain 2·v": plain, "lab_v.grad": [max(-3.0, min(3.0, g)) for g in plain]},
              {"plain 2·v": plain, "lab_v.grad": [3 * g for g in plain]},
              {"plain 2·v": plain, "lab_v.grad": plain}]
    for state in states:
        fast = bars.png(state)
        full = hooklab.plots.to_png(bars.fig)
        assert np.array_equal(pixels(fast), pixels(full)), f"the redrawn picture differs for {state}"
    assert bars.canvas.full_draws == 2  # limits 10 and 50; the last state reused the first background


def test_an_update_redraws_only_the_bars():
    """After the first picture, an update draws the bars over the kept background: the figure itself
    (axes, ticks, texts, legend) is never drawn again while the axis range stays. (What that saves in
    time is measured by the benchmark, `python3 dev.py bench`: the live pictures section.)"""
    bars = nb02.LiveBars([str(v) for v in range(-3, 5)], ["plain", "hooked"], xlabel="x")
    values = [float(v) for v in range(-3, 5)]
    bars.png({"plain": values, "hooked": values})
    figure_draws = []
    draw = bars.fig.draw
    bars.fig.draw = lambda renderer: figure_draws.append(renderer) or draw(renderer)  # type: ignore[method-assign]
    drawn = []
    for artist in bars.ax.patches:
        artist.draw = (lambda a: lambda renderer: drawn.append(a) or type(a).draw(a, renderer))(artist)
    for i in range(20):
        bars.png({"plain": values, "hooked": [v * (1 + i % 2) * 0.5 for v in values]})
    assert figure_draws == [] and bars.canvas.full_draws == 1
    assert len(drawn) == 20 * len(bars.ax.patches)  # each update drew every bar, once
