"""hooklab.Panel, the exercise checker, Callbacks, data and plots."""

from __future__ import annotations

import socket

import pytest
import torch
from torch import nn

import hooklab
import hooklab.course.data
from hooklab.course.checks import expect_close
from hooklab.lab.exercises import Exercise, Mistake, Solution


def one_layer() -> nn.Linear:
    layer = nn.Linear(1, 1, bias=False)
    nn.init.ones_(layer.weight)
    return layer


def make_panel(layer: nn.Linear, name: str = "test panel") -> hooklab.Panel:
    panel = hooklab.Panel(name, lambda p: {"output": layer(torch.ones(1)).item()})
    panel.toggle("scale", lambda hooks, p: hooks.forward(layer, lambda m, a, out: out * p.values["factor"]))
    panel.slider("factor", 0.0, 4.0, 0.5, 2.0)
    return panel


# ---------------------------------------------------------------- Panel
def test_panel_driven_from_code_registers_and_removes():
    layer = one_layer()
    panel = make_panel(layer)
    assert panel.state() == {"scale": False, "factor": 2.0, "hooks": 0, "output": 1.0}
    assert panel.set(scale=True)["output"] == 2.0
    assert panel.hook_count() == 1 and hooklab.count_hooks(layer) == 1
    assert panel.set(factor=3.0)["output"] == 3.0  # the slider re-registers the ticked hook
    assert hooklab.count_hooks(layer) == 1
    assert panel.set(scale=False) == {"scale": False, "factor": 3.0, "hooks": 0, "output": 1.0}
    assert hooklab.count_hooks(layer) == 0
    assert panel.text == "output: 1"
    assert "<td><code>1</code></td>" in panel.view.value
    panel.remove()


def test_1000_flips_leave_zero_or_one_hook():
    layer = one_layer()
    panel = make_panel(layer, "flip panel")
    box = panel.controls["scale"]
    for i in range(1000):
        box.value = not box.value  # as a click does
        assert hooklab.count_hooks(layer) == (1 if box.value else 0)
    assert box.value is False and hooklab.count_hooks(layer) == 0
    box.value = True
    assert hooklab.count_hooks(layer) == 1
    panel.remove()
    assert hooklab.count_hooks(layer) == 0


def test_rebuilding_a_panel_with_the_same_title_closes_the_old_one():
    layer = one_layer()
    old = make_panel(layer, "rebuilt")
    old.set(scale=True)
    new = make_panel(layer, "rebuilt")  # the learner re-runs the cell
    assert hooklab.count_hooks(layer) == 0
    assert old.controls["scale"].comm is None and old.widget.comm is None  # closed: its widgets are gone
    new.set(scale=True)
    assert hooklab.count_hooks(layer) == 1
    new.remove()


def test_panel_errors_show_in_view_and_raise_from_set():
    layer = one_layer()
    panel = hooklab.Panel("err", lambda p: {"output": layer(torch.ones(1)).item()})
    panel.toggle("bad", lambda hooks, p: hooks.forward(layer, lambda m, out: out))  # wrong signature
    with pytest.raises(TypeError, match="hook\\(module, args, output\\)"):
        panel.set(bad=True)
    assert "TypeError" in panel.view.value
    with pytest.raises(KeyError, match="no control"):
        panel.set(nope=1)
    with pytest.raises(ValueError, match="already has a control"):
        panel.toggle("bad", lambda hooks, p: None)
    panel.remove()


def test_panel_with_plot_dropdown_and_html_view():
    calls = []

    def plot(p, fig):
        ax = fig.add_subplot()
        ax.bar([0, 1], [1, 2]); ax.set_title(p.values["which"])
        calls.append(p.values["which"])

    panel = hooklab.Panel("plot", lambda p: f"<p>{p.values['which']}</p>", plot=plot)
    panel.dropdown("which", ["x", "y"], "x")
    panel.set(which="y")
    assert calls[-1] == "y" and panel.image.value[:4] == b"\x89PNG"
    assert panel.text == "y" and panel.rows == {}
    assert panel.updates == 1  # built lazily: only the set() rendered
    bundle = panel._repr_mimebundle_()
    assert "a live panel" in bundle["text/html"] and bundle["text/plain"] == "<hooklab Panel 'plot': which>"
    panel.remove()


