"""Markdown (GitHub step summaries, pull requests): the same layout, every value escaped."""

from __future__ import annotations

from itwin_report.render.layout import Block, Footer, Layout, Notes, Table, Title
from itwin_report.util.escape import markdown, markdown_code


def write(layout: Layout) -> str:
    """The layout as GitHub-flavoured markdown."""
    out: list[str] = []
    for block in layout.blocks:
        out += _block(block)
    return "\n".join(out) + "\n"


def _block(block: Block) -> list[str]:
    if isinstance(block, Title):
        return [
            f"# Scalability report: {markdown(block.experiment)}",
            "",
            f"Tracking URI: {markdown_code(block.tracking_uri)}",
        ]
    if isinstance(block, Table):
        lines = ["", f"## {block.heading}", ""]
        if not block.rows:
            return [*lines, block.empty]
        lines.append("| " + " | ".join(block.headers) + " |")
        lines.append("|" + "|".join("---:" if r else "---" for r in block.right) + "|")
        lines += [
            "| " + " | ".join(markdown(c, cell=True) for c in row) + " |" for row in block.rows
        ]
        if block.notes:
            lines += ["", f"{block.notes.title}:", "", *_items(block.notes)]
        return lines
    if isinstance(block, Notes):
        return ["", f"## {block.title}", "", *_items(block)]
    if isinstance(block, Footer):
        return ["", markdown(block.text)]
    raise TypeError(f"unknown block {block!r}")


def _items(notes: Notes) -> list[str]:
    return [f"- {markdown(item)}" for item in notes.items]
