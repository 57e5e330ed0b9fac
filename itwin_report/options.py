"""The rules of every option, in one place: the command line's options (Click types and
callbacks) and the Python API (``ir.load``, ``ir.build``, ``ir.compare``) call the same
functions, so a value is accepted or refused alike, with the same words, and a refused value is
a :class:`~itwin_report.util.errors.BadOption` (exit code 2, bad usage).

Numeric options are checked against :data:`OPTION_RANGES`, whose ranges are those the loader
gives the same quantity read as a run param (``samples_per_epoch``: > 0 and <= 1e15, a worker
count: 1 .. :data:`MAX_WORKERS`). Messages name the command's option (``--pue``), which the
API's keyword mirrors (``pue``).

Light module: standard library only (the command line checks its options before pandas loads).
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from itwin_report.util.errors import BadOption

if TYPE_CHECKING:
    import numpy as np

INF = float("inf")
MAX_WORKERS = 1_000_000
# Upper bounds far above anything real, so sums and means of valid values stay finite (MLflow
# stores an infinite metric as the largest float, which is finite but no real value).
MAX_SECONDS = 1e9  # ~31 years
MAX_COUNT = 1e15  # samples, samples/s, microseconds of device time
MAX_CURRENCY = 8


@dataclass(frozen=True)
class Range:
    """``low <= x <= high`` (``low < x`` when ``open_low``); NaN and infinities never are."""

    low: float
    high: float = INF
    open_low: bool = False

    def holds(self, x: float) -> bool:
        """Whether the one number ``x`` is in the range."""
        above = x > self.low if self.open_low else x >= self.low
        return math.isfinite(x) and above and x <= self.high

    def ok(self, values: Any) -> np.ndarray:
        """Elementwise :meth:`holds` of a Series or array."""
        import numpy as np

        x = np.asarray(values, dtype="float64")
        with np.errstate(invalid="ignore"):
            above = x > self.low if self.open_low else x >= self.low
            return np.isfinite(x) & above & (x <= self.high)

    def __str__(self) -> str:
        low = f"{'>' if self.open_low else '>='} {self.low:g}"
        return f"{low} and <= {self.high:g}" if self.high != INF else f"{low} and finite"


POSITIVE = Range(0.0, MAX_COUNT, open_low=True)
NON_NEGATIVE = Range(0.0, MAX_COUNT)
SECONDS = Range(0.0, MAX_SECONDS, open_low=True)
WORKERS = Range(1.0, float(MAX_WORKERS))

# every numeric option: name -> (range, unit); a value outside is bad usage
OPTION_RANGES: dict[str, tuple[Range, str]] = {
    "warmup_epochs": (Range(0.0, 1e9), "epochs"),
    "samples_per_epoch": (POSITIVE, "samples, as the samples_per_epoch param"),
    "predict": (WORKERS, "workers"),
    "fail_under_efficiency": (Range(0.0, 1.0), "efficiency, a fraction"),
    "max_regression": (Range(0.0, INF), "a fraction: 0.05 = 5 %"),
    "pue": (Range(1.0, 5.0), "a power usage effectiveness, facility / IT energy"),
    "carbon_intensity": (Range(0.0, 2000.0), "g CO2e per kWh"),
    "gpu_hour_price": (Range(0.0, 1e6), "price per GPU-hour"),
    "gpus_per_node": (WORKERS, "GPUs per node"),
    "max_energy_per_speedup": (Range(0.0, 1e6, open_low=True), "relative energy per speed"),
    "deadline_hours": (Range(0.0, 1e6, open_low=True), "hours"),
    "epochs": (Range(1.0, 1e9), "epochs"),
    "jobs": (WORKERS, "processes"),
}
WHOLE = frozenset({"warmup_epochs", "predict", "gpus_per_node", "epochs", "jobs"})
# options with a fixed set of values (the first is the default)
CHOICES: dict[str, tuple[str, ...]] = {
    "baseline": ("auto", "single-gpu", "per-strategy"),
    "scaling": ("auto", "strong", "weak"),
    "throughput_source": ("auto", "performance", "rates", "epochs"),
    "gate_on": ("epoch-time", "throughput", "time-to-target"),
}


# the API's keywords whose option is spelt otherwise (progress: the API's own, the opposite
# of --quiet)
FLAGS = {"experiment": "--experiment-name", "progress": "progress"}


def flag(name: str) -> str:
    """The command's option for the API's keyword ``name``."""
    return FLAGS.get(name, "--" + name.replace("_", "-"))


def _fail(name: str, problem: str) -> BadOption:
    return BadOption(f"{flag(name)}: {problem}", problem)


def number_problem(name: str, value: Any) -> str:
    """Why ``value`` is no valid ``name`` (an :data:`OPTION_RANGES` key), "" when it is."""
    valid, unit = OPTION_RANGES[name]
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return f"expected a number, got {value!r}"
    x = float(value)
    if not valid.holds(x):
        return f"{x:g} is not {valid} ({unit})"
    if name in WHOLE and x != int(x):
        return f"{x:g} is not a whole number"
    return ""


def number(name: str, value: Any) -> Any:
    """``value`` as a float (an int for whole numbers), None kept; BadOption when outside."""
    if value is None:
        return None
    problem = number_problem(name, value)
    if problem:
        raise _fail(name, problem)
    return int(value) if name in WHOLE else float(value)


def choice(name: str, value: Any) -> str:
    """``value`` when it is one of ``name``'s :data:`CHOICES`; BadOption otherwise."""
    allowed = CHOICES[name]
    if not isinstance(value, str) or value not in allowed:
        raise _fail(name, f"{value!r} is not one of {', '.join(allowed)}")
    return value


