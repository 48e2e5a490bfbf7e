"""Every notebook in a real browser: JupyterLab on 127.0.0.1 (with a token), Debian's Chromium
driven by playwright, as a learner would use it.

Per notebook (each notebook under notebooks/ is picked up by itself):

1. open it: no error output (outside cells marked NBVAL_RAISES_EXCEPTION) and no "Error
   displaying widget" or similar on the page; screenshot ``NN-1-opened.png``;
2. Run > Run All Cells; wait until the kernel is idle and every code cell has run; again no
   unexpected error anywhere; screenshot ``NN-2-before.png`` (the live lab before any click).
   Under ``python3 dev.py test`` most notebooks skip this step's third execution of every cell:
   nbval has just run each cell twice in the kernel the page connects to, and only the cells that
   show and drive the live panel run again, in the page (tests/shared_kernel.py says which
   notebooks and why);
3. on every live panel (``hooklab.Panel``), operate every control: tick each checkbox (the view
   must change) and untick it (the view's text and plot must come back exactly); tick them all
   (screenshot ``NN-3-all-ticked.png``) and untick them all; move each slider to an end with the
   keyboard and type its value back (it must change the view with no checkbox or with one
   ticked, and going back must restore the view); pick every option of each dropdown (same rule;
   a long list, like every layer of a ResNet, gets 10 options spread from first to last); type
   each of the texts the expectations give for a text box (each must change the view or the
   options a dropdown lists) and type the original back (the options must come back exactly; a
   dropdown whose choice the text changed is set back, and then the view must come back too);
4. the notebook's specific expectations from tests/browser_expectations.py (exact values);
5. reset, on every live panel: right after the cells ran (the notebook's driving cell has changed the
   panel), click **reset**: the view must be the first view, as the notebook's stored snapshot of
   the panel shows it (its table rows, per-run figures masked as nbval masks them); at the end,
   change every control away from where it is (tick every checkbox, move every slider to an end,
   pick another option of every dropdown) and click reset again: every control must show what
   the first reset showed and the view must come back exactly (text and plot);
6. every change above showed the panel's busy state ("updating…") before its new view arrived
   (timed in the page from the input event; the report lists the times);
7. the accessibility tree (Chromium's, not the pixels), as ipywidgets gives it with no script of
   ours: the panel's title is a heading; every checkbox, dropdown and text box has its label as
   accessible name; the reset button is named; every slider is a slider node with its value, but
   unnamed (ipywidgets shows the label as text beside it and names no handle); the view's body is
   a polite live region;
8. no new error, no JavaScript error, nothing in the browser's console but an offline machine's
   failure to load a launch badge (``OFFLINE_BADGES``); screenshot ``NN-4-after.png``.

A separate test builds a panel whose view takes 0.6 s to compute and checks that the busy state
becomes visible after a click, before the new view, and is gone once the new view is shown. (How
soon it shows is a timing floor of the benchmark, ``python3 dev.py bench``, never of a test.)

Screenshots and a per-notebook report (times, every action and what the view showed) go to
tests/screenshots/ (git-ignored). The test serves copies of the notebooks and never saves one.
Under CI (CI=true) a missing browser fails the test; elsewhere it skips and says how to install it.
"""

from __future__ import annotations

import ast
import html
import re
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest

from .browser import SCREENSHOTS, ConsoleError, NotebookPage, View
from .browser_expectations import CHANGED, EXPECTATIONS, FIRST, SAME, About
from .browser_session import Browser, required, shared_browser
from .nbtools import RAISES, code_cells, has_marker, notebooks, read, sanitize
from .notebook_header import BINDER_BADGE, COLAB_BADGE, KAGGLE_BADGE, STUDIO_LAB_BADGE

NOTEBOOKS = notebooks()
IDS = [p.name for p in NOTEBOOKS]
#: Aim per notebook (open + run all + every control); over it the test only reports (machines vary).
TARGET_SECONDS = 30
#: A dropdown with more options than this (a layer picker over all of ResNet-18's modules) has
#: this many of them picked, spread evenly from the first to the last, to keep the test fast.
MAX_OPTIONS = 10


