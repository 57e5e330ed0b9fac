"""The node step: the efficiency a strategy loses when its job leaves one node for two or more.

Per strategy, between the configuration with the most workers on one node (A) and the one with
the fewest workers on two nodes or more (B), both with whole, known node counts:

* the efficiency B keeps of A's is ``e = (n_A t_A) / (n_B t_B)`` under strong scaling (each GPU's
  share of the same work) and ``e = t_A / t_B`` under weak scaling (the same work per GPU), with
  ``t`` the mean of the runs' mean epoch times; it does not depend on the speedup's base;
* the node step is ``1 - e``; its 95 % interval comes from the interval of the ratio of the two
  means (:func:`~itwin_report.analysis.intervals.ratio_interval`), unknown unless both sides
  hold two runs or more.

Numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

import numpy as np

from itwin_report.analysis.intervals import ratio_interval

Config = tuple[str, int]


@dataclass(frozen=True)
class NodeStep:
    """One strategy's node step (fractions: 0.1 = 10 % of the one-node efficiency lost)."""

    strategy: str
    one_node_workers: int
    multi_node_workers: int
    multi_node_nodes: int
    one_node_epoch_time_s: float
    multi_node_epoch_time_s: float
    efficiency_kept: float
    efficiency_lost: float
    efficiency_lost_ci_low: float
    efficiency_lost_ci_high: float

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @property
    def sentence(self) -> str:
        """The node step and its evidence, in one sentence."""
        a, b = self.one_node_workers, self.multi_node_workers
        low, high = self.efficiency_lost_ci_low, self.efficiency_lost_ci_high
        ci = (
            "no 95 % interval: a side has a single run"
            if math.isnan(low)
            else f"95 % interval {100 * low:.1f}–{100 * high:.1f} %"
        )
        return (
            f"{self.strategy}: the step from one node ({a} GPUs, "
            f"{self.one_node_epoch_time_s:.2f} s per epoch) to {self.multi_node_nodes} nodes "
            f"({b} GPUs, {self.multi_node_epoch_time_s:.2f} s) loses "
            f"{100 * self.efficiency_lost:.1f} % of the one-node efficiency ({ci})."
        )


def node_steps(
    run_groups: Mapping[Config, np.ndarray], nodes: Mapping[Config, float], mode: str = "strong"
) -> list[NodeStep]:
    """Per strategy with a one-node and a multi-node configuration: its node step.
    ``run_groups``: per configuration, its runs' mean epoch times; ``nodes``: per
    configuration, its nodes (:mod:`itwin_report.report.nodes`)."""
    out = []
    for strategy in sorted({s for s, _ in run_groups}):
        placed = {
            w: int(n)
            for (s, w), n in nodes.items()
            if s == strategy and (s, w) in run_groups and n == n and float(n).is_integer()
        }
        one = [w for w, n in placed.items() if n == 1]
        more = [w for w, n in placed.items() if n >= 2 and (not one or w > max(one))]
        if one and more:
            out.append(_step(strategy, max(one), min(more), placed, run_groups, mode))
    return out


def _step(
    strategy: str,
    a: int,
    b: int,
    placed: dict[int, int],
    groups: Mapping[Config, np.ndarray],
    mode: str,
) -> NodeStep:
    runs_a, runs_b = groups[(strategy, a)], groups[(strategy, b)]
    r, low, high = ratio_interval(runs_a, runs_b)  # t_A / t_B
    scale = a / b if mode == "strong" else 1.0
    return NodeStep(
        strategy=strategy,
        one_node_workers=a,
        multi_node_workers=b,
        multi_node_nodes=placed[b],
        one_node_epoch_time_s=float(np.mean(runs_a)),
        multi_node_epoch_time_s=float(np.mean(runs_b)),
        efficiency_kept=r * scale,
        efficiency_lost=1.0 - r * scale,
        efficiency_lost_ci_low=1.0 - high * scale,
        efficiency_lost_ci_high=1.0 - low * scale,
    )
