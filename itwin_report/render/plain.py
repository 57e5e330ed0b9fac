"""Plain aligned text: the layout for pipes, files and ``NO_COLOR`` terminals."""

from __future__ import annotations

from itwin_report.render.layout import Block, Footer, Layout, Notes, Table, Title
from itwin_report.util.escape import terminal


def write(layout: Layout) -> str:
    """The layout as plain text; every value escaped for a terminal."""
    out: list[str] = []
    for block in layout.blocks:
        out += _block(block)
    return "\n".join(out) + "\n"


def _block(block: Block) -> list[str]:
    if isinstance(block, Title):
        return [terminal(block.line), ""]
    if isinstance(block, Table):
        lines = [block.heading, "=" * len(block.heading)]
        if block.rows:
            rows = [[terminal(c) for c in row] for row in block.rows]
            lines += aligned(block.headers, rows, block.right)
        else:
            lines.append(block.empty)
        if block.notes:
            lines += ["", *_notes(block.notes)]
        return [*lines, ""]
    if isinstance(block, Notes):
        return [*_notes(block), ""]
    if isinstance(block, Footer):
        return [terminal(block.text)]
    raise TypeError(f"unknown block {block!r}")


def _notes(notes: Notes) -> list[str]:
    return [f"{notes.title}:", *(f"- {terminal(item)}" for item in notes.items)]


def aligned(headers: list[str], rows: list[list[str]], right: list[bool]) -> list[str]:
    """Header, dashes and rows, columns two spaces apart, numbers right-aligned."""
    widths = [max(len(c) for c in col) for col in zip(headers, *rows, strict=True)]

    def line(values: list[str]) -> str:
        parts = [
            v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right, strict=True)
        ]
        return "  ".join(parts).rstrip()

    return [line(headers), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]
