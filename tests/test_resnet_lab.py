"""hooklab.resnet_lab: tables, rounding, mosaics and the live lab's figure."""

from __future__ import annotations

import math

import pytest
import torch

import hooklab
from hooklab import resnet_lab as lab
from hooklab.plots import figure, to_png


def test_sig_rounds_to_significant_digits():
    assert lab.sig(123.456) == 123.5
    assert lab.sig(0.000123456) == 0.0001235
    assert lab.sig(-2.71828, 2) == -2.7
    assert str(lab.sig(-0.0)) == "0.0"
    assert math.isinf(lab.sig(float("inf")))


def test_stats_of_a_relu_output():
    s = lab.stats(torch.relu(torch.tensor([-2.0, -1.0, 1.0, 3.0])))
    assert s == {"mean": 1.0, "std": 1.414, "min": 0.0, "max": 3.0, "zeros": 0.5}
    assert lab.stats(torch.tensor([5.0]))["std"] == 0.0  # one value: no NaN


def test_table_prints_aligned_and_as_html():
    t = lab.table(["module", "shape"], [["fc", [1, 1000]]])
    assert str(t).splitlines()[0] == "module  shape"
    assert "<table" in t._repr_html_()


def test_mosaic_tiles_and_normalises_each_channel():
    maps = torch.stack([torch.full((2, 3), 5.0), torch.arange(6.0).view(2, 3)])
    tiled = lab.mosaic(maps, pad=1)
    assert tiled.shape == (2, 7)  # 2 tiles side by side, 1 column apart
    assert tiled[:, 3].eq(1).all()  # the gap
    assert tiled[:, 4:].min() == 0 and tiled[:, 4:].max() == 1
    with pytest.raises(ValueError, match="feature maps must be"):
        lab.mosaic(torch.zeros(4, 4))


def test_mosaic_places_each_channel_row_by_row_with_white_gaps():
    maps = torch.stack([torch.tensor([[0.0, float(i + 1)]]) for i in range(5)])  # 5 maps of 1 x 2
    tiled = lab.mosaic(maps, pad=1)
    assert tiled.shape == (3, 8)  # 3 columns x 2 rows of 1 x 2 tiles, 1 pixel apart
    expected = torch.ones(3, 8)
    for i in range(5):
        r, q = divmod(i, 3)
        expected[2 * r, 3 * q: 3 * q + 2] = torch.tensor([0.0, 1.0])
    assert torch.equal(tiled, expected)  # the sixth place stays white


def test_layer_figure_leaves_the_thread_count_alone():
    before = torch.get_num_threads()
    lab.layer_figure(figure(), torch.randn(1, 4, 6, 6))
    assert torch.get_num_threads() == before


def test_photo_image_undoes_the_normalisation():
    img = lab.photo_image(hooklab.data.sample_photo(16))
    assert img.shape == (16, 16, 3) and 0 <= img.min() and img.max() <= 1


def test_top_logits_order():
    assert lab.top_logits(torch.tensor([[0.1, 0.9, 0.5]]), k=2) == [(1, 0.9), (2, 0.5)]


@pytest.mark.parametrize("shape", [(1, 8, 5, 5), (1, 8, 1, 1), (1, 10)])
def test_layer_figure_draws_every_kind_of_output(shape, recwarn):
    fig = figure((6, 2.5))  # a constrained-layout figure, as hooklab.Panel makes
    lab.layer_figure(fig, torch.randn(shape), "demo")
    assert to_png(fig).startswith(b"\x89PNG")
    assert fig.get_layout_engine() is None
    assert not [w for w in recwarn if "layout" in str(w.message)]
    lab.layer_figure(figure(), torch.zeros(shape))  # constant output: no error


def test_torch_threads_restores_the_thread_count_also_on_error():
    before = torch.get_num_threads()
    with lab.torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError):
        with lab.torch_threads(1):
            raise RuntimeError("boom")
    assert torch.get_num_threads() == before
