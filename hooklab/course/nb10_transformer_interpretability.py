"""Helpers and exercises of notebook 10 (record, patch and steer a transformer with hooks).

The notebook keeps every hook in plain sight; this module holds what is not about hooks: the toy
task, the tiny transformer and its training, the logit difference, a text table, the pictures,
and the three exercises (their checkers and worked solutions).

**The task.** A sequence of 8 tokens: digits ``0``-``9``, one marker ``=`` somewhere among the first
six, and a query ``?`` at the end. The answer, predicted at the last position, is the digit right
after the marker. So the answer depends on one earlier token, and which one depends on where the
marker is: the model has to find it.

>>> import hooklab.course.nb10_transformer_interpretability as nb10
>>> tokens, answers = nb10.make_batch(2, seed=0)
>>> [nb10.text(t) for t in tokens], answers.tolist()
(['= 9 3 0 3 9 7 ?', '= 3 1 6 6 9 8 ?'], [9, 3])
>>> pairs = nb10.make_pairs(2, seed=0)
>>> nb10.text(pairs.clean[0]), nb10.text(pairs.corrupted[0]), pairs.changed
('4 9 = 0 3 9 7 ?', '4 9 = 1 3 9 7 ?', 3)

**The model.** Token and position embeddings (``embed``), two pre-norm transformer blocks
(``blocks.0``, ``blocks.1``: causal self-attention with 2 heads, then an MLP, each added to the
residual stream), a final LayerNorm (``ln_f``) and a linear read-out to the 12 token scores
(``unembed``). The attention is written out so that each head's output reaches ``attn.out_proj``
as a slice of its input, which a forward pre-hook can edit.

>>> model = nb10.TinyTransformer()
>>> model(tokens).shape, [n for n, _ in model.named_children()]
(torch.Size([2, 8, 12]), ['embed', 'blocks', 'ln_f', 'unembed'])
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..lab.exercises import Exercise, Mistake
from .checks import made_hook
from ..hooks import Hooks
from ..table import Table
from ..claims import approx
from ..inspection import count_hooks
from ..lab.plots import LABEL, SMALL, TITLE, LiveCanvas, figure, fixed_layout
from ..threads import threads
from .data import seeded

__all__ = ["DIGITS", "MARKER", "QUERY", "VOCAB", "LENGTH", "TOKENS", "text", "make_batch", "Pairs", "make_pairs",
           "TinyTransformer", "Trained", "train", "logit_diff", "accuracy", "share", "table", "draw_map", "draw_lab",
           "LiveLab",
           "head_patch_exercise", "steering_exercise", "run_with_hooks_exercise", "trained_copy"]

#: The digits are tokens 0-9; then the marker and the query.
DIGITS, MARKER, QUERY = 10, 10, 11
VOCAB, LENGTH = 12, 8
TOKENS = [str(d) for d in range(DIGITS)] + ["=", "?"]
#: The seed of the test examples (never used for training).
TEST_SEED = 12345


def text(tokens: torch.Tensor) -> str:
    """One sequence as text: ``'4 9 = 0 3 9 7 ?'``."""
    return " ".join(TOKENS[t] for t in tokens.tolist())


def _generator(seed: int | torch.Generator) -> torch.Generator:
    return seed if isinstance(seed, torch.Generator) else torch.Generator().manual_seed(seed)


def make_batch(n: int, seed: int | torch.Generator = 0,
               marker_at: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` sequences ``[n, 8]`` and their answers ``[n]``: random digits, the marker at a random
    position among the first six (or at ``marker_at``), the query last; the answer is the digit
    right after the marker."""
    g = _generator(seed)
    tokens = torch.randint(0, DIGITS, (n, LENGTH), generator=g)
    if marker_at is None:
        where = torch.randint(0, LENGTH - 2, (n,), generator=g)
    else:
        if not 0 <= marker_at <= LENGTH - 3:
            raise ValueError(f"marker_at must be between 0 and {LENGTH - 3}, got {marker_at}.")
        where = torch.full((n,), marker_at)
    rows = torch.arange(n)
    tokens[rows, where] = MARKER
    tokens[:, -1] = QUERY
    return tokens, tokens[rows, where + 1].clone()


