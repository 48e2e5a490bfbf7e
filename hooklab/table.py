"""A tiny table that prints as aligned text and shows as HTML in a notebook."""

from __future__ import annotations

import html
from typing import Any, Sequence

from .claims import is_per_run

#: The width a per-run figure (``≈96.1%``) counts for when the columns are aligned, whatever its
#: digits: the padding of every other cell then does not depend on this run's numbers.
PER_RUN_WIDTH = 7


def _width(cell: str) -> int:
    return PER_RUN_WIDTH if is_per_run(cell) else len(cell)


class Table:
    """Rows under a header. ``str()`` gives aligned plain text (what nbval compares); in a notebook it renders
    as an HTML table. A per-run figure (``≈96.1%``) counts as :data:`PER_RUN_WIDTH` characters wide, so the
    alignment holds on every machine.

    >>> print(Table(["run", "accuracy"], [["a", "≈96.1%"], ["b", "25.0%"]]))
    run  accuracy
    ---  --------
    a    ≈96.1%
    b    25.0%
    """

    def __init__(self, header: Sequence[str], rows: Sequence[Sequence[Any]], title: str = "") -> None:
        self.header = list(header)
        self.rows = [list(r) for r in rows]
        self.title = title

    def __len__(self) -> int:
        return len(self.rows)

    def to_text(self) -> str:
        cells = [self.header] + [[str(c) for c in r] for r in self.rows]
        widths = [max(_width(r[i]) for r in cells) for i in range(len(self.header))]
        lines = [self.title] if self.title else []
        for j, r in enumerate(cells):
            lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
            if j == 0:
                lines.append("  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def to_html(self) -> str:
        head = "".join(f"<th style='text-align:left'>{html.escape(h)}</th>" for h in self.header)
        body = "".join(
            "<tr>" + "".join(f"<td style='text-align:left'><code>{html.escape(str(c))}</code></td>" for c in r) + "</tr>"
            for r in self.rows
        )
        caption = f"<caption style='text-align:left'><b>{html.escape(self.title)}</b></caption>" if self.title else ""
        return f"<table class='hooklab-table'>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def __str__(self) -> str:
        return self.to_text()

    __repr__ = __str__

    def _repr_html_(self) -> str:
        return self.to_html()
