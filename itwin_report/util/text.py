"""Wording shared by every message: counts with their noun, lists of names cut short."""

from __future__ import annotations


def plural(count: float, noun: str, nouns: str | None = None) -> str:
    """``1 worker``, ``2 workers``, ``0.5 workers`` (``nouns``: an irregular plural)."""
    shown = str(int(count)) if float(count).is_integer() else f"{count:g}"
    return f"{shown} {noun if count == 1 else nouns or noun + 's'}"


def name_list(names: list[str], limit: int = 5) -> str:
    """``a; b; c and 4 more``: at most ``limit`` names, then a count."""
    shown = "; ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def joined(names: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    if len(names) < 2:
        return "".join(names)
    return f"{', '.join(names[:-1])} and {names[-1]}"