@dataclass
class Pairs:
    """Clean and corrupted sequences that differ in one token only: the digit after the marker,
    at position ``changed``. ``clean_answers`` and ``corrupted_answers`` are those two digits."""

    clean: torch.Tensor
    corrupted: torch.Tensor
    clean_answers: torch.Tensor
    corrupted_answers: torch.Tensor
    changed: int


def make_pairs(n: int, seed: int = 0, marker_at: int = 2, digits: tuple[int, int] | None = None) -> Pairs:
    """``n`` clean/corrupted pairs, the marker at ``marker_at`` in all of them (so that the
    changed token sits at the same position, ``marker_at + 1``, in every pair). The two digits
    at that position are random and different, or ``digits = (clean digit, corrupted digit)``."""
    g = _generator(seed)
    clean, answers = make_batch(n, g, marker_at=marker_at)
    if digits is None:
        other = (answers + torch.randint(1, DIGITS, (n,), generator=g)) % DIGITS  # always another digit
    else:
        if digits[0] == digits[1]:
            raise ValueError(f"the clean and the corrupted digit must differ, got {digits}.")
        answers = torch.full((n,), digits[0])
        clean[:, marker_at + 1] = answers
        other = torch.full((n,), digits[1])
    corrupted = clean.clone()
    corrupted[:, marker_at + 1] = other
    return Pairs(clean, corrupted, answers, other, marker_at + 1)


# ---------------------------------------------------------------------- the model
class Embed(nn.Module):
    """Token embedding plus a learned position embedding: the start of the residual stream."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.token = nn.Embedding(VOCAB, width)
        self.position = nn.Embedding(LENGTH, width)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.token(tokens) + self.position.weight[: tokens.shape[1]]


class Attention(nn.Module):
    """Causal self-attention written out: ``qkv`` makes queries, keys and values for every head,
    each head mixes the values of the positions up to its own, and ``out_proj`` maps the heads'
    outputs, side by side (``[batch, position, heads * head_dim]``, head ``h`` in columns
    ``h * head_dim`` to ``(h + 1) * head_dim``), back to the residual stream."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"width {width} is not a multiple of heads {heads}.")
        self.heads, self.head_dim = heads, width // heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out_proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # [batch, heads, query, key]
        future = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
        pattern = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
        heads_out = (pattern @ v).transpose(1, 2).reshape(batch, length, width)  # heads side by side
        return self.out_proj(heads_out)


class MLP(nn.Module):
    """``fc_in`` -> ReLU -> ``fc_out``, applied at every position."""

    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.fc_in = nn.Linear(width, hidden)
        self.act = nn.ReLU()
        self.fc_out = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc_out(self.act(self.fc_in(x)))