# ---------------------------------------------------------------------- the browser
#: The only console errors allowed: the launch badges of each notebook's first cell are images on
#: the services' sites, which an offline machine cannot load (and one with internet loads).
OFFLINE_BADGES = (BINDER_BADGE, COLAB_BADGE, KAGGLE_BADGE, STUDIO_LAB_BADGE)


def unexpected_console_errors(errors: list[ConsoleError]) -> list[ConsoleError]:
    return [e for e in errors
            if not (e.url in OFFLINE_BADGES and e.text.startswith("Failed to load resource: net::ERR_"))]


def need_browser(config: pytest.Config) -> Browser:
    """This process's page and JupyterLab; without them the test skips, or under CI fails."""
    return required(shared_browser(config))


# ---------------------------------------------------------------------- checks
def spread(options: list[str], most: int) -> list[str]:
    """``options`` when there are at most ``most``, else ``most`` of them evenly spread, first and last included."""
    if len(options) <= most:
        return list(options)
    return [options[round(i * (len(options) - 1) / (most - 1))] for i in range(most)]


def differs(a: View, b: View) -> bool:
    return a.text != b.text or a.plot != b.plot


def assert_restored(nb: NotebookPage, want: View, got: View, what: str) -> None:
    assert got.text == want.text, (f"{nb.name}: after {what} the view's text did not come back:\n"
                                   f"  before: {want}\n  after:  {got}")
    assert got.plot == want.plot, f"{nb.name}: after {what} the view's text came back but the plot did not"


