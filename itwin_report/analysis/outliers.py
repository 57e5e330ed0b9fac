"""Stragglers: the ranks of one job whose measure lags the median beyond the others' spread.

One rule for every measure (compute per profiler step, collective launch delay, per-rank step
or epoch time, GPU utilization, power): with ``n >= 3`` ranks and median ``m``, rank ``r`` lags
when its value lies beyond ``m`` (above it for a time, below for a utilization) by more than
both twice the largest distance of any *other* rank from ``m`` and :data:`MIN_RELATIVE` of
``m``. Identical ranks name none; one rank 20 % slower among steady ones is named. When every
rank of one node lags (and the node has two ranks or more) the node is named instead of its
ranks: a slow node, not a slow rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median
from typing import Any

MIN_RELATIVE = 0.05  # a lag under 5 % of the median is never named
MIN_RANKS = 3


@dataclass(frozen=True)
class Straggler:
    """A rank (or a node: ``ranks`` holds all of them) and the evidence that names it."""

    measure: str  # what was compared ("compute per step", ...)
    ranks: tuple[int, ...]
    node: str  # the node's name when known ("" otherwise)
    value: float  # the rank's value (the mean of the node's ranks for a node)
    median: float
    ratio: float  # value / median
    count: int  # ranks compared
    scope: str  # "rank" or "node"

    def text(self, unit: str = "") -> str:
        """``rank 5 (node n1): compute per step 1.21× the median of 8 ranks (0.0121 s vs …)``."""
        where = f" ({self.node})" if self.node and self.scope == "rank" else ""
        who = (
            f"node {self.node} (ranks {', '.join(map(str, self.ranks))})"
            if self.scope == "node"
            else f"rank {self.ranks[0]}{where}"
        )
        shown = f"{self.value:.4g}{unit} vs {self.median:.4g}{unit}"
        return f"{who}: {self.measure} {self.ratio:.2f}× the median of {self.count} ranks ({shown})"

    def job_row(self, strategy: str, workers: int, job_id: str, unit: str = "") -> dict[str, Any]:
        """The row a report's straggler table keeps for it (one job of one configuration)."""
        return {
            "strategy": strategy,
            "workers": workers,
            "job_id": job_id,
            "scope": self.scope,
            "ranks": list(self.ranks),
            "node": self.node,
            "measure": self.measure,
            "ratio": self.ratio,
            "text": self.text(unit),
        }

    def record(self, unit: str = "") -> dict[str, object]:
        return {
            "scope": self.scope,
            "ranks": list(self.ranks),
            "node": self.node or None,
            "measure": self.measure,
            "value": self.value,
            "median": self.median,
            "ratio": self.ratio,
            "ranks_compared": self.count,
            "text": self.text(unit),
        }


def lagging(
    values: dict[int, float],
    measure: str,
    nodes: dict[int, str] | None = None,
    lower_is_slower: bool = False,
) -> list[Straggler]:
    """The ranks (or nodes) of ``values`` (rank -> value, NaN left out) that lag."""
    clean = {r: float(v) for r, v in values.items() if v == v}
    if len(clean) < MIN_RANKS:
        return []
    m = median(clean.values())
    sign = -1.0 if lower_is_slower else 1.0
    lag = {r: sign * (v - m) for r, v in clean.items()}
    slow = []
    for rank, ahead in lag.items():
        others = max(abs(d) for r, d in lag.items() if r != rank)
        if ahead > 2 * others and ahead > MIN_RELATIVE * abs(m):
            slow.append(rank)
    if not slow:
        return _slow_node(clean, nodes or {}, measure, sign)
    names = nodes or {}
    return [
        Straggler(
            measure, (r,), names.get(r, ""), clean[r], m, _ratio(clean[r], m), len(clean), "rank"
        )
        for r in sorted(slow)
    ]


def _ratio(value: float, m: float) -> float:
    return value / m if m else float("inf")


def _slow_node(
    clean: dict[int, float], nodes: dict[int, str], measure: str, sign: float
) -> list[Straggler]:
    """The one node whose every rank lags the median of the other nodes' ranks beyond their
    spread (the node has two ranks or more)."""
    by_node: dict[str, list[int]] = {}
    for rank in clean:
        if nodes.get(rank):
            by_node.setdefault(nodes[rank], []).append(rank)
    if len(by_node) < 2:
        return []
    for node, ranks in sorted(by_node.items()):
        rest = [v for r, v in clean.items() if r not in ranks]
        if len(ranks) < 2 or not rest:
            continue
        m = median(rest)
        spread = max(abs(v - m) for v in rest)
        least = min(sign * (clean[r] - m) for r in ranks)
        if least > 2 * spread and least > MIN_RELATIVE * abs(m):
            mean = sum(clean[r] for r in ranks) / len(ranks)
            return [
                Straggler(
                    measure,
                    tuple(sorted(ranks)),
                    node,
                    mean,
                    m,
                    _ratio(mean, m),
                    len(clean),
                    "node",
                )
            ]
    return []
