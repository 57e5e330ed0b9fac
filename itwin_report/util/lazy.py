"""Packages that stay light on import: names loaded from their modules on first access."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def exports(names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` giving each of ``names`` (name -> module) on first access."""

    def __getattr__(name: str) -> Any:
        if name in names:
            return getattr(importlib.import_module(names[name]), name)
        raise AttributeError(name)

    return __getattr__