def exercise_panel(nb: NotebookPage, exercised: list[str], screenshot: bool,
                   texts: dict[str, list[str]] | None = None) -> None:
    """The generic checks every live panel gets (``texts``: what to type into each text box)."""
    panel = nb.panel()
    unknown = [c for c in panel["controls"] if c["kind"] == "unknown"]
    assert not unknown, f"{nb.name}: the test cannot operate these controls yet (add them to tests/browser.py): {unknown}"
    start = nb.view()
    assert not start.error, f"{nb.name}: the panel {panel['title']!r} shows an error after Run All: {start.error}"
    toggles = [c["label"] for c in panel["controls"] if c["kind"] == "checkbox"]
    sliders = [c for c in panel["controls"] if c["kind"] == "slider"]
    dropdowns = [c for c in panel["controls"] if c["kind"] == "dropdown"]
    text_boxes = [c["label"] for c in panel["controls"] if c["kind"] == "text"]
    missing = [label for label in text_boxes if not (texts or {}).get(label)]
    assert not missing, (f"{nb.name}: no texts to type into the text box(es) {missing}: give some under 'type' "
                         "in tests/browser_expectations.py")

    for label in toggles:
        before = nb.view()
        on = nb.click(label)
        assert differs(on, before), f"{nb.name}: clicking {label!r} did not change the view (still {before})"
        off = nb.click(label)
        assert_restored(nb, before, off, f"clicking {label!r} twice")
        plot = " (the plot changed too)" if start.plot and on.plot != before.plot else ""
        exercised.append(f"checkbox {label!r}: {before}  ->  {on}{plot}  ->  back")

    if len(toggles) > 1:
        for label in toggles:
            nb.set_checkbox(label, True)
        if screenshot:
            nb.screenshot("3-all-ticked")
        for label in toggles:
            nb.set_checkbox(label, False)
        assert_restored(nb, start, nb.view(), "ticking every checkbox and unticking them all")
        exercised.append(f"all {len(toggles)} checkboxes ticked together, then unticked")
    elif screenshot:
        nb.screenshot("3-all-ticked")

    # a slider or dropdown may act only through a hook: try with no checkbox, then each one alone
    configurations: list[list[str]] = [[]] + [[t] for t in toggles]

    for slider in sliders:
        label, value = slider["label"], float(slider["now"])
        key = "End" if value < slider["max"] else "Home"
        found = None
        for ticked in configurations:
            for t in ticked:
                nb.set_checkbox(t, True)
            before = nb.view()
            moved = nb.move_slider(label, key)
            shown = nb.control(label)["value"]
            back = nb.set_slider(label, value)
            assert_restored(nb, before, back, f"moving {label!r} and typing {value} back")
            for t in ticked:
                nb.set_checkbox(t, False)
            if differs(moved, before):
                found = (ticked, before, moved, shown)
                break
        assert found, (f"{nb.name}: moving the slider {label!r} to {key} changed nothing in the view, with no "
                       f"checkbox ticked nor with any one of {toggles} ticked")
        ticked, before, moved, shown = found
        exercised.append(f"slider {label!r} ({value} -> {shown} with {ticked or 'no checkbox'} ticked): "
                         f"{before}  ->  {moved}  ->  back")

    for dropdown in dropdowns:
        label, original = dropdown["label"], dropdown["value"]
        found = None
        for ticked in configurations:
            for t in ticked:
                nb.set_checkbox(t, True)
            before = nb.view()
            seen = {}
            for option in spread(dropdown["options"], MAX_OPTIONS):
                if option != original:
                    seen[option] = nb.pick(label, option)
            back = nb.pick(label, original)
            assert_restored(nb, before, back, f"picking every option of {label!r} and {original!r} again")
            for t in ticked:
                nb.set_checkbox(t, False)
            changed = [o for o, v in seen.items() if differs(v, before)]
            if changed or not seen:
                found = (ticked, changed)
                break
        assert found, (f"{nb.name}: no option of the dropdown {label!r} changed the view, with no checkbox "
                       f"ticked nor with any one of {toggles} ticked")
        picked = spread(dropdown["options"], MAX_OPTIONS)
        exercised.append(f"dropdown {label!r}: {len(picked)} of {len(dropdown['options'])} options picked {picked}; "
                         f"{found[1]} change the view with {found[0] or 'no checkbox'} ticked")

    for label in text_boxes:
        original = nb.control(label)["value"]
        for text in (texts or {})[label]:
            before, options = nb.view(), _dropdown_state(nb)
            typed = nb.type_text(label, text)
            changed_options = _dropdown_state(nb) != options
            assert differs(typed, before) or changed_options, (
                f"{nb.name}: typing {text!r} into {label!r} changed neither the view nor a dropdown's options")
            nb.type_text(label, original)
            now = _dropdown_state(nb)
            assert [o for o, _ in now] == [o for o, _ in options], (
                f"{nb.name}: typing {original!r} back into {label!r} did not bring back the dropdowns' options")
            for dropdown, (_, value), (_, was) in zip([d["label"] for d in dropdowns], now, options):
                if value != was:  # the text had hidden the option chosen: choose it again
                    nb.pick(dropdown, was)
            assert_restored(nb, before, nb.view(), f"typing {text!r} into {label!r} and {original!r} back")
            exercised.append(f"text box {label!r}: typed {text!r}: {typed}"
                             f"{' (the options changed)' if changed_options else ''}  ->  back")

    assert_restored(nb, start, nb.view(), "operating every control and putting it back")


def check_accessibility(nb: NotebookPage, exercised: list[str]) -> None:
    """The panel as a screen reader gets it, from Chromium's accessibility tree."""
    panel = nb.panel()
    tree = nb.accessibility()
    roles = tree["roles"]
    where = f"{nb.name}, panel {panel['title']!r}: in the accessibility tree"
    assert panel["title"] in roles["heading"], f"{where} the title is not a heading (headings: {roles['heading']})"
    wanted = {"checkbox": "checkbox", "dropdown": "combobox", "text": "textbox"}
    for kind, role in wanted.items():
        labels = [c["label"] for c in panel["controls"] if c["kind"] == kind]
        named = [n for n in roles[role] if n in labels]
        assert named == labels, f"{where} the {kind}es {labels} should be {role}s named so; {role}s: {roles[role]}"
    # ipywidgets gives a slider's handle the slider role and its value, but no name: the label is
    # text beside it. Every slider must be there as a slider; a name, if one day given, is the label.
    sliders = [c["label"] for c in panel["controls"] if c["kind"] == "slider"]
    assert len(roles["slider"]) == len(sliders), f"{where} sliders {sliders}, slider nodes {roles['slider']}"
    assert all(n in ("", label) for n, label in zip(roles["slider"], sliders)), f"{where} {roles['slider']}"
    assert "reset" in roles["button"], f"{where} no button named 'reset': {roles['button']}"
    unnamed = [role for role in ("checkbox", "combobox", "textbox", "button") for n in roles[role] if not n]
    assert not unnamed, f"{where} controls without a name: {unnamed}"
    assert tree["live"] == "polite", f"{where} the view's body is not a polite live region (aria-live: {tree['live']})"
    exercised.append(f"accessibility tree of {panel['title']!r}:\n" + tree["snapshot"])


