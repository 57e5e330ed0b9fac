"""Bounds on the shape of a JSON text, checked on its bytes before a parser builds anything.

A parser that builds Python objects pays for a value nested 100,000 levels deep with memory
that grows with the square of the depth (ijson spells out each value's path) or a
RecursionError, and for a single 512 MiB string with that string, twice. :class:`ShapeGuard`
reads the same bytes a chunk at a time, with numpy, and stops at :data:`MAX_DEPTH` levels of
nesting or a string longer than :data:`MAX_STRING` bytes. A PyTorch trace nests about five
levels and its longest names (C++ templates) are a few KiB.

Light module: numpy only.
"""

from __future__ import annotations

import numpy as np

MAX_DEPTH = 256
MAX_STRING = 1 << 20  # bytes of one string

_DELTA = np.zeros(256, dtype=np.int8)
_DELTA[[ord("{"), ord("[")]] = 1
_DELTA[[ord("}"), ord("]")]] = -1


class ShapeError(ValueError):
    """The text nests too deep or holds too long a string (the message says which)."""


class ShapeGuard:
    """Feed it the bytes of a JSON text in order; :class:`ShapeError` past the bounds."""

    def __init__(self, max_depth: int = MAX_DEPTH, max_string: int = MAX_STRING) -> None:
        self.max_depth, self.max_string = max_depth, max_string
        self.depth = 0
        self.in_string = False
        self.string_len = 0  # bytes of the string still open at the end of the last chunk
        self.backslashes = 0  # backslashes that ended the last chunk

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        data = np.frombuffer(chunk, dtype=np.uint8)
        quotes = self._quotes(data)
        self._check_strings(quotes, len(data))
        toggles = np.zeros(len(data), dtype=np.int8)
        toggles[quotes] = 1
        inside = (np.cumsum(toggles, dtype=np.int64) + self.in_string) % 2 == 1
        delta = _DELTA[data].astype(np.int64)
        delta[inside] = 0
        if delta.any():
            levels = self.depth + np.cumsum(delta)
            if int(levels.max()) > self.max_depth:
                raise ShapeError(f"nested deeper than {self.max_depth} levels")
            self.depth = int(levels[-1])
        self.in_string = bool((self.in_string + len(quotes)) % 2)
        others = np.flatnonzero(data != ord("\\"))
        if len(others):
            self.backslashes = len(data) - 1 - int(others[-1])
        else:
            self.backslashes += len(data)

    def _quotes(self, data: np.ndarray) -> np.ndarray:
        """Positions of the quotes that open or close a string (not escaped ones)."""
        quotes = np.flatnonzero(data == ord('"'))
        after = quotes[(quotes > 0) & (data[np.maximum(quotes - 1, 0)] == ord("\\"))]
        maybe = after.tolist() + ([0] if len(quotes) and quotes[0] == 0 else [])
        escaped = [q for q in maybe if self._escaped(data, q)]
        return np.setdiff1d(quotes, escaped, assume_unique=True) if escaped else quotes

    def _escaped(self, data: np.ndarray, at: int) -> bool:
        """Whether the quote at ``at`` follows an odd run of backslashes (this chunk's and the
        ones that ended the last)."""
        run, i = 0, at - 1
        while i >= 0 and data[i] == ord("\\"):
            run, i = run + 1, i - 1
        if i < 0:
            run += self.backslashes
        return run % 2 == 1

    def _check_strings(self, quotes: np.ndarray, size: int) -> None:
        """Stop at a string longer than the bound (counted across chunks). Quotes alternate
        between opening and closing; a string open since earlier chunks opens before this one."""
        edges = quotes.astype(np.int64)
        if self.in_string:
            edges = np.concatenate(([-self.string_len - 1], edges))
        opens, closes = edges[0::2], edges[1::2]
        lengths = closes - opens[: len(closes)] - 1
        longest = int(lengths.max()) if len(lengths) else 0
        self.string_len = 0
        if len(opens) > len(closes):
            self.string_len = size - int(opens[-1]) - 1
            longest = max(longest, self.string_len)
        if longest > self.max_string:
            raise ShapeError(f"a text value longer than {self.max_string >> 20} MiB")
