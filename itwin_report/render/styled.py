"""Rich text for a terminal: the same layout, styled. Values are ``Text``, never markup."""

from __future__ import annotations

import io
import shutil
from typing import TYPE_CHECKING

from itwin_report.render.layout import Block, Footer, Layout, Notes, Table, Title
from itwin_report.util.escape import terminal

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text


def write(layout: Layout) -> str:
    """The layout as ANSI-styled text."""
    from rich.console import Console

    width = max(100, shutil.get_terminal_size((160, 24)).columns)
    console = Console(file=io.StringIO(), record=True, force_terminal=True, width=width)
    for block in layout.blocks:
        _block(console, block)
    return console.export_text(styles=True)


def _text(value: str, style: str = "") -> Text:
    from rich.text import Text

    return Text(terminal(value), style=style)


def column_widths(
    headers: list[str], rows: list[list[str]], available: int, gap: int
) -> tuple[bool, list[int] | None]:
    """(fits, widths): whether the table fits ``available`` columns without cutting a word,
    ``gap`` characters between two columns, and the widths that do it.

    Widths are None when every column fits on one line (rich's own layout). Otherwise each
    column gets its longest word, and the room left goes to the columns that need the least
    more to fit whole: headers wrap at spaces, no cell is cut short with an ellipsis.
    """
    columns = [[h, *(row[i] for row in rows)] for i, h in enumerate(headers)]
    natural = [max(len(text) for text in col) for col in columns]
    room = available - gap * (len(headers) - 1)
    if sum(natural) <= room:
        return True, None
    widths = [max((len(w) for text in col for w in text.split()), default=1) for col in columns]
    spare = room - sum(widths)
    if spare < 0:
        return False, None
    for i in sorted(range(len(widths)), key=lambda i: natural[i] - widths[i]):
        extra = min(spare, natural[i] - widths[i])
        widths[i] += extra
        spare -= extra
    return True, widths


# (cell padding, characters between two columns): roomy when the table fits, then tight
# (no padding, only the column rule); a table too wide for that folds its longest words
SPACINGS = ((1, 3), (0, 1))


def spacing(
    headers: list[str], rows: list[list[str]], available: int
) -> tuple[int, list[int] | None]:
    """(cell padding, column widths) of the roomiest :data:`SPACINGS` that fits."""
    for padding, gap in SPACINGS:
        fits, widths = column_widths(headers, rows, available, gap)
        if fits:
            return padding, widths
    return 0, None


def _block(console: Console, block: Block) -> None:
    from rich import box
    from rich.table import Table as RichTable

    if isinstance(block, Title):
        console.print(_text(block.line, "bold"))
    elif isinstance(block, Table):
        if not block.rows:
            console.print()
            console.print(_text(block.heading, "bold"))
            console.print(_text(block.empty))
            return
        cells = [[terminal(c) for c in row] for row in block.rows]
        padding, widths = spacing(block.headers, cells, console.width)
        table = RichTable(
            title=_text(block.heading),
            title_style="bold",
            title_justify="left",
            box=box.MINIMAL,  # column rules only: no outer edge
            show_edge=False,
            pad_edge=False,
            padding=(0, padding),
        )
        for i, (header, right) in enumerate(zip(block.headers, block.right, strict=True)):
            table.add_column(
                _text(header),
                justify="right" if right else "left",
                overflow="fold",  # a word wider than its column folds onto the next line
                width=None if widths is None else widths[i],
            )
        for row in block.rows:
            table.add_row(*(_text(cell) for cell in row))
        console.print()
        console.print(table)
        if block.notes:
            _notes(console, block.notes)
    elif isinstance(block, Notes):
        console.print()
        _notes(console, block)
    elif isinstance(block, Footer):
        console.print()
        console.print(_text(block.text, "dim"))


def _notes(console: Console, notes: Notes) -> None:
    style = "yellow" if notes.warning else ""
    console.print(_text(f"{notes.title}:", f"bold {style}".strip()))
    for item in notes.items:
        console.print(_text(f"- {item}", style))