def test_panel_initially_ticked_toggle():
    layer = one_layer()
    panel = hooklab.Panel("ticked", lambda p: {"output": layer(torch.ones(1)).item()})
    panel.toggle("x10", lambda hooks, p: hooks.forward(layer, lambda m, a, out: out * 10), value=True)
    assert panel.rows["output"] == 10.0
    panel.remove()


# ---------------------------------------------------------------- checker
def double_grad_checks():
    def returns_double(fn):
        g = torch.tensor([1.0, -2.0])
        expect_close(fn(g), g * 2, "the gradient your hook returns")
    return [("returns twice the gradient", returns_double)]


def test_exercise_passes_a_right_answer_and_names_mistakes():
    ex = Exercise("double the gradient", double_grad_checks(), hook_kind="tensor",
                  solution=lambda grad: grad * 2)
    good = ex.check(lambda grad: grad * 2)
    assert good.passed and bool(good) and str(good).startswith("double the gradient: all 2 checks passed")
    forgot_return = ex.check(lambda grad: None)
    assert not forgot_return and "forget to `return`" in forgot_return.mistakes[0]
    wrong = ex.check(lambda grad: grad * 3)
    assert "expected [2.0, -4.0]" in wrong.mistakes[0]
    wrong_sig = ex.check(lambda module, grad: grad)
    assert len(wrong_sig.lines) == 1 and "hook(grad)" in wrong_sig.mistakes[0]
    assert "❌" in wrong._repr_html_() and "✅" in good._repr_html_()


def test_exercise_reports_learner_exceptions_and_stubs():
    ex = Exercise("x", double_grad_checks())

    def stub(grad):
        raise NotImplementedError

    assert "not written yet" in ex.check(stub).mistakes[0]

    def broken(grad):
        return grad / undefined_name  # noqa: F821

    msg = ex.check(broken).mistakes[0]
    assert msg.startswith("your function raised NameError") and "(at `return grad / undefined_name" in msg
    assert "Mistake" not in msg


def test_an_exception_the_check_raises_is_not_blamed_on_the_learner():
    """A check that fails on what the learner's function returned (here it indexes the result) says
    the check raised, at the check's line; it does not say "your function raised"."""
    import hooklab.course.nb01_callbacks as course_module  # any file inside hooklab stands for a check

    source = "def check(fn):\n    return fn()['missing']\n"
    namespace: dict = {}
    exec(compile(source, course_module.__file__, "exec"), namespace)
    msg = Exercise("x", [("indexes the result", namespace["check"])]).check(lambda: {}).mistakes[0]
    assert msg.startswith("the check (in hooklab) raised KeyError: 'missing'"), msg
    assert "using what your function returned or changed" in msg and "your function raised" not in msg


def test_expect_close_messages():
    with pytest.raises(Mistake, match="should be a tensor"):
        expect_close(3, torch.ones(1), "x")
    with pytest.raises(Mistake, match="shape \\[2\\], expected \\[3\\]"):
        expect_close(torch.ones(2), torch.ones(3), "x")
    expect_close(torch.ones(2), [1.0, 1.0], "x")


def test_solution_is_collapsed_html_and_plain_code():
    def solution(grad):
        return grad * 2
    ex = Exercise("double", [], solution=solution)
    sol = ex.solution()
    assert isinstance(sol, Solution) and "return grad * 2" in sol.code
    assert sol._repr_html_().startswith("<details>")
    with pytest.raises(LookupError):
        Exercise("none", []).solution()


# ---------------------------------------------------------------- callbacks
def test_callbacks_order_handles_and_context():
    seen = []
    cbs = hooklab.Callbacks()
    h1 = cbs.register(lambda x: seen.append(("a", x)))
    cbs.register(lambda x: seen.append(("b", x)))
    cbs(1)
    h1.remove()
    cbs(2)
    assert seen == [("a", 1), ("b", 1), ("b", 2)]
    with cbs.register(lambda x: seen.append(("c", x))):
        assert len(cbs) == 2
    assert len(cbs) == 1
    with pytest.raises(TypeError, match="no parentheses"):
        cbs.register(None)
    assert isinstance(h1, torch.utils.hooks.RemovableHandle)  # PyTorch's own handle class
    h1.remove()  # removing twice is harmless
    assert len(cbs) == 1 and repr(cbs).startswith("Callbacks([")


