"""Options shared by several commands, defined once (light: click only)."""

from __future__ import annotations

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
        "--warmup-epochs",
        type=Rule("warmup_epochs"),
        metavar="N",
        default=1,
        show_default=True,
        help=help_text,
    )


def _number(text: Any) -> Any:
    """A command line's text as a number when it reads as one (the rule words the rest)."""
    if isinstance(text, str):
        try:
            return float(text.strip())
        except ValueError:
            return text
    return text


class Rule(click.ParamType):
    """A value checked by :mod:`itwin_report.options`' rule for ``rule`` (an
    ``OPTION_RANGES`` key): the API's rule and words, as Click's bad usage (exit 2)."""

    name = "X"

    def __init__(self, rule: str) -> None:
        self.rule = rule

    def check(self, value: Any) -> Any:
        from itwin_report import options

        return options.number(self.rule, _number(value))

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from itwin_report.util.errors import BadOption

        try:
            return self.check(value)
        except BadOption as exc:
            self.fail(exc.problem, param, ctx)


class Threshold(Rule):
    """``compare --max-regression``: a finite number >= 0."""

    def __init__(self) -> None:
        super().__init__("max_regression")


class Efficiency(Rule):
    """An efficiency threshold: a fraction from 0 to 1 (70 is refused: did you mean 0.70?)."""

    def __init__(self) -> None:
        super().__init__("fail_under_efficiency")

    def check(self, value: Any) -> Any:
        from itwin_report import options

        return options.efficiency(self.rule, _number(value))


class OneOf(click.Choice):
    """One of :data:`itwin_report.options.CHOICES` ``[rule]``, checked by that rule."""

    def __init__(self, rule: str) -> None:
        from itwin_report.options import CHOICES

        super().__init__(list(CHOICES[rule]))
        self.rule = rule

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from itwin_report import options
        from itwin_report.util.errors import BadOption

        try:
            return options.choice(self.rule, value)
        except BadOption as exc:
            self.fail(exc.problem, param, ctx)


def by_rule(check: Callable[[Any], Any]) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A Click callback applying one of :mod:`itwin_report.options`' functions."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        from itwin_report.util.errors import BadOption

        try:
            return check(value)
        except BadOption as exc:
            raise click.BadParameter(exc.problem, ctx=ctx, param=param) from None

    return callback


class CacheSize(click.ParamType):
    """A cache size: bytes, or a number with KB, MB, GB (KiB, MiB, GiB)."""

    name = "SIZE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from itwin_report.store.http_cache import parse_size
        from itwin_report.util.errors import ReportError

        try:
            return parse_size(value)
        except ReportError as exc:
            self.fail(str(exc), param, ctx)


class Seconds(click.ParamType):
    """Seconds for a whole read: above 0, at most a day (the store's own rule)."""

    name = "SECONDS"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from itwin_report.store.http import check_timeout
        from itwin_report.util.errors import ReportError

        try:
            return check_timeout(value if isinstance(value, float) else float(value))
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        except ReportError as exc:
            self.fail(str(exc), param, ctx)


def cache_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--no-cache``, ``--cache-dir DIR``, ``--cache-size SIZE``: the local cache of a
    server's finished runs (``cache``, ``cache_dir``, ``cache_size`` to the command)."""
    command = click.option(
        "--cache-size",
        type=CacheSize(),
        default="1GiB",
        show_default=True,
        help="Bound of the cache folder; the files used least recently go first.",
    )(command)
    command = click.option(
        "--cache-dir",
        type=click.Path(file_okay=False),
        help="Folder of the cache (default: $XDG_CACHE_HOME/itwin-report, else "
        "~/.cache/itwin-report).",
    )(command)
    return click.option(
        "--cache/--no-cache",
        default=True,
        show_default=True,
        help="Over http(s):// keep the metric histories of finished runs in a local cache and "
        "read a run again only when the server's listing shows it changed.",
    )(command)


def cache_settings(enabled: bool, directory: str | None, size: int) -> Any:
    """The :class:`~itwin_report.store.http_cache.CacheSettings` of the cache options."""
    import os

    from itwin_report.store.http_cache import CacheSettings

    return CacheSettings.from_options(enabled, directory, size, environ=os.environ)


def timeout_option() -> Callable[[Any], Any]:
    """``--timeout SECONDS`` (default 60): the whole read of an http(s):// store."""
    return click.option(
        "--timeout",
        type=Seconds(),
        help="Seconds the whole read of an http(s):// store may take (not each request); "
        "a server still answering then is an error.  [default: 60]",
    )


TARGET_HELP = (
    "Quality target, e.g. val_accuracy>=0.76 or val_loss<=0.3, for any metric the worker runs log"
)


class TargetType(click.ParamType):
    """``METRIC>=VALUE`` or ``METRIC<=VALUE``, read by the report's one target parser."""

    name = "METRIC>=VALUE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from itwin_report.options import BadTarget, Target, parse_target

        if isinstance(value, Target):
            return value
        try:
            return parse_target(str(value))
        except BadTarget as exc:
            self.fail(str(exc), param, ctx)


def target_option(help_text: str) -> Callable[[Any], Any]:
    """``--target METRIC>=VALUE``: the quality target for time to target."""
    return click.option("--target", type=TargetType(), metavar="METRIC>=VALUE", help=help_text)