_ROW = re.compile(r"<tr><td[^>]*>(.*?)</td><td><code>(.*?)</code></td></tr>", re.S)
#: A panel's text/plain: ``<hooklab Panel 'title': controls>``, the title as ``repr`` quotes it (in
#: double quotes when it holds an apostrophe, as 04's does).
_PANEL_REPR = re.compile(r"""<hooklab Panel ('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"):""")


def stored_first_views(path: Path) -> dict[str, dict[str, str]]:
    """Panel title -> the table rows of the HTML snapshot the committed notebook stores for it (the
    view when the panel was first shown, before any cell changed it)."""
    views: dict[str, dict[str, str]] = {}
    for _, cell in code_cells(read(path)):
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            snapshot, plain = str(data.get("text/html", "")), str(data.get("text/plain", ""))
            match = _PANEL_REPR.match(plain)
            if match and "a live panel" in snapshot:
                title = ast.literal_eval(match.group(1))
                views[title] = {html.unescape(k): html.unescape(v) for k, v in _ROW.findall(snapshot)}
    return views


def check_first_view(nb: NotebookPage, path: Path, view: View, exercised: list[str]) -> None:
    title = nb.panel()["title"]
    views = stored_first_views(path)
    assert title in views, (f"{nb.name}: the notebook stores no snapshot of the panel {title!r} (it stores "
                            f"{sorted(views)}), so the first view after reset cannot be checked")
    stored = views[title]
    assert stored, f"{nb.name}: the stored snapshot of {title!r} has no table rows to compare the reset with"
    got = {k: sanitize(v) for k, v in view.rows.items()}
    want = {k: sanitize(v) for k, v in stored.items()}
    assert got == want, (f"{nb.name}: after reset, {title!r} shows {view.rows}, not its first view as the notebook "
                         f"stores it: {stored}")
    exercised.append(f"reset {title!r} right after the notebook's cells ran: the first view, as stored ({view})")


def change_everything(nb: NotebookPage) -> None:
    """Move every control of the panel away from where it is (for the reset check)."""
    for c in nb.panel()["controls"]:
        if c["kind"] == "checkbox":
            nb.click(c["label"])
        elif c["kind"] == "slider":
            nb.move_slider(c["label"], "End" if float(c["now"]) < c["max"] else "Home")
        elif c["kind"] == "dropdown" and len(c["options"]) > 1:
            nb.pick(c["label"], next(o for o in reversed(c["options"]) if o != c["value"]))


def check_reset(nb: NotebookPage, first: View, controls: list[dict[str, Any]], exercised: list[str]) -> None:
    change_everything(nb)
    changed = nb.panel()["controls"]
    view = nb.reset()
    title = nb.panel()["title"]
    now = nb.panel()["controls"]
    assert [(c["label"], c["value"]) for c in now] == [(c["label"], c["value"]) for c in controls], (
        f"{nb.name}: after reset the controls of {title!r} show {[(c['label'], c['value']) for c in now]}, "
        f"not their start {[(c['label'], c['value']) for c in controls]}")
    assert_restored(nb, first, view, f"reset (from {[(c['label'], c['value']) for c in changed]})")
    exercised.append(f"reset {title!r} after changing every control: the first view again ({view})")