class Block(nn.Module):
    """A pre-norm transformer block: ``x + attn(ln1(x))``, then ``+ mlp(ln2(x))``."""

    def __init__(self, width: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = Attention(width, heads)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = MLP(width, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyTransformer(nn.Module):
    """``embed`` -> ``blocks.0`` -> ``blocks.1`` -> ``ln_f`` -> ``unembed``: scores for every
    token at every position, ``[batch, 8, 12]`` (the task reads the last position)."""

    def __init__(self, width: int = 32, heads: int = 2, hidden: int = 64, layers: int = 2) -> None:
        super().__init__()
        self.embed = Embed(width)
        self.blocks = nn.ModuleList([Block(width, heads, hidden) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(width)
        self.unembed = nn.Linear(width, VOCAB, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.unembed(self.ln_f(x))


def logit_diff(logits: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """At the last position, the score of token ``a`` minus that of token ``b``, per example.

    >>> logits = torch.zeros(1, 8, 12); logits[0, -1, 3] = 2.5
    >>> logit_diff(logits, torch.tensor([3]), torch.tensor([5])).tolist()
    [2.5]
    """
    last = logits[:, -1]
    return last.gather(1, a[:, None])[:, 0] - last.gather(1, b[:, None])[:, 0]


def accuracy(logits: torch.Tensor, answers: torch.Tensor) -> float:
    """The share of examples whose highest score at the last position is the answer."""
    return (logits[:, -1].argmax(-1) == answers).float().mean().item()


@dataclass
class Trained:
    """A trained model, its accuracy on 2,000 test examples it never saw, and every step's loss."""

    model: TinyTransformer
    test_accuracy: float
    losses: list[float]
    seed: int


def train(seed: int = 0, steps: int = 200, batch: int = 128, lr: float = 1e-2) -> Trained:
    """Train a :class:`TinyTransformer` on fresh batches of the task (AdamW, cross-entropy at the
    last position), seeded: the same weights for the same seed on the same machine. One CPU thread:
    for a model this small that is as fast as two, and it stays fast on a busy machine. The model
    comes back in eval mode."""
    with threads(1):
        model = seeded(seed, TinyTransformer)
        data = torch.Generator().manual_seed(10_000 + seed)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
        losses = []
        for _ in range(steps):
            tokens, answers = make_batch(batch, data)
            loss = F.cross_entropy(model(tokens)[:, -1], answers)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        model.eval()
        tokens, answers = make_batch(2000, TEST_SEED)
        with torch.no_grad():
            test_accuracy = accuracy(model(tokens), answers)
    return Trained(model, test_accuracy, losses, seed)


# ---------------------------------------------------------------------- printing and pictures
def share(value: float) -> str:
    """A share as a per-run percentage, ``≈97%``: rounded to whole percents first, so that a share a hair
    below 0 shows ``≈0%`` as one a hair above it does (the comparison of outputs across CPUs masks the
    digits of a per-run figure, not its sign).

    >>> share(-0.0025), share(0.0025), share(0.966)
    ('≈0%', '≈0%', '≈97%')
    """
    return approx(round(value, 2) + 0.0, ".0%")


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Rows under a header, as aligned text (:class:`hooklab.table.Table`: a per-run figure counts as
    the same width on any CPU, so the columns line up the same everywhere).

    >>> print(table(["layer", "recovered"], [["embed", "100%"]]))
    layer  recovered
    -----  ---------
    embed  100%
    >>> short, long = table(["a", "b"], [["≈-0%", "x"]]), table(["a", "b"], [["≈100%", "x"]])
    >>> short.splitlines()[:2] == long.splitlines()[:2]  # the header and the rule
    True
    """
    return Table(header, rows).to_text()


def draw_map(ax: Any, values: torch.Tensor, rows: Sequence[str], tokens: torch.Tensor | None = None,
             title: str = "", picked: tuple[int, int] | None = None) -> Any:
    """A layer x position map of shares (0 = nothing recovered, 1 = everything) on ``ax``: one
    row per layer, one column per position (labelled with ``tokens`` if given), each cell
    written as a percentage, and a frame around the ``picked`` (row, column)."""
    import matplotlib.patches as patches

    shown = values.detach().float()
    ax.imshow(shown.numpy(), cmap="cividis", vmin=0.0, vmax=1.0, aspect="auto")
    for r in range(shown.shape[0]):
        for c in range(shown.shape[1]):
            v = float(shown[r, c])
            ax.text(c, r, f"{round(v, 2) + 0.0:.0%}", ha="center", va="center", fontsize=SMALL, color="black" if v > 0.6 else "white")
    ax.set_yticks(range(len(rows)), list(rows), fontsize=LABEL)
    labels = [f"{i}\n{TOKENS[t]}" for i, t in enumerate(tokens.tolist())] if tokens is not None else \
        [str(i) for i in range(shown.shape[1])]
    ax.set_xticks(range(shown.shape[1]), labels, fontsize=LABEL)
    ax.set_xlabel("position (and the first pair's clean token there)" if tokens is not None else "position",
                  fontsize=LABEL)
    if picked is not None:
        r, c = picked
        ax.add_patch(patches.Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, edgecolor="#d62728", linewidth=2.5))
    if title:
        ax.set_title(title, fontsize=TITLE)
    return ax


def draw_lab(fig: Any, values: torch.Tensor, rows: Sequence[str], tokens: torch.Tensor, picked: tuple[int, int],
             scores: dict[str, float], title: str) -> Any:
    """The lab's picture: the patching map with the picked cell framed (left) and the logit
    difference of the clean run, the corrupted run and the run the lab's hooks make (right). No
    layout engine (fixed margins): the lab redraws it on every change."""
    fixed_layout(fig, left=0.09, right=0.98, bottom=0.26, top=0.88, wspace=0.45)
    left, right = fig.subplots(1, 2, width_ratios=[3, 1.3])
    draw_map(left, values, rows, tokens, title=title, picked=picked)
    names = list(scores)
    colors = ["#3b6fb6", "#b3261e", "#444444"][: len(names)]
    right.barh(range(len(names)), [scores[n] for n in names], color=colors)
    right.set_yticks(range(len(names)), names, fontsize=LABEL)
    right.invert_yaxis()
    right.axvline(0, color="#999", linewidth=0.8)
    limit = max(12.0, *(abs(v) for v in scores.values()))
    right.set_xlim(-limit, limit)
    right.set_xlabel("logit difference", fontsize=LABEL)
    right.tick_params(axis="x", labelsize=SMALL)
    return fig


class LiveLab:
    """The lab's picture (:func:`draw_lab`) built once, for a panel that redraws it on every change:
    :meth:`png` moves the frame to the cell picked and sets the bar of the run with the hooks, and
    redraws only those (:class:`hooklab.plots.LiveCanvas`); a full draw only when the bars' axis has to
    widen. The same picture as :func:`draw_lab` with these values, in a fraction of its time.

    >>> live = LiveLab(torch.rand(3, 8), ["embed", "blocks.0", "blocks.1"], make_batch(1)[0][0], 10.0, -10.0, "t")
    >>> live.png((2, 7), 3.0)[:4], live.canvas.full_draws, live.png((0, 1), -2.0)[:4], live.canvas.full_draws
    (b'\\x89PNG', 1, b'\\x89PNG', 1)
    """

    def __init__(self, values: torch.Tensor, rows: Sequence[str], tokens: torch.Tensor, clean: float,
                 corrupted: float, title: str, figsize: tuple[float, float] = (8.0, 2.4)) -> None:
        self.fig, self.fixed = figure(figsize), (clean, corrupted)
        draw_lab(self.fig, values, rows, tokens, (0, 0),
                 {"clean run": clean, "corrupted run": corrupted, "with the hooks": corrupted}, title)
        from matplotlib.patches import Rectangle

        left, self.bars = self.fig.axes
        frame, bar = left.patches[-1], self.bars.patches[2]  # the pick's frame, the third bar
        assert isinstance(frame, Rectangle) and isinstance(bar, Rectangle)
        self.frame, self.bar = frame, bar
        # what a full draw puts over the moving parts moves with them: the zero line and the spines
        moving = [self.frame, self.bar, *self.bars.lines, *self.bars.spines.values(), *left.spines.values()]
        self.canvas = LiveCanvas(self.fig, moving)

    def png(self, picked: tuple[int, int], hooked: float) -> bytes:
        """The picture with ``picked`` (row, column) framed and ``hooked`` as the third bar, as PNG bytes."""
        row, column = picked
        self.frame.set_xy((column - 0.5, row - 0.5))
        self.bar.set_width(hooked)
        limit = max(12.0, *(abs(v) for v in (*self.fixed, hooked)))  # as draw_lab sets it
        self.bars.set_xlim(-limit, limit)
        return self.canvas.png(key=limit)


# ---------------------------------------------------------------------- exercise 1: patch one head
def _heads_input(seed: int) -> torch.Tensor:
    # 3 heads of 4 columns; 9 positions, so that indexing the positions with the head's columns shows
    return torch.randn(2, 9, 3 * 4, generator=torch.Generator().manual_seed(seed))


def _run_pre_hook(hook: Callable, x: torch.Tensor) -> tuple[Any, torch.Tensor]:
    """Run a ``Linear(12, 12)`` on ``x`` with ``hook`` as its forward pre-hook: what the hook returned
    and what the layer got. A returned list is not passed on (the layer would fail on it): the layer
    then gets its input unchanged, and the first check names the mistake."""
    layer = seeded(7, lambda: nn.Linear(12, 12))
    got: list[torch.Tensor] = []
    returned: list[Any] = []

    def learner(module: nn.Module, args: tuple) -> Any:
        returned.append(hook(module, args))
        return None if isinstance(returned[-1], list) else returned[-1]

    with Hooks() as hooks, torch.no_grad():
        hooks.forward_pre(layer, learner)
        hooks.forward_pre(layer, lambda m, args: got.append(args[0].clone()))
        layer(x)
    return returned[0], got[0]


@dataclass
class _HeadCase:
    returned: Any
    got: torch.Tensor          # what out_proj received
    corrupted: torch.Tensor    # args[0] as the hook received it (after the run)
    corrupted_before: torch.Tensor
    clean: torch.Tensor        # the cached clean heads (after the run)
    clean_before: torch.Tensor


def _head_case(make: Callable, head: int = 1) -> _HeadCase:
    clean, corrupted = _heads_input(8), _heads_input(9)
    clean_before, corrupted_before = clean.clone(), corrupted.clone()
    hook = made_hook(make, clean, head, 4, kind="forward_pre", call=f"make_head_patch(clean_heads, {head}, 4)",
                     inner="patch_head")
    returned, got = _run_pre_hook(hook, corrupted)
    return _HeadCase(returned, got, corrupted, corrupted_before, clean, clean_before)


def _check_head_returns(make: Callable) -> None:
    case = _head_case(make)
    if isinstance(case.returned, list):
        raise Mistake("your pre-hook returned a list: return a tuple. PyTorch puts anything that "
                      "is not a tuple into one, so out_proj would get the list itself.")
    if case.returned is None:
        if not torch.equal(case.got, case.corrupted_before):
            raise Mistake("your pre-hook edits args[0] in place and returns nothing: that tensor belongs to the "
                          "attention's computation (and to any other hook that holds it). Clone it, edit the copy "
                          "and return it in a tuple.")
        raise Mistake("out_proj got its input unchanged: a forward pre-hook changes the input only by returning "
                      "the new arguments, as a tuple.")


def _span(indices: list[int]) -> str:
    return f"{indices[0]} to {indices[-1]}" if indices == list(range(indices[0], indices[-1] + 1)) else str(indices)


def _check_head_columns(make: Callable) -> None:
    case = _head_case(make)
    if isinstance(case.returned, list):
        raise Mistake("return a tuple first (see above).")
    got, clean, corrupted = case.got, case.clean_before, case.corrupted_before
    mine = list(range(4, 8))
    positions = [p for p in range(got.shape[1]) if torch.equal(got[:, p], clean[:, p])]
    if positions and len(positions) < got.shape[1]:
        raise Mistake(f"you took positions {_span(positions)} from the clean run: heads_out[:, columns] indexes "
                      "dimension 1, the positions. The heads are the last dimension.")
    from_clean = sorted({int(c) for c in ((got == clean) & (clean != corrupted)).nonzero()[:, -1].tolist()})
    if from_clean == mine and torch.equal(got[..., 4:8], clean[..., 4:8]):
        others = [0, 1, 2, 3, 8, 9, 10, 11]
        if not torch.equal(got[..., others], corrupted[..., others]):
            raise Mistake("the other heads' columns changed: leave every column outside head 1 as it was.")
        return
    if from_clean == [1, 4, 7, 10]:
        raise Mistake("you took every third column (1, 4, 7, 10) from the clean run: that reads the last dimension "
                      "as [head_dim, heads]. The heads sit side by side, head h in columns h * head_dim to "
                      "(h + 1) * head_dim.")
    if from_clean == list(range(12)):
        raise Mistake("you patched every head: take only the columns of head `head` from the clean run.")
    if from_clean == list(range(0, 4)) or from_clean == list(range(8, 12)):
        raise Mistake(f"you patched columns {_span(from_clean)}; head 1, of 3 heads of 4 columns each, is columns "
                      "4 to 7: head h starts at column h × head_dim.")
    if not from_clean and (got[..., mine] == 0).all():
        raise Mistake("you set head 1's columns to zero: that is ablation, not a patch. Take them from the clean "
                      "run's clean_heads.")
    if not from_clean:
        raise Mistake("nothing came from the clean run: copy head `head`'s columns of clean_heads into the copy.")
    raise Mistake(f"columns {from_clean} came from the clean run; head 1, of 3 heads of 4 columns each, is "
                  "columns 4 to 7.")


def _check_head_clean_kept(make: Callable) -> None:
    case = _head_case(make)
    if not torch.equal(case.clean, case.clean_before):
        raise Mistake("your hook wrote into `clean_heads`, the cached clean run: the next patch would read values "
                      "that are no longer the clean run's. Copy args[0] and write the clean columns into the copy.")


def _check_head_input_kept(make: Callable) -> None:
    case = _head_case(make)
    if not torch.equal(case.corrupted, case.corrupted_before):
        raise Mistake("your pre-hook edited args[0] in place: clone it first (args[0].clone()) and edit the copy.")


head_patch_exercise = Exercise(
    "Patch one head: a forward pre-hook on out_proj",
    [("returns the new arguments", _check_head_returns),
     ("takes exactly one head's columns from the clean run", _check_head_columns),
     ("leaves the cached clean run as it was", _check_head_clean_kept),
     ("leaves the tensor it received as it was", _check_head_input_kept)],
    solution="hooklab.course._solutions.nb10_transformer_interpretability:make_head_patch",
)


# ---------------------------------------------------------------------- exercise 2: a steering hook
def _layer() -> nn.Module:
    return seeded(3, lambda: nn.Linear(4, 4))


def _inputs(batch: int = 3, length: int = 5, seed: int = 4) -> torch.Tensor:
    return torch.randn(batch, length, 4, generator=torch.Generator().manual_seed(seed))


@dataclass
class _Run:
    returned: Any              # what the learner's hook returned
    output_seen: torch.Tensor  # the output tensor the hooks received (after the run)
    output_before: torch.Tensor
    result: torch.Tensor       # what the layer call returned


def _run_forward_hook(hook: Callable, layer: nn.Module, x: torch.Tensor) -> _Run:
    """Run ``layer(x)`` with ``hook`` registered after an observer that keeps the output tensor the
    hooks receive (and a copy of it as it was then)."""
    seen: list[Any] = []
    returned: list[Any] = []

    def learner(module: nn.Module, args: tuple, output: Any) -> Any:
        returned.append(hook(module, args, output))
        return returned[-1]

    with Hooks() as hooks, torch.no_grad():
        hooks.forward(layer, lambda m, a, out: seen.append((out, out.clone())))
        hooks.forward(layer, learner)
        result = layer(x)
    return _Run(returned[0], seen[0][0], seen[0][1], result)


def _steer_case(make: Callable, strength: float, position: int = 2) -> tuple[_Run, torch.Tensor, torch.Tensor]:
    vector = torch.tensor([1.0, -2.0, 0.5, 3.0])
    vector_before = vector.clone()
    hook = made_hook(make, vector, strength, position, kind="forward",
                     call=f"make_steering_hook(vector, {strength}, {position})", inner="steer")
    return _run_forward_hook(hook, _layer(), _inputs()), vector, vector_before


def _check_steer_adds(make: Callable) -> None:
    run, _, vector = _steer_case(make, 0.5)  # the vector as it was given (a hook may scale it in place)
    plain = run.output_before
    if run.returned is None:
        if not torch.equal(run.output_seen, plain):
            raise Mistake("your hook adds to the output in place and returns nothing; build a new tensor "
                          "(output.clone()), add to that, and `return` it.")
        raise Mistake("the output did not change: a forward hook changes the output only by returning the new one.")
    out = run.result
    if out.shape != plain.shape:
        raise Mistake(f"your hook returned shape {list(out.shape)}; return the whole output, {list(plain.shape)}, "
                      "not only the steered position.")
    if torch.allclose(out[2], plain[2] + 0.5 * vector, atol=1e-6) and not torch.allclose(
            out[:, 2], plain[:, 2] + 0.5 * vector, atol=1e-6):
        raise Mistake("you steered example number 2 of the batch (output[2]), not position 2: the output is "
                      "[batch, position, width], so every example of the batch is steered at output[:, position].")
    wrong = [(plain[:, 2] + vector, "you added the vector itself: add strength * vector (here 0.5 × the vector)."),
             (0.5 * vector.expand_as(plain[:, 2]), "you replaced output[:, position] with strength * vector: add it "
              "to what is there, output[:, position] + strength * vector."),
             (plain[:, 2] + 0.25 * vector, "you added strength × strength × vector: multiply the vector by "
              "strength once."),
             (plain[:, 2] - 0.5 * vector, "you subtracted strength * vector: add it.")]
    for value, message in wrong:
        if torch.allclose(out[:, 2], value, atol=1e-6):
            raise Mistake(message)
    if not torch.allclose(out[:, 2], plain[:, 2] + 0.5 * vector, atol=1e-6):
        raise Mistake("at the position, the result should be output[:, position] + strength * vector.")


def _check_steer_only_there(make: Callable) -> None:
    run, _, vector = _steer_case(make, 0.5)
    plain, out = run.output_before, run.result
    if out.shape != plain.shape:
        raise Mistake("fix the returned shape first (see above).")
    if torch.allclose(out, plain + 0.5 * vector, atol=1e-6):
        raise Mistake("you added the vector at every position; add it at `position` only: output[:, position].")
    others = [p for p in range(out.shape[1]) if p != 2]
    if not torch.equal(out[:, others], plain[:, others]):
        raise Mistake("positions other than `position` changed: add at output[:, position] only.")
    unsteered = [i for i in range(out.shape[0]) if torch.equal(out[i, 2], plain[i, 2])]
    if unsteered:  # how much was added there is the first check's business
        raise Mistake(f"example(s) {unsteered} of the batch were not steered: every example is steered at "
                      "`position`, output[:, position].")


def _check_steer_zero(make: Callable) -> None:
    run, _, _ = _steer_case(make, 0.0)
    if run.returned is not None and not torch.equal(run.result, run.output_before):
        raise Mistake("with strength 0 the output should stay exactly as it was.")


def _check_steer_kept(make: Callable) -> None:
    run, vector, vector_before = _steer_case(make, 0.5)
    if not torch.equal(run.output_seen, run.output_before):
        raise Mistake("your hook edited the module's output in place (+=): start from output.clone().")
    if not torch.equal(vector, vector_before):
        raise Mistake("your hook changed `vector` itself (an in-place *= or +=): the next call would add a "
                      "different vector. Compute strength * vector into a new tensor.")


steering_exercise = Exercise(
    "A steering hook: add a vector at one position",
    [("adds strength × vector at the position", _check_steer_adds),
     ("steers only that position, in every example", _check_steer_only_there),
     ("strength 0 changes nothing", _check_steer_zero),
     ("leaves the output and the vector as they were", _check_steer_kept)],
    solution="hooklab.course._solutions.nb10_transformer_interpretability:make_steering_hook",
)


# ---------------------------------------------------------------------- exercise 3: run with hooks
class _Boom(Exception):
    """Raised by the checker's failing hook."""


def _tiny_model() -> TinyTransformer:
    return seeded(2, lambda: TinyTransformer(width=8, heads=2, hidden=8)).eval()


def _call_run(fn: Callable, model: nn.Module, tokens: torch.Tensor, hooks: list) -> Any:
    with torch.no_grad():
        out = fn(model, tokens, hooks)
    if out is None:
        raise Mistake("your function returns None: `return` what model(tokens) returned.")
    return out


def _where_ran(hook: Callable, ran_on: list[nn.Module]) -> Callable:
    """``hook``, noting the module it runs on in ``ran_on``."""
    def noted(module: nn.Module, args: tuple, output: Any) -> Any:
        ran_on.append(module)
        return hook(module, args, output)
    return noted


def _check_ran_on(model: nn.Module, name: str, ran_on: list[nn.Module]) -> None:
    wrong = [m for m in ran_on if m is not model.get_submodule(name)]
    if wrong:
        what = "the whole model" if wrong[0] is model else "another module"
        raise Mistake(f"the hook given for {name!r} ran on {type(wrong[0]).__name__}, {what}: register each hook "
                      "on the module its name gives, model.get_submodule(name).")


def _check_run_applies(fn: Callable) -> None:
    model, (tokens, _) = _tiny_model(), make_batch(3, 1)
    replacement = torch.randn(3, LENGTH, 8, generator=torch.Generator().manual_seed(5))  # what the hook returns
    with torch.no_grad():
        plain = model(tokens)
        want = model.unembed(model.ln_f(replacement))
    ran_on: list[nn.Module] = []
    hook = _where_ran(lambda m, a, o: replacement.clone(), ran_on)
    out = _call_run(fn, model, tokens, [("blocks.1", hook)])
    _check_ran_on(model, "blocks.1", ran_on)
    if not isinstance(out, torch.Tensor) or out.shape != plain.shape:
        raise Mistake(f"return the model's output, a tensor of shape {list(plain.shape)}.")
    if torch.equal(out, plain):
        raise Mistake("the output is the plain model's: register each hook on model.get_submodule(name) "
                      "before calling model(tokens).")
    if not torch.allclose(out, want, atol=1e-5):
        raise Mistake("what the hook on 'blocks.1' returned did not decide the output: register the hooks "
                      "with register_forward_hook, on the module each name gives.")


def _check_run_order(fn: Callable) -> None:
    model, (tokens, _) = _tiny_model(), make_batch(2, 1)
    with torch.no_grad():  # before the learner's function runs: a hook it leaves behind cannot change this
        want = model.unembed(model.ln_f(model.blocks[1](model.blocks[0](model.embed(tokens)) * 2 + 1)))
    order: list[str] = []
    ran_on: list[nn.Module] = []

    def first(m, a, o):
        order.append("first")
        return o * 2

    def second(m, a, o):
        order.append("second")
        return o + 1

    hooks = [("blocks.0", _where_ran(first, ran_on)),
             ("blocks.0", _where_ran(second, ran_on))]
    out = _call_run(fn, model, tokens, hooks)
    _check_ran_on(model, "blocks.0", ran_on)
    if order != ["first", "second"]:
        raise Mistake(f"two hooks on one module ran in the order {order}; register them in the order given.")
    if not torch.allclose(out, want, atol=1e-5):
        raise Mistake("each hook should get what the hook before it returned (register them all, in order).")


def _check_run_removes(fn: Callable) -> None:
    model, (tokens, _) = _tiny_model(), make_batch(2, 1)
    with torch.no_grad():  # what it returns is the first check's business
        fn(model, tokens, [("blocks.0", lambda m, a, o: None), ("ln_f", lambda m, a, o: None)])
    left = count_hooks(model, include_global=False)
    if left:
        some = ", not only the last," if left == 1 else ""
        raise Mistake(f"{left} of the 2 hooks {'is' if left == 1 else 'are'} still on the model after your "
                      f"function returned: keep every handle (in a list){some} and call handle.remove() on each "
                      "once the model has run.")


def _check_run_removes_on_error(fn: Callable) -> None:
    model, (tokens, _) = _tiny_model(), make_batch(2, 1)

    def boom(m, a, o):
        raise _Boom("a hook failed")

    try:
        with torch.no_grad():
            fn(model, tokens, [("blocks.0", lambda m, a, o: None), ("blocks.1", boom)])
    except _Boom:
        pass
    else:
        raise Mistake("a hook raised an error, but your function did not pass it on: let it reach the caller "
                      "(no bare except).")
    left = count_hooks(model, include_global=False)
    if left:
        raise Mistake(f"a hook raised, and {left} of the 2 hooks stayed on the model: remove every handle in a "
                      "`finally:` block, which runs also when the forward pass raises.")


run_with_hooks_exercise = Exercise(
    "Temporary hooks, given by module name",
    [("applies the hooks", _check_run_applies),
     ("registers them in the order given", _check_run_order),
     ("leaves no hook behind", _check_run_removes),
     ("leaves no hook behind when a hook raises", _check_run_removes_on_error)],
    solution="hooklab.course._solutions.nb10_transformer_interpretability:run_with_hooks", level="stretch",
)


@functools.lru_cache(maxsize=4)
def _trained(seed: int) -> Trained:
    return train(seed)


def trained_copy(seed: int = 0) -> Trained:
    """:func:`train` once per seed and process, then a copy of that model each call (for tests)."""
    import copy

    return copy.deepcopy(_trained(seed))