def efficiency(name: str, value: Any) -> float | None:
    """An efficiency threshold: a fraction from 0 to 1 (70 is refused: did you mean 0.70?)."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        x = float(value)
        if math.isfinite(x) and 1 < x <= 100:
            raise _fail(
                name,
                f"{x:g} is above 1: efficiency is a fraction from 0 to 1; "
                f"did you mean {x / 100:.2f}?",
            )
    return number(name, value)


WORKER_COUNTS = f"expected worker counts from 1 to {MAX_WORKERS:,} separated by commas, e.g. 64,128"


def worker_counts(value: Any, name: str = "predict") -> list[int]:
    """``"64,128"`` (the command line's text), one whole number or a sequence of them ->
    ``[64, 128]``;
    BadOption for anything but worker counts the loader accepts (1 to :data:`MAX_WORKERS`)."""
    if value is None:
        return []
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = [value]  # one worker count
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",") if p.strip()]
        good = all(p.isascii() and p.isdigit() and len(p) <= 12 for p in parts)
        if not parts or not good:
            raise _fail(name, WORKER_COUNTS)
        value = [int(p) for p in parts]
    if not isinstance(value, Sequence) or not all(
        isinstance(w, numbers.Integral) and not isinstance(w, bool) for w in value
    ):
        raise _fail(name, WORKER_COUNTS)
    if not all(WORKERS.holds(float(w)) for w in value):
        raise _fail(name, WORKER_COUNTS)
    return [int(w) for w in value]


def run_names(value: Any) -> list[str]:
    """``"a,b"``, or a sequence of such texts -> ``[a, b]`` (as ``-r a,b -r c``): one text is
    one comma-separated list, never split into its characters."""
    values = [value] if isinstance(value, str) else value
    if values is None:
        return []
    if not isinstance(values, Sequence) or not all(isinstance(v, str) for v in values):
        raise _fail("run_names", f"expected run names (texts), got {value!r}")
    return [name.strip() for v in values for name in v.split(",") if name.strip()]


RATE_CONFIG = "expected STRATEGY:WORKERS with WORKERS > 0, e.g. horovod:8"


def rate_config(value: Any) -> tuple[str, int] | None:
    """``"horovod:8"`` or ``("horovod", 8)`` -> ``("horovod", 8)``; None or "" -> None."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        strategy, sep, workers = value.rpartition(":")
        ok = sep and strategy and workers.isascii() and workers.isdigit() and len(workers) <= 12
        if not ok:
            raise _fail("rate_config", RATE_CONFIG)
        value = (strategy, int(workers))
    if not (
        isinstance(value, Sequence)
        and len(value) == 2
        and isinstance(value[0], str)
        and value[0]
        and isinstance(value[1], numbers.Integral)
        and not isinstance(value[1], bool)
        and WORKERS.holds(float(value[1]))
    ):
        raise _fail("rate_config", RATE_CONFIG)
    return str(value[0]), int(value[1])


def boolean(name: str, value: Any) -> bool:
    """A switch: True or False, nothing else (``"no"`` would be true)."""
    if not isinstance(value, bool):
        raise _fail(name, f"expected True or False, got {value!r}")
    return value


def text(name: str, value: Any, *, optional: bool = False) -> Any:
    """A non-blank text (None too when ``optional``)."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _fail(name, f"expected a non-blank text, got {value!r}")
    return value


def currency_ok(value: str) -> bool:
    """A currency code or sign: 1 to 8 printable characters, no space or control character."""
    return 0 < len(value) <= MAX_CURRENCY and all(
        c.isprintable() and not c.isspace() for c in value
    )


def currency(value: Any, gpu_hour_price: float | None) -> str:
    """The currency of ``--gpu-hour-price`` ("" when none is given)."""
    if value is None or value == "":
        return ""
    if not isinstance(value, str) or not currency_ok(value):
        raise _fail(
            "currency",
            f"expected 1 to {MAX_CURRENCY} letters or a currency sign, e.g. EUR, got {value!r}",
        )
    if gpu_hour_price is None:
        raise BadOption("--currency needs --gpu-hour-price", "needs --gpu-hour-price")
    return value


def deadline(hours: Any, epochs: Any) -> tuple[float | None, int | None]:
    """``--deadline-hours`` with ``--epochs``: both or neither, each in its range."""
    hours, epochs = number("deadline_hours", hours), number("epochs", epochs)
    if (hours is None) != (epochs is None):
        raise BadOption(
            "--deadline-hours and --epochs go together: give both or neither",
            "goes with --epochs (--deadline-hours) and back: give both or neither",
        )
    return hours, epochs


# ---------------------------------------------------------------- the quality target

OPERATORS = (">=", "<=")
# any comparison a user may write; only OPERATORS are accepted, the others are named in errors
_SPLIT = re.compile(r"^(?P<metric>.*?)\s*(?P<op>>=|<=|=>|=<|==|!=|>|<|=)\s*(?P<value>.*)$")
# MLflow's metric names: letters, digits, ``_ - . /`` and spaces, never a ``..`` path part
_NAME = re.compile(r"^[\w\-./ ]+$")


class BadTarget(BadOption):
    """A target that cannot be read (``--target``): bad usage, exit code 2."""


@dataclass(frozen=True)
class Target:
    """A metric key, ``>=`` (higher is better) or ``<=`` (lower is better), and the bound."""

    metric: str
    op: str
    value: float

    @property
    def higher_is_better(self) -> bool:
        return self.op == ">="

    def met(self, value: float) -> bool:
        """Whether ``value`` meets the target (NaN never does)."""
        return value >= self.value if self.higher_is_better else value <= self.value

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.value:g}"

    def to_dict(self) -> dict[str, object]:
        return {"metric": self.metric, "op": self.op, "value": self.value, "text": str(self)}


def parse_target(text: str | Target) -> Target:
    """``text`` read as ``METRIC>=VALUE`` or ``METRIC<=VALUE`` (spaces around the operator
    allowed); :class:`BadTarget` (exit code 2) for a target without a bound, an unknown
    operator, a value that is not a finite number, or a metric name MLflow would refuse."""
    if isinstance(text, Target):
        return text
    shown = str(text).strip()
    found = _SPLIT.match(shown)
    if found is None or not found["op"]:
        raise BadTarget(
            f"target {shown!r} has no bound: write METRIC>=VALUE or METRIC<=VALUE "
            "(e.g. val_accuracy>=0.76)"
        )
    metric, op, value = found["metric"].strip(), found["op"], found["value"].strip()
    if op not in OPERATORS:
        raise BadTarget(f"target {shown!r}: unknown operator {op!r}; use >= or <=")
    if not metric:
        raise BadTarget(f"target {shown!r} names no metric: write METRIC>=VALUE")
    if not _NAME.match(metric) or ".." in metric.split("/") or metric.startswith("/"):
        raise BadTarget(f"target {shown!r}: {metric!r} is not an MLflow metric name")
    if not value:
        raise BadTarget(f"target {shown!r} has no bound: write {metric}{op}VALUE")
    try:
        bound = float(value)
    except ValueError:
        raise BadTarget(f"target {shown!r}: the bound {value!r} is not a number") from None
    if not math.isfinite(bound):
        raise BadTarget(f"target {shown!r}: the bound must be a finite number, got {value!r}")
    return Target(metric, op, bound)


def target(value: Any) -> Target | None:
    """The API's ``target=``: None, a :class:`Target` or its text; :class:`BadTarget` for
    anything else or a text :func:`parse_target` refuses."""
    if value is None or isinstance(value, Target):
        return value
    if not isinstance(value, str):
        raise BadTarget(f"--target: expected a text such as 'val_accuracy>=0.76', got {value!r}")
    return parse_target(value)


def target_from_dict(value: Any) -> Target:
    """A target as a JSON report saves it (``{"metric", "op", "value"}``); BadTarget when it
    is not one."""
    if not isinstance(value, dict) or not isinstance(value.get("metric"), str):
        raise BadTarget(f"not a target: {value!r}")
    bound = value.get("value")
    if isinstance(bound, bool) or not isinstance(bound, int | float):
        raise BadTarget(f"not a target: {value!r}")
    return parse_target(f"{value['metric']}{value.get('op')}{float(bound)!r}")


@dataclass(frozen=True)
class ReportOptions:
    """The report's options, checked and normalised once (:meth:`of`)."""

    warmup_epochs: int = 1
    baseline: str = "auto"
    scaling: str = "auto"
    throughput_source: str = "auto"
    samples_per_epoch: float | None = None
    predict: tuple[int, ...] = ()
    rate_config: tuple[str, int] | None = None
    fail_under_efficiency: float | None = None
    gate_on: str = "epoch-time"
    pue: float | None = None
    carbon_intensity: float | None = None
    gpu_hour_price: float | None = None
    currency: str = ""
    gpus_per_node: int | None = None
    max_energy_per_speedup: float | None = None
    deadline_hours: float | None = None
    epochs: int | None = None

    @classmethod
    def of(cls, **given: Any) -> ReportOptions:
        """Check every option given (keywords of :class:`ReportOptions`); BadOption naming the
        first one refused. None where a default exists means the default."""
        unknown = sorted(set(given) - set(cls.__dataclass_fields__))
        if unknown:
            raise BadOption(f"unknown option {unknown[0]!r}", f"unknown option {unknown[0]!r}")
        o = {k: v for k, v in given.items() if v is not None}
        hours, epochs = deadline(o.get("deadline_hours"), o.get("epochs"))
        price = number("gpu_hour_price", o.get("gpu_hour_price"))
        return cls(
            warmup_epochs=number("warmup_epochs", o.get("warmup_epochs", 1)),
            baseline=choice("baseline", o.get("baseline", "auto")),
            scaling=choice("scaling", o.get("scaling", "auto")),
            throughput_source=choice("throughput_source", o.get("throughput_source", "auto")),
            samples_per_epoch=number("samples_per_epoch", o.get("samples_per_epoch")),
            predict=tuple(worker_counts(o.get("predict", ()))),
            rate_config=rate_config(o.get("rate_config")),
            fail_under_efficiency=efficiency(
                "fail_under_efficiency", o.get("fail_under_efficiency")
            ),
            gate_on=choice("gate_on", o.get("gate_on", "epoch-time")),
            pue=number("pue", o.get("pue")),
            carbon_intensity=number("carbon_intensity", o.get("carbon_intensity")),
            gpu_hour_price=price,
            currency=currency(o.get("currency", ""), price),
            gpus_per_node=number("gpus_per_node", o.get("gpus_per_node")),
            max_energy_per_speedup=number(
                "max_energy_per_speedup", o.get("max_energy_per_speedup")
            ),
            deadline_hours=hours,
            epochs=epochs,
        )
