"""Rich text for a terminal: the same layout, styled, fitted to the terminal's width. Values
are ``Text``, never markup.

A table that is too wide for the terminal is fitted step by step (:func:`fit`): columns
without a value in any row (``n/a`` or empty) left out, a line under the table naming them;
tight spacing; headers folded at spaces; then the table split in parts that each repeat its
key columns (strategy, workers). A cell is never cut: a number stays whole with its unit,
and a text cell wraps only between words, never after a number. A table whose key columns
alone do not fit is written as the plain layout writes it. Sentences (title, notes) wrap
between words, never after a number either.
"""

from __future__ import annotations

import io
import re
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING

from itwin_report.render import plain
from itwin_report.render.layout import Block, Footer, Layout, Notes, Table, Title
from itwin_report.report.columns import MISSING
from itwin_report.util.escape import terminal

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table as RichTable
    from rich.text import Text

MIN_WIDTH = 20  # a narrower terminal is written for as if it had this many columns
# (cell padding, characters between two columns): roomy, then tight (only the column rule)
SPACINGS = ((1, 3), (0, 1))
KEYS = ("Strategy", "Workers")  # leading columns repeated in every part of a split table


def write(layout: Layout, width: int | None = None) -> str:
    """The layout as ANSI-styled text for a terminal ``width`` columns wide (default: the
    terminal's, ``COLUMNS`` first)."""
    from rich.console import Console

    if width is None:
        width = shutil.get_terminal_size((160, 24)).columns
    width = max(MIN_WIDTH, width)
    console = Console(file=io.StringIO(), record=True, force_terminal=True, width=width)
    for block in layout.blocks:
        _block(console, block)
    return console.export_text(styles=True)


def _text(value: str, style: str = "") -> Text:
    from rich.text import Text

    return Text(terminal(value), style=style)


_NUMBER_END = re.compile(r"\d[%x]?$")


def chunks(text: str) -> list[str]:
    """``text`` cut where a line may break: between words, except after a number (``134.04 s``,
    ``4 GPUs`` stay together)."""
    out: list[str] = []
    for word in text.split():
        if out and _NUMBER_END.search(out[-1]):
            out[-1] += " " + word
        else:
            out.append(word)
    return out


def wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken only where :func:`chunks`
    allows (a chunk longer than ``width`` has a line of its own)."""
    lines: list[str] = []
    for chunk in chunks(text):
        if lines and len(lines[-1]) + 1 + len(chunk) <= width:
            lines[-1] += " " + chunk
        else:
            lines.append(chunk)
    return lines or [""]


@dataclass(frozen=True)
class Part:
    """Some columns of a table (their indices) at their widths, with the cell padding."""

    columns: list[int]
    widths: list[int]
    padding: int


@dataclass(frozen=True)
class Fitted:
    """A table fitted to a width: its parts (several when split) and the columns left out
    because they are n/a in every row. No parts: write it as the plain layout does."""

    parts: list[Part]
    dropped: list[int]


def _limits(header: str, cells: list[str], right: bool) -> tuple[int, int, int]:
    """(narrowest, cells whole, natural) widths of a column: a number cell is never wrapped,
    a text cell only where :func:`chunks` allows, a header between its words."""
    natural = max(len(text) for text in (header, *cells))
    words = max((len(w) for w in header.split()), default=1)
    whole = max((len(c) for c in cells), default=1)
    least = whole if right else max((len(c) for cell in cells for c in chunks(cell)), default=1)
    least = max(words, least, 1)
    return least, max(least, whole), natural


def widths_for(limits: list[tuple[int, int, int]], room: int) -> list[int] | None:
    """Column widths within ``room`` characters: every column its narrowest, then the room
    left first to whole cells, then to whole headers, each time to the columns that need the
    least more; None when even the narrowest do not fit."""
    widths = [limit[0] for limit in limits]
    spare = room - sum(widths)
    if spare < 0:
        return None
    for goal in (1, 2):
        for i in sorted(range(len(limits)), key=lambda i: limits[i][goal] - widths[i]):
            extra = min(spare, max(0, limits[i][goal] - widths[i]))
            widths[i] += extra
            spare -= extra
    return widths


def fit(headers: list[str], rows: list[list[str]], right: list[bool], width: int) -> Fitted:
    """How a table fits ``width`` columns (see the module's docstring for the order)."""
    limits = [
        _limits(h, [row[i] for row in rows], r)
        for i, (h, r) in enumerate(zip(headers, right, strict=True))
    ]
    every = list(range(len(headers)))
    padding, gap = SPACINGS[0]
    if sum(n for _, _, n in limits) + gap * (len(every) - 1) <= width:  # as it is
        return Fitted([Part(every, [n for _, _, n in limits], padding)], [])
    empty = [i for i in every if rows and all(row[i] in ("", MISSING) for row in rows)]
    keep = [i for i in every if i not in empty] or every
    dropped = [i for i in every if i not in keep]
    whole = [(least, cells, natural) if least == cells else (cells, cells, natural)
             for least, cells, natural in limits]  # fmt: skip
    for padding, gap in SPACINGS:  # roomy before tight, one line per cell, then headers folded
        if sum(limits[i][2] for i in keep) + gap * (len(keep) - 1) <= width:
            return Fitted([Part(keep, [limits[i][2] for i in keep], padding)], dropped)
        widths = widths_for([whole[i] for i in keep], width - gap * (len(keep) - 1))
        if widths is not None:
            return Fitted([Part(keep, widths, padding)], dropped)
    keys = [i for i in keep[: len(KEYS)] if headers[i] in KEYS] or keep[:1]
    rest = [i for i in keep if i not in keys]
    best: list[Part] | None = None
    for padding, gap in SPACINGS:
        parts = _split(keys, rest, limits, width, gap, padding)
        if parts is not None and (best is None or len(parts) < len(best)):
            best = parts
    return Fitted(best or [], dropped)


def _split(
    keys: list[int],
    rest: list[int],
    limits: list[tuple[int, int, int]],
    width: int,
    gap: int,
    padding: int,
) -> list[Part] | None:
    """The columns ``rest`` in order, as many per part as fit beside ``keys`` with their
    cells whole (a column whose cells cannot be whole even alone beside the keys gets a part
    of its own, its text wrapped); None when a column does not fit beside the keys at all."""

    def fits(columns: list[int], whole: bool) -> bool:
        wanted = [
            (limits[c][1], limits[c][1], limits[c][2]) if whole else limits[c] for c in columns
        ]
        return widths_for(wanted, width - gap * (len(columns) - 1)) is not None

    groups: list[list[int]] = []
    current: list[int] = []
    for i in rest:
        if fits(keys + current + [i], whole=True):
            current.append(i)
            continue
        if current:
            groups.append(current)
        if fits([*keys, i], whole=True):
            current = [i]
        elif fits([*keys, i], whole=False):
            groups.append([i])
            current = []
        else:
            return None
    if current or not groups:
        groups.append(current)
    return [_part(keys + group, limits, width, gap, padding) for group in groups]


def _part(
    columns: list[int], limits: list[tuple[int, int, int]], width: int, gap: int, padding: int
) -> Part:
    widths = widths_for([limits[c] for c in columns], width - gap * (len(columns) - 1))
    assert widths is not None  # checked by the caller
    return Part(columns, widths, padding)


def _block(console: Console, block: Block) -> None:
    if isinstance(block, Title):
        _lines(console, block.line, "bold")
    elif isinstance(block, Table):
        console.print()
        if not block.rows:
            _lines(console, block.heading, "bold")
            _lines(console, block.empty)
            return
        _table(console, block)
        if block.notes:
            _notes(console, block.notes)
    elif isinstance(block, Notes):
        console.print()
        _notes(console, block)
    elif isinstance(block, Footer):
        console.print()
        _lines(console, block.text, "dim")


def _table(console: Console, block: Table) -> None:
    cells = [[terminal(c) for c in row] for row in block.rows]
    headers = [terminal(h) for h in block.headers]
    fitted = fit(headers, cells, block.right, console.width)
    if not fitted.parts:  # not even the key columns fit: the plain layout, lines as they are
        _lines(console, block.heading, "bold")
        for line in plain.aligned(headers, cells, block.right):
            console.print(_text(line), soft_wrap=True)
    for k, part in enumerate(fitted.parts):
        heading = block.heading
        if len(fitted.parts) > 1:
            heading += f" ({k + 1} of {len(fitted.parts)})"
            if k:
                console.print()
        console.print(_rich_table(block, headers, cells, heading, part))
    if fitted.dropped:
        names = ", ".join(headers[i] for i in fitted.dropped)
        _lines(console, f"Not shown, no value in any row: {names}.", "dim")


def _rich_table(
    block: Table, headers: list[str], cells: list[list[str]], heading: str, part: Part
) -> RichTable:
    from rich import box
    from rich.table import Table as RichTable
    from rich.text import Text

    table = RichTable(
        title=Text("\n".join(wrap(heading, sum(part.widths) + len(part.widths) - 1))),
        title_style="bold",
        title_justify="left",
        box=box.MINIMAL,  # column rules only: no outer edge
        show_edge=False,
        pad_edge=False,
        padding=(0, part.padding),
    )
    for i, w in zip(part.columns, part.widths, strict=True):
        table.add_column(
            Text("\n".join(wrap(headers[i], w))),
            justify="right" if block.right[i] else "left",
            no_wrap=True,  # the lines are cut here, where a number never loses its unit
            width=w,
        )
    for row in cells:
        table.add_row(
            *(
                Text("\n".join(wrap(row[i], w)))
                for i, w in zip(part.columns, part.widths, strict=True)
            )
        )
    return table


def _lines(console: Console, text: str, style: str = "", indent: str = "") -> None:
    """``text`` wrapped to the console's width (see :func:`wrap`), later lines indented."""
    room = console.width - len(indent)
    for n, line in enumerate(wrap(terminal(text), room)):
        console.print(_text(indent + line if n else line, style), soft_wrap=True)


def _notes(console: Console, notes: Notes) -> None:
    style = "yellow" if notes.warning else ""
    _lines(console, f"{notes.title}:", f"bold {style}".strip())
    for item in notes.items:
        _lines(console, f"- {item}", style, indent="  ")
