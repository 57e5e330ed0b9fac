"""Warnings as records: the text every writer prints, plus what it is about.

A :class:`Note` is a ``str`` (so it prints, masks and compares as its text) that also carries the
table it concerns (``epoch_time``, ``gpu``, ``computation``, ``throughput``, or ``""`` for the
report as a whole), its kind (``skipped``, ``dropped``, ``estimated``, ``missing``, ...) and, for
skipped runs, how many (``runs``). Writers group by these fields; none parses the text.
"""

from __future__ import annotations

from collections.abc import Iterable


class Note(str):
    """A warning's text with its table, kind and count."""

    table: str
    kind: str
    runs: int

    def __new__(cls, text: str, table: str = "", kind: str = "", runs: int = 0) -> Note:
        note = super().__new__(cls, text)
        note.table, note.kind, note.runs = table, kind, runs
        return note

    def record(self) -> dict[str, object]:
        """The note as a JSON object (text masked by the caller)."""
        return {"table": self.table, "kind": self.kind, "runs": self.runs, "text": str(self)}


def tagged(texts: Iterable[str], table: str, kind: str = "") -> list[Note]:
    """``texts`` as notes of ``table``; a note that already names its table keeps it."""
    out = []
    for text in texts:
        if isinstance(text, Note) and text.table:
            out.append(text)
        else:
            own_kind = text.kind if isinstance(text, Note) else ""
            runs = text.runs if isinstance(text, Note) else 0
            out.append(Note(str(text), table, own_kind or kind, runs))
    return out


def like(text: str, note: str) -> str:
    """``text`` (a masked or shortened form of ``note``) with ``note``'s table, kind and count."""
    if isinstance(note, Note):
        return Note(text, note.table, note.kind, note.runs)
    return text


def table_of(text: str) -> str:
    """The table a warning concerns ("" when it is about the report as a whole)."""
    return text.table if isinstance(text, Note) else ""


def skipped_runs(texts: Iterable[str]) -> int:
    """How many runs the loader's ``skipped`` notes count."""
    return sum(t.runs for t in texts if isinstance(t, Note) and t.kind == "skipped")
