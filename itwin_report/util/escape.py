"""Store values are text: escape them for the place they are written, never interpret them.

* terminal (plain and rich tables, warnings): control characters (C0, DEL, C1), bidi
  overrides/isolates and line separators are shown as escapes (``\\x1b``, ``\\n``,
  ``\\u202e``), so a value can neither move the cursor, colour the screen, reorder text nor
  add a line;
* markdown: the same, then backslashes, ``|`` (in cells), the characters that start emphasis,
  code or links, and HTML (``<``, ``>``, ``&``) are escaped;
* CSV: control characters escaped as for a terminal, then text cells starting with
  ``= + - @`` get a leading ``'`` so spreadsheets do not run them as formulas (numbers are
  written as numbers);
* plots: control characters escaped as for a terminal and ``$`` written ``\\$``, so matplotlib
  never reads a value as mathtext (``$x^{2}$`` is drawn as typed, ``$\\foo$`` cannot fail);
* JSON keeps the raw value.

Length: what a person reads (terminal, markdown, HTML, plot labels) shows at most
:data:`MAX_SHOWN` characters of a value, then ``…``; a sentence that quotes values at most
:data:`MAX_LINE`. So the cost of a report stays linear in the size of the store's values. CSV
and JSON keep whole values (they are data).

Light module: standard library only.
"""

from __future__ import annotations

import re

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# C0, DEL, C1; Arabic letter mark; LRM/RLM; line/paragraph separators; bidi embeddings,
# overrides and isolates; BOM
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]"
)
_MD_SPECIAL = re.compile(r"([\\`*_\[\]#])")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
MAX_SHOWN = 200  # characters of one value (a cell, a name, a plot label)
MAX_LINE = 1000  # characters of a sentence (a warning, a note)
ELLIPSIS = "\u2026"


def _escape_char(match: re.Match[str]) -> str:
    char = match.group(0)
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def shorten(value: str, limit: int = MAX_SHOWN) -> str:
    """``value`` cut to ``limit`` characters, the last one an ellipsis when cut."""
    return value if len(value) <= limit else value[: limit - 1] + ELLIPSIS


def terminal(value: str) -> str:
    """``value`` with every control, bidi and line-separator character written as an escape."""
    return _UNSAFE.sub(_escape_char, value)


def markdown(value: str, cell: bool = False) -> str:
    """``value`` safe as markdown text (``cell``: also inside a table cell)."""
    out = _MD_SPECIAL.sub(r"\\\1", terminal(value))
    out = "".join(_HTML.get(c, c) for c in out)
    return out.replace("|", "\\|") if cell else out


def markdown_code(value: str) -> str:
    """``value`` as an inline code span (control characters escaped, no backtick inside)."""
    return "`" + terminal(value).replace("`", "%60") + "`"


def csv_text(value: str) -> str:
    """A text cell that a spreadsheet shows as text, never runs as a formula; no control
    character reaches the file (``\\x1b``, ``\\n`` are written as escapes)."""
    if value.startswith(_FORMULA_START):
        value = "'" + value
    return terminal(value)


def plot_text(value: str, limit: int = MAX_SHOWN) -> str:
    """``value`` as literal matplotlib text: shortened, controls escaped, never mathtext.

    Matplotlib reads text with an even number of unescaped ``$`` as mathtext; every ``$`` is
    escaped (``\\$``), so none is unescaped. A backslash outside mathtext is drawn as is.
    """
    return terminal(shorten(value, limit)).replace("$", r"\$")