def check_busy(nb: NotebookPage, exercised: list[str]) -> None:
    """Every change showed the busy state before its new view."""
    missing = [t.what for t in nb.timings if t.busy_ms is None or t.view_ms is None or t.busy_ms > t.view_ms]
    assert not missing, f"{nb.name}: no busy state seen before the new view after: {missing[:5]}"
    views = sorted(t.view_ms for t in nb.timings if t.view_ms is not None)
    busy = sorted(t.busy_ms for t in nb.timings if t.busy_ms is not None)
    if views:
        exercised.append(f"{len(views)} changes, each with the busy state shown first: input to busy state median "
                         f"{busy[len(busy) // 2]:.0f} ms (max {busy[-1]:.0f}), to the new view median "
                         f"{views[len(views) // 2]:.0f} ms (max {views[-1]:.0f})")


def _dropdown_state(nb: NotebookPage) -> list[tuple[tuple[str, ...], str]]:
    """(options, chosen option) of each dropdown of the panel, in order."""
    return [(tuple(c["options"]), c["value"]) for c in nb.panel()["controls"] if c["kind"] == "dropdown"]


def check_expectations(nb: NotebookPage, spec: dict[str, Any], exercised: list[str]) -> None:
    if "controls" in spec:
        labels = [c["label"] for c in nb.panel()["controls"]]
        assert labels == spec["controls"], f"{nb.name}: the panel's controls are {labels}, expected {spec['controls']}"
    first: View | None = None
    for number, step in enumerate(spec["steps"], 1):
        before = nb.view()
        for label, value in step.set.items():
            nb.set(label, value)
        now = nb.view()
        first = first or now
        for row, wanted in step.expect.items():
            assert row in now.rows, f"{nb.name}, step {number} ({step.what}): the view has no row {row!r}: {now}"
            got = now.rows[row]
            for want in (wanted if isinstance(wanted, list) else [wanted]):
                if want == CHANGED:
                    ok, expected = got != before.rows.get(row), f"something other than {before.rows.get(row)!r}"
                elif want == SAME:
                    ok, expected = got == before.rows.get(row), repr(before.rows.get(row))
                elif want == FIRST:
                    ok, expected = got == first.rows.get(row), repr(first.rows.get(row))
                elif isinstance(want, About):
                    ok, expected = want.matches(got, sanitize), str(want)
                else:
                    ok, expected = got == want, repr(want)
                assert ok, (f"{nb.name}, step {number} ({step.what}): {row!r} shows {got!r}, expected {expected}\n"
                            f"  view before the step: {before}\n  view now: {now}")
        exercised.append(f"expected step {number} ({step.what}): {now}")


def write_report(name: str, lines: list[str]) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    (SCREENSHOTS / f"{Path(name).stem}-report.txt").write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------------- the tests
def _names(source: str) -> set[str]:
    """The names a cell's code uses (every word, for a cell Python cannot parse, e.g. with a magic)."""
    try:
        return {node.id for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Name)}
    except SyntaxError:
        return set(re.findall(r"[A-Za-z_]\w*", source))


def panel_cells(path: Path) -> list[int]:
    """Indexes (among all cells) of the code cells whose stored output is a live panel."""
    return [index for index, cell in code_cells(read(path))
            if any(_PANEL_REPR.match(str(out.get("data", {}).get("text/plain", ""))) for out in cell.get("outputs", []))]


def lab_cells(path: Path) -> list[int]:
    """Indexes (among all cells) of the code cells that show a live panel (their stored output is
    one), and of the later cells that drive it: those that use the name the panel cell shows it by
    (``panel`` or ``lab``, on its last line), such as ``print(panel.set(...))``."""
    cells, panels = list(code_cells(read(path))), set(panel_cells(path))
    shown = [(index, cell) for index, cell in cells if index in panels]
    chosen = {index for index, _ in shown}
    for index, cell in shown:
        lines = cell.source.strip().splitlines()
        name = lines[-1].strip() if lines and lines[-1].strip().isidentifier() else None
        chosen |= {later for later, other in cells if later > index and name in _names(other.source)}
    return sorted(chosen)


