"""Rich text for a terminal: the same layout, styled. Values are ``Text``, never markup."""

from __future__ import annotations

import io
import shutil
from typing import TYPE_CHECKING

from itwin_report.render.layout import Block, Footer, Layout, Notes, Table, Title
from itwin_report.render.safe import terminal

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


def _block(console: Console, block: Block) -> None:
    from rich.table import Table as RichTable

    if isinstance(block, Title):
        console.print(_text(block.line, "bold"))
    elif isinstance(block, Table):
        if not block.rows:
            console.print()
            console.print(_text(block.heading, "bold"))
            console.print(_text(block.empty))
            return
        table = RichTable(title=_text(block.heading), title_style="bold", title_justify="left")
        for header, right in zip(block.headers, block.right, strict=True):
            table.add_column(_text(header), justify="right" if right else "left")
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
