"""The noise tests behind ``compare``: one-sided Welch t-tests of a change for the worse, and
the Holm–Bonferroni step-down that holds a whole comparison's false-alarm rate (pure functions,
standard library only).

Every test works on the log scale. A configuration's metric on one side is a :class:`Cell`: its
mean, the squared relative standard error of that mean and its degrees of freedom, taken from
the per-run values (``cell_from_runs``) or from the 95 % interval the report computed from them
(``cell_from_interval``). A test is a contrast of cells: ``log(current / baseline)`` for one
configuration, or the mean of several configurations' contrasts; its variance is the sum of the
cells' relative variances times the squared coefficients, its degrees of freedom those of
Welch–Satterthwaite. The p-value is one-sided: the chance of a change at least this much for the
worse when nothing changed.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

FAMILY_ALPHA = 0.05  # the family-wise false-alarm rate of one comparison


@dataclass(frozen=True)
class Cell:
    """One metric of one configuration on one side."""

    mean: float
    rel_var: float  # squared standard error of the mean / mean², i.e. var(log mean)
    df: float  # degrees of freedom of rel_var: runs - 1


@dataclass(frozen=True)
class Test:
    """A one-sided test of ``estimate`` > 0 (worse), with its statistic and p-value."""

    estimate: float  # the change for the worse on the log scale
    se: float
    df: float
    t: float
    p: float


def cell_from_runs(values: Sequence[float]) -> Cell | None:
    """The cell of per-run values; None with fewer than two runs or a mean that is not > 0."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    if not (mean > 0 and math.isfinite(mean)):
        return None
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return Cell(mean, var / (n * mean * mean), n - 1)


def cell_from_interval(
    mean: float, low: float, high: float, runs: int, log_scale: bool = False
) -> Cell | None:
    """The cell behind a 95 % interval over ``runs`` runs; None with fewer than two runs or
    values that do not form such an interval.

    A mean's interval is ``mean ± t(0.975, runs-1) · s / sqrt(runs)`` (as
    :func:`itwin_report.analysis.intervals.mean_interval` makes it); with ``log_scale`` the
    interval is a ratio's, ``log mean ± t · se`` (as ``ratio_interval`` makes it), whose degrees
    of freedom are taken as ``runs - 1``."""
    from itwin_report.analysis.intervals import t_quantile

    if runs < 2 or not (mean > 0 and low <= mean <= high) or not math.isfinite(high - low):
        return None
    q = t_quantile(runs - 1)
    if log_scale:
        if low <= 0:
            return None
        return Cell(mean, ((math.log(high) - math.log(low)) / 2 / q) ** 2, runs - 1)
    se = (high - low) / 2 / q
    return Cell(mean, (se / mean) ** 2, runs - 1)


def contrast_test(estimate: float, terms: Iterable[tuple[float, Cell]]) -> Test | None:
    """The test of ``estimate`` (log scale, positive = worse) whose variance is
    ``sum(c² · cell.rel_var)`` over ``terms`` of (coefficient c, cell); None without terms.

    A variance of 0 (identical runs on both sides) gives p 0 for a change for the worse and 1
    otherwise."""
    parts = [(c * c * cell.rel_var, cell.df) for c, cell in terms if c != 0]
    if not parts:
        return None
    var = sum(v for v, _ in parts)
    if var == 0:
        return Test(
            estimate, 0.0, math.inf, math.copysign(math.inf, estimate), float(estimate <= 0)
        )
    den = sum(v * v / df for v, df in parts)
    df = max(1.0, var * var / den) if den > 0 else math.inf
    se = math.sqrt(var)
    t = estimate / se
    return Test(estimate, se, df, t, t_sf(t, df))


def holm(p_values: Sequence[float], alpha: float = FAMILY_ALPHA) -> list[tuple[float, bool]]:
    """Holm–Bonferroni: per p-value, (its threshold, rejected).

    The k-th smallest of m p-values (k = 1..m) is compared with ``alpha / (m - k + 1)``; the
    first that exceeds its threshold stops the procedure, and it and every larger one stand.
    This holds the chance of any false rejection at ``alpha`` whatever the tests' dependence.
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: (p_values[i], i))
    out = [(math.nan, False)] * m
    going = True
    for k, i in enumerate(order):
        threshold = alpha / (m - k)
        going = going and p_values[i] <= threshold
        out[i] = (threshold, going)
    return out


def combined(terms: Iterable[tuple[float, Hashable, Cell]]) -> list[tuple[float, Cell]]:
    """Terms of (coefficient, key, cell) with the coefficients of the same key summed, so that a
    cell shared by several contrasts (a common base) counts once."""
    sums: dict[Hashable, list] = {}
    for c, key, cell in terms:
        entry = sums.setdefault(key, [0.0, cell])
        entry[0] += c
    return [(c, cell) for c, cell in sums.values() if abs(c) > 1e-12]


# ---------------------------------------------------------------- Student's t distribution


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` > 0 degrees of freedom (the normal beyond 1e7)."""
    if math.isnan(t):
        return math.nan
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    if df > 1e7:
        return 0.5 * math.erfc(t / math.sqrt(2))
    tail = 0.5 * _beta_regularized(df / 2, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def _beta_regularized(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b), evaluated by the modified Lentz method."""
    tiny = 1e-300

    def step(d: float, c: float, term: float) -> tuple[float, float, float]:
        d = 1.0 + term * d
        c = 1.0 + term / c
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = c if abs(c) > tiny else tiny
        return d, c, d * c

    d = 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    c, h = 1.0, d
    for m in range(1, 500):
        even = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        d, c, delta = step(d, c, even)
        h *= delta
        odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d, c, delta = step(d, c, odd)
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h