@pytest.mark.browser
@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_in_browser(path: Path, request: pytest.FixtureRequest) -> None:
    """The notebook in a fresh kernel, run by JupyterLab's Run All. (``python3 dev.py test`` runs
    this for the notebooks in tests/shared_kernel.py's RUN_ALL only; for the others the same checks
    follow nbval's run, in nbval's kernel: tests/shared_kernel.py.)"""
    check_notebook_in_browser(need_browser(request.config), path, cells=None)


def check_notebook_in_browser(shared: Browser, path: Path, cells: list[int] | None,
                              kernel_id: str | None = None) -> None:
    """Steps 1 to 8 of the module's docstring for the notebook at ``path``, in ``shared``'s page: with
    ``cells=None`` the notebook's kernel is fresh and Run All runs every cell; otherwise every cell has
    already run in the kernel the page connects to (nbval's), and only ``cells`` (:func:`lab_cells`: the
    panel cells and the cells that drive them) run again in the page, so that their panels are live
    there and have been driven, as after Run All; the page must then be connected to ``kernel_id``."""
    page, lab = shared.page, shared.lab
    what = "Run All" if cells is None else f"running its lab's cells {cells} in the page"
    start = time.perf_counter()
    times: dict[str, float] = {}
    exercised: list[str] = []
    page_errors: list[str] = page.errors
    page_errors.clear()
    page.console_errors.clear()
    nb = NotebookPage(page, lab, path.name)
    for old in SCREENSHOTS.glob(f"{path.stem}-*"):  # nothing stale from an earlier run
        old.unlink()
    outcome = "failed"
    try:
        nb.open(reload=not shared.loaded)
        shared.loaded = True
        times["open"] = time.perf_counter() - start
        if kernel_id is not None:
            assert nb.kernel_id() == kernel_id, (f"{path.name}: the page opened the notebook on kernel "
                                                 f"{nb.kernel_id()}, not on nbval's {kernel_id}")
        nb.screenshot("1-opened")
        problems = nb.unexpected_errors()
        assert not problems, f"{path.name} shows errors before anything ran:\n  " + "\n  ".join(problems)

        if cells is None:
            times["run all"] = nb.run_all()
        else:
            times["lab's cells"] = nb.run_cells(cells)
        problems = nb.unexpected_errors()
        assert not problems, f"{path.name} shows errors after {what}:\n  " + "\n  ".join(problems)
        live = nb.live_panels()
        assert live, f"{path.name}: no live panel (hooklab.Panel with enabled controls) after {what}"
        outputs_after_run = [len(c["outputs"]) for c in nb.cells()]

        mark = time.perf_counter()
        firsts: dict[int, tuple[View, list[dict[str, Any]]]] = {}
        for n, index in enumerate(live):
            nb.panel_index = index
            if n == 0:
                nb.screenshot("2-before")
            exercised.append(f"panel {nb.panel()['title']!r}")
            check_accessibility(nb, exercised)
            first = nb.reset()
            check_first_view(nb, path, first, exercised)
            firsts[index] = (first, nb.panel()["controls"])
            exercise_panel(nb, exercised, screenshot=(n == 0),
                           texts=EXPECTATIONS.get(path.name, {}).get("type"))
        spec = EXPECTATIONS.get(path.name)
        if spec:
            titles = [nb.panels()[i]["title"] for i in live]
            nb.panel_index = live[titles.index(spec["panel"])] if "panel" in spec else live[0]
            check_expectations(nb, spec, exercised)
        for index in live:
            nb.panel_index = index
            check_reset(nb, *firsts[index], exercised)
        check_busy(nb, exercised)
        times["controls"] = time.perf_counter() - mark

        problems = nb.unexpected_errors()
        assert not problems, f"{path.name} shows errors after the controls were used:\n  " + "\n  ".join(problems)
        assert [len(c["outputs"]) for c in nb.cells()] == outputs_after_run, \
            f"{path.name}: using the controls added output to cells (a callback printed?)"
        assert not page_errors, f"{path.name}: JavaScript errors on the page: {page_errors}"
        console = unexpected_console_errors(page.console_errors)
        assert not console, f"{path.name}: errors in the browser's console: {[str(e) for e in console]}"
        nb.panel_index = live[0]
        nb.screenshot("4-after")
        outcome = "passed"
    finally:
        total = time.perf_counter() - start
        if outcome == "failed":
            try:
                nb.screenshot("failed")
            except Exception:  # the page may be gone; the report still gets written
                pass
        write_report(path.name, [
            f"{path.name}: {outcome} in {total:.1f} s (" + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()) + ")",
            "", "controls exercised:", *exercised, "", "every action, and the view after it:", *nb.log,
            *(["", "JavaScript errors:", *page_errors] if page_errors else []),
            *(["", "console errors (only an offline machine's failure to load a launch badge is allowed):",
                *map(str, page.console_errors)] if page.console_errors else [])])
        print(f"\n[browser] {path.name}: {outcome} in {total:.1f} s "
              f"({', '.join(f'{k} {v:.1f} s' for k, v in times.items())}); {len(nb.log)} control changes")
        try:
            nb.close()
            page.goto("about:blank")  # nothing in the page polls the server while the next notebook runs
        except Exception:
            outcome = "failed"
        # the next notebook starts from a freshly loaded JupyterLab: one page that kept every notebook's
        # widgets and pictures grew until Chromium's renderer crashed (at the tenth notebook, once)
        shared.loaded = False
        lab.shutdown_kernels()
    if total > TARGET_SECONDS:
        print(f"[browser] {path.name} took {total:.0f} s, over the {TARGET_SECONDS} s aim (a busy machine?)")


