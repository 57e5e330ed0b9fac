"""A communication model for predictions: why a strategy stops scaling.

From one traced configuration of ``n0`` workers (the strategy's largest, its link the one the
predictions cross: inter-node when it spans two nodes or more):

* compute per step at ``n`` workers shrinks as ``C · n0 / n`` when the global batch is fixed
  (the ``global_batch_size`` param the same at every worker count: a step's work split over more
  GPUs), and stays ``C`` when the batch per worker is fixed (itwinai's ``batch_size``: more GPUs
  take fewer steps per epoch, each as long as before);
* communication per step grows with the ring all-reduce, for ``S`` gradient bytes per step in
  ``k`` collectives: ``2(n−1)/n · S/β + k · 2(n−1) · α_hop``, with β the link fit's bandwidth (bus
  bytes per second, which is what the ring's ``2(n−1)/n · S`` counts) and ``α_hop = α / (2(n0−1))``
  the fit's latency per collective spread over the ring's hops; without a link fit, β is the
  large messages' median busbw and α 0 (said in the note);
* they cross where ``comm(n) = compute(n)``: beyond it a step is bound by communication. Its
  interval takes β's (and α's) 95 % interval and compute's across runs, each end with the ends
  that move it the same way.

Numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

MAX_WORKERS = 1e7  # the crossing is searched up to here


@dataclass(frozen=True)
class Link:
    """Latency per collective at ``workers`` and bus bandwidth (GB/s), with 95 % intervals
    (NaN: unknown); ``fitted``: from a link fit, else busbw with no latency."""

    workers: int
    alpha_s: float
    beta_gbps: float
    alpha_ci: tuple[float, float] = (math.nan, math.nan)
    beta_ci: tuple[float, float] = (math.nan, math.nan)
    fitted: bool = True


@dataclass(frozen=True)
class CommModel:
    """One strategy's model from its traced configuration of ``base_workers``."""

    strategy: str
    base_workers: int
    gradient_bytes: float  # per step
    collectives: float  # per step
    compute_s: float  # per step at base_workers
    compute_ci: tuple[float, float]
    link: Link
    inter_node: bool
    fixed_global_batch: bool = False

    def compute_at(self, n: float, compute: float | None = None) -> float:
        """Compute per step at ``n`` workers."""
        c = self.compute_s if compute is None else compute
        return c * self.base_workers / n if self.fixed_global_batch else c

    def comm_s(self, n: float, beta: float | None = None, alpha: float | None = None) -> float:
        """Communication per step at ``n`` workers (0 for one)."""
        if n <= 1:
            return 0.0
        beta = self.link.beta_gbps if beta is None else beta
        alpha = self.link.alpha_s if alpha is None else alpha
        hop = alpha / (2 * (self.base_workers - 1)) if self.base_workers > 1 else 0.0
        volume = 2 * (n - 1) / n * self.gradient_bytes / (beta * 1e9)
        return volume + self.collectives * 2 * (n - 1) * max(hop, 0.0)

    def crossing(self) -> tuple[float, float, float]:
        """(n, low, high): the worker count where communication per step reaches compute per
        step, with its interval (NaN where it does not cross below MAX_WORKERS or a bound is
        unknown)."""
        link = self.link
        mid = _root(lambda n: self.comm_s(n) - self.compute_at(n))
        alpha_low, alpha_high = link.alpha_ci if link.fitted else (link.alpha_s, link.alpha_s)
        low = _root(
            lambda n: (
                self.comm_s(n, link.beta_ci[0], alpha_high) - self.compute_at(n, self.compute_ci[0])
            )
        )
        high = _root(
            lambda n: (
                self.comm_s(n, link.beta_ci[1], alpha_low) - self.compute_at(n, self.compute_ci[1])
            )
        )
        return mid, low, high


def _root(fn: Callable[[float], float]) -> float:
    """The smallest n in [1, MAX_WORKERS] where f(n) >= 0, f rising (bisection on log n);
    NaN when f never reaches 0 there or is unknown."""
    lo, hi = 0.0, math.log(MAX_WORKERS)
    try:
        if not fn(math.exp(hi)) >= 0:
            return math.nan
        if fn(1.0) >= 0:
            return 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            if fn(math.exp(mid)) >= 0:
                hi = mid
            else:
                lo = mid
    except (ZeroDivisionError, ValueError):
        return math.nan
    return math.exp(hi)
