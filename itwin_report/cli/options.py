"""Options shared by several commands, defined once (light: click only)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import click

STORE_HELP = (
    "sqlite:///x.db, postgresql://…, http(s)://server, or a file-store path "
    "(default: $MLFLOW_TRACKING_URI, else sqlite:///mllogs/mlflow.db)."
)


def tracking_uri_option(help_text: str = STORE_HELP) -> Callable[[Any], Any]:
    """``--tracking-uri URI``: the store to read or write."""
    return click.option("--tracking-uri", metavar="URI", help=help_text)


def format_option(
    choices: Sequence[str], help_text: str = "Output format."
) -> Callable[[Any], Any]:
    """``--format`` (into ``fmt``) among ``choices``, the first by default."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(list(choices)),
        default=choices[0],
        show_default=True,
        help=help_text,
    )


def output_option(help_text: str) -> Callable[[Any], Any]:
    """``--output/-o FILE``: where the command's text goes instead of stdout."""
    from pathlib import Path

    return click.option(
        "--output", "-o", type=click.Path(dir_okay=False, path_type=Path), help=help_text
    )


def warmup_option(help_text: str) -> Callable[[Any], Any]:
    """``--warmup-epochs N`` (default 1): epochs left out of every run's epoch times."""
    return click.option(
        "--warmup-epochs", type=click.IntRange(min=0), default=1, show_default=True, help=help_text
    )


class Threshold(click.ParamType):
    """A finite number >= 0 (``nan`` and ``inf`` are bad usage, not a gate that always passes)."""

    name = "X"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float):
            number = value
        else:
            try:
                number = float(value)
            except (TypeError, ValueError):
                self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number) or number < 0:
            self.fail(f"{value!r} is not a finite number >= 0", param, ctx)
        return number


class Efficiency(Threshold):
    """An efficiency threshold: a fraction from 0 to 1 (70 is refused: did you mean 0.70?)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if number > 1:
            self.fail(
                f"{value!r} is above 1: efficiency is a fraction from 0 to 1; "
                f"did you mean {number / 100:.2f}?",
                param,
                ctx,
            )
        return number