#: A panel whose view takes 0.6 s to compute (served beside the notebooks, never saved under notebooks/).
SLOW_PANEL = """import time
import hooklab
def slow(p):
    time.sleep(0.6)
    return {"ticked": p.values["a"]}
panel = hooklab.Panel("slow lab", slow)
_ = panel.toggle("a", lambda hooks, p: None)
panel"""


@pytest.mark.browser
def test_busy_state_is_visible_while_a_slow_view_is_computed(request: pytest.FixtureRequest) -> None:
    shared = need_browser(request.config)
    page, lab = shared.page, shared.lab
    page.errors.clear()
    page.console_errors.clear()
    name = "zz_slow_panel.ipynb"
    kernel = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(SLOW_PANEL)], metadata=kernel),
                   lab.root / "notebooks" / name)
    nb = NotebookPage(page, lab, name)
    try:
        nb.open(reload=not shared.loaded)
        shared.loaded = True
        nb.run_all()
        nb.panel_index = nb.live_panels()[0]
        assert not nb.busy_shown(), "the busy state is shown before any change"
        busy_ms, view_ms = [], []
        status = page.locator(".hooklab-panel").nth(nb.panel_index).locator(".hooklab-status .hooklab-busy")
        for _ in range(3):
            def click_and_see_busy() -> None:
                nb._control_locator("a").locator("input[type=checkbox]").click()
                status.wait_for(state="visible", timeout=5_000)  # a person sees it while the view is computed
            nb._acted(click_and_see_busy, "click 'a'", "checkbox", settle=False)
            timing = nb.timings[-1]
            assert timing.busy_ms is not None and timing.view_ms is not None
            busy_ms.append(timing.busy_ms)
            view_ms.append(timing.view_ms)
            assert not nb.busy_shown(), "the busy state is still shown after the new view arrived"
        print(f"\n[browser] slow panel: input to busy state {busy_ms} ms, to the new view {view_ms} ms")
        assert min(view_ms) >= 600, f"the view came back before it was computed? {view_ms}"
        # the order of events, not their time (how soon the busy state shows is the benchmark's floor:
        # `python3 dev.py bench`, the training labs in the browser)
        late = [(b, v) for b, v in zip(busy_ms, view_ms) if not b < v]
        assert not late, f"the busy state did not show before the new view (busy, view ms): {late}"
        nb.reset()
        assert nb.timings[-1].busy_ms is not None, "reset showed no busy state"
        assert nb.control("a")["value"] is False and nb.view().rows == {"ticked": "False"}
        assert not page.errors, f"JavaScript errors on the page: {page.errors}"
        console = unexpected_console_errors(page.console_errors)
        assert not console, f"errors in the browser's console: {[str(e) for e in console]}"
    finally:
        try:
            nb.close()
        finally:
            lab.shutdown_kernels()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_error_cells_do_not_stop_run_all(path: Path) -> None:
    """JupyterLab's Run All stops at the first cell that raises, unless the cell has the tag
    ``raises-exception``. A learner who runs everything must reach the live lab, so every cell
    marked NBVAL_RAISES_EXCEPTION carries the tag too (nbval honours the tag as well)."""
    missing = [index for index, cell in code_cells(read(path))
               if has_marker(cell, RAISES) and "raises-exception" not in cell.metadata.get("tags", [])]
    assert not missing, (f"{path.name}: cells {missing} are marked {RAISES} but lack the cell tag "
                         "'raises-exception', so Run All in JupyterLab stops there; add the tag to each")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_every_live_panel_has_a_stored_first_view(path: Path) -> None:
    """The reset check compares with the first view the notebook stores for the panel (found by the
    title its text/plain gives, in single or double quotes as ``repr`` chose): there must be one."""
    views = stored_first_views(path)
    assert views and all(views.values()), f"{path.name}: no stored panel view with table rows: {views}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_each_lab_has_a_cell_that_shows_it_and_one_that_drives_it(path: Path) -> None:
    """After nbval, the page runs only :func:`lab_cells` again: the panel must then be shown and driven
    (step 5's first reset follows a driving cell's change), so both kinds must be found."""
    cells, shown = lab_cells(path), panel_cells(path)
    assert shown and set(shown) < set(cells), (f"{path.name}: panel cells {shown}, lab cells {cells}: no later cell "
                                               "uses the name the panel cell shows the panel by")