# ---------------------------------------------------------------- data and plots
def test_data_helpers_are_offline_and_repeatable(monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError(f"a data helper opened a network connection: {args}")

    monkeypatch.setattr(socket.socket, "connect", no_network)  # every TCP/UDP connection, urllib's too
    monkeypatch.setattr(socket.socket, "connect_ex", no_network)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)  # and every name lookup
    a, b = hooklab.course.data.tiny_mlp(), hooklab.course.data.tiny_mlp()
    assert torch.equal(a[0].weight, b[0].weight)
    assert [type(m).__name__ for m in a] == ["Linear", "ReLU", "Linear"]
    with pytest.raises(ValueError):
        hooklab.course.data.tiny_mlp((4,))
    photo = hooklab.course.data.sample_photo(64)
    assert photo.shape == (1, 3, 64, 64) and photo.dtype == torch.float32
    assert -3 < photo.mean().item() < 3


def test_feature_grid_and_png():
    from hooklab.course.nb05_resnet_traversal import feature_grid

    from hooklab.course.nb05_resnet_traversal import tile

    maps = torch.randn(1, 5, 8, 8)
    fig = hooklab.plots.figure()
    feature_grid(fig, maps, n=4, title="maps")
    assert len(fig.axes) == 1 and fig.texts[0].get_text() == "maps"
    picture = fig.axes[0].images[0].get_array()
    assert picture.shape == (2 * 8 + 2, 2 * 8 + 2)  # 2 x 2 maps, a gap of 8 / 5 -> 2 pixels
    for i in range(4):  # map i, at its place, scaled to its own range: what imshow shows for it alone
        top, left = (i // 2) * 10, (i % 2) * 10
        expected = (maps[0, i] - maps[0, i].min()) / (maps[0, i].max() - maps[0, i].min())
        assert torch.allclose(torch.from_numpy(picture[top:top + 8, left:left + 8].filled()), expected, atol=1e-6)
    assert picture.mask[8:10].all() and picture.mask[:, 8:10].all()  # the gaps are left out
    assert hooklab.plots.to_png(fig)[:4] == b"\x89PNG"
    assert torch.equal(tile(torch.full((1, 3, 3), 2.0)), torch.zeros(3, 3))  # a constant map: 0, as imshow shows it
    with pytest.raises(ValueError, match="C, H, W"):
        feature_grid(hooklab.plots.figure(), torch.randn(8, 8))


def test_panel_renders_once_when_shown_not_once_per_control():
    calls = []

    def render(p):
        calls.append(dict(p.values))
        return {"n": len(calls)}

    panel = hooklab.Panel("lazy", render)
    for name in "abcde":
        panel.toggle(name, lambda hooks, p: None)
    panel.slider("s", 0, 1, 0.1, 0.5)
    assert calls == []  # nothing rendered while the panel is being built
    panel._repr_mimebundle_()
    assert len(calls) == 1
    panel.set(a=True)
    assert len(calls) == 2 and panel.state()["n"] == 2
    panel.set(b=True, c=True, s=0.9)  # several controls at once: one render, with all of them set
    assert len(calls) == 3 and calls[-1] == {"a": True, "b": True, "c": True, "d": False, "e": False, "s": 0.9}
    panel.set(b=True)  # nothing changes: no render
    assert len(calls) == 3
    panel.remove()


def test_panel_set_registers_each_ticked_hook_once_and_rejects_unknown_names_before_changing_anything():
    layer = one_layer()
    registered = []
    panel = hooklab.Panel("batch", lambda p: {"output": layer(torch.ones(1)).item()})
    panel.toggle("scale", lambda hooks, p: registered.append(p.values["factor"]) or
                 hooks.forward(layer, lambda m, a, out: out * p.values["factor"]))
    panel.slider("factor", 0.0, 4.0, 0.5, 2.0)
    assert panel.set(scale=True, factor=3.0)["output"] == 3.0
    assert registered == [3.0] and hooklab.count_hooks(layer) == 1  # never registered with the old factor
    with pytest.raises(KeyError, match="no control 'nope'"):
        panel.set(factor=1.0, nope=1)
    assert panel.values["factor"] == 3.0 and registered == [3.0]
    panel.remove()
    assert hooklab.count_hooks(layer) == 0


# ---------------------------------------------------------------- Panel: reset, busy state, accessibility
def test_reset_puts_every_control_back_removes_every_hook_and_shows_the_first_view():
    layer = one_layer()
    panel = make_panel(layer, "reset panel")
    first = panel.state()
    first_view = panel.text
    panel.set(scale=True, factor=3.5)
    assert hooklab.count_hooks(layer) == 1 and panel.text != first_view
    assert panel.reset() == first
    assert hooklab.count_hooks(layer) == 0 and panel.text == first_view
    panel.set(scale=True, factor=0.5)
    panel.reset_button.click()  # as the reset button's click does
    assert panel.state() == first and hooklab.count_hooks(layer) == 0 and panel.text == first_view
    panel.remove()
    assert panel.reset_button.disabled


def test_reset_restores_a_filter_its_dropdown_and_a_toggle_that_started_ticked():
    layer = one_layer()
    panel = hooklab.Panel("reset filter",
                          lambda p: {"picked": p.values["layer"], "output": layer(torch.ones(1)).item()})
    panel.toggle("x10", lambda hooks, p: hooks.forward(layer, lambda m, a, out: out * 10), value=True)
    panel.textbox("find")
    panel.dropdown("layer", ["conv1", "bn1", "layer1.conv1"], "layer1.conv1", filter_by="find")
    first = panel.state()
    assert first["hooks"] == 1 and first["output"] == 10.0
    panel.set(find="bn", x10=False)  # the filter hides the choice: it stays listed, first, and chosen
    assert panel.options("layer") == ["layer1.conv1", "bn1"] and panel.values["layer"] == "layer1.conv1"
    assert hooklab.count_hooks(layer) == 0
    panel.set(layer="bn1", find="b")  # once another is picked, the filter lists only what matches
    assert panel.options("layer") == ["bn1"]
    assert panel.reset() == first
    assert panel.options("layer") == ["conv1", "bn1", "layer1.conv1"]
    assert hooklab.count_hooks(layer) == 1  # the toggle started ticked: its one hook, not two
    panel.remove()
    assert hooklab.count_hooks(layer) == 0


def test_busy_state_is_shown_before_the_render_and_cleared_after():
    seen = []

    def render(p):
        seen.append((p.busy, p.status.value))
        return {"n": len(seen)}

    panel = hooklab.Panel("busy", render)
    panel.toggle("a", lambda hooks, p: None)
    panel.state()
    seen.clear()
    events = []  # the order in which the status and the view change (each change is one message to the page)
    panel.status.observe(lambda c: events.append("status: " + ("busy" if c["new"] else "idle")), names="value")
    panel.view.observe(lambda c: events.append("view"), names="value")
    panel.set(a=True)
    assert seen == [(True, hooklab.lab.panel.BUSY_HTML)]
    assert events == ["status: busy", "view", "status: idle"]
    assert not panel.busy and panel.status.value == ""
    events.clear()
    panel.reset()
    assert events == ["status: busy", "view", "status: idle"]  # a reset shows the busy state too
    panel.remove()


def test_busy_state_is_cleared_when_a_hook_or_the_view_fails():
    layer = one_layer()
    panel = hooklab.Panel("busy error", lambda p: {"output": layer(torch.ones(1)).item()})
    panel.toggle("bad", lambda hooks, p: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        panel.set(bad=True)
    assert not panel.busy and panel.status.value == ""
    panel.remove()


def test_view_carries_an_update_count_in_a_polite_live_region_and_the_title_is_a_heading():
    layer = one_layer()
    panel = make_panel(layer, "a11y panel")
    panel.state()
    n = panel.updates
    assert f"data-update='{n}'" in panel.view.value and "aria-live='polite'" in panel.view.value
    panel.set(scale=True)
    assert panel.updates == n + 1 and f"data-update='{n + 1}'" in panel.view.value
    title = panel.widget.children[0].value
    assert title.startswith("<h3 class='hooklab-title'") and "a11y panel</h3>" in title
    # the stored snapshot shows the view itself, without the live wrapper or the count
    snapshot = panel._repr_mimebundle_()["text/html"]
    assert "data-update" not in snapshot and "<td><code>2</code></td>" in snapshot
    panel.remove()