def test_expectations_say_what_a_per_run_figure_may_be() -> None:
    """A per-run figure (≈) is expected as ``About(text, within)``: a plain ``"≈92.8%"`` would match any
    figure, as nbval's mask does, and the expectation could be wrong without anyone noticing."""
    plain = [(name, number, row, want) for name, spec in EXPECTATIONS.items()
             for number, step in enumerate(spec["steps"], 1) for row, wanted in step.expect.items()
             for want in (wanted if isinstance(wanted, list) else [wanted])
             if isinstance(want, str) and "≈" in want]
    assert not plain, f"expect these per-run figures as About(text, within=...): {plain}"


def test_about_matches_figures_within_the_tolerance_only() -> None:
    about = About("horizontal (≈100%), row ≈10", within=2)
    assert about.matches("horizontal (≈99%), row ≈12", sanitize)
    assert not about.matches("horizontal (≈97%), row ≈10", sanitize)  # 3 points off
    assert not about.matches("vertical (≈100%), row ≈10", sanitize)  # the words are exact
    assert not about.matches("horizontal (≈-100%), row ≈10", sanitize)  # so are the sign and the unit
    assert not about.matches("horizontal (≈1.00), row ≈10", sanitize)
    assert not about.matches("horizontal (100%), row ≈10", sanitize)  # a per-run figure, marked ≈
    with pytest.raises(AssertionError, match="no per-run figure"):
        About("92.8%", within=1)


def test_expectations_name_real_notebooks() -> None:
    unknown = sorted(set(EXPECTATIONS) - set(IDS))
    assert not unknown, f"tests/browser_expectations.py names notebooks that do not exist: {unknown}"
    missing = sorted(set(IDS) - set(EXPECTATIONS))
    assert not missing, (f"no exact browser steps for {missing}: add the values the notebook's driving cell "
                         "prints to tests/browser_expectations.py")
