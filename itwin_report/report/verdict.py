"""Input-bottleneck verdict: is a slow configuration starved by its input pipeline?

Evidence, each shown in the report when known:

* ``achieved``: the table's samples/s over the estimate (end to end for performance.json, so it
  includes set-up, warm-up, validation and checkpoints);
* ``steady``: the steady-state samples/s from the Rate metrics over the estimate (training steps
  only; the better signal, used in place of ``achieved`` whenever it is known);
* the GPU idle share, 1 - utilization/100 (NVML counts communication kernels as busy, so idle
  time is time the GPU waits on the host or the input);
* the profiler's communication share of device time (all-reduce and other collectives);
* how many workers' performance.json set ``suspected_input_bottleneck``.

Rule: a configuration that reaches ACHIEVED_OK of its estimate is not input-bound. Below that,
the workers' own flags decide when they logged any (a majority flagging input waits is
input-bound: they measured it); without flags it is input-bound when the GPU spends more time
idle than in collectives (the lost time is waiting, not communicating); with no profiler data,
when the idle share is at least IDLE_MIN. With no
estimate at all: the workers' flag majority together with an idle share of IDLE_MIN. ``None``
when the evidence is not enough to decide.
"""

from __future__ import annotations

import math

ACHIEVED_OK = 0.85
IDLE_MIN = 0.30


def _known(x: float) -> bool:
    return not math.isnan(x)


def decide(
    achieved: float,
    steady: float,
    idle: float,
    comm: float,
    flagged: int,
    flag_total: int,
) -> bool | None:
    """True (input-bound), False (not), or None (not enough evidence)."""
    level = steady if _known(steady) else achieved
    if not _known(level):
        if flag_total == 0 or not _known(idle):
            return None
        return 2 * flagged > flag_total and idle >= IDLE_MIN
    if level >= ACHIEVED_OK:
        return False
    if flag_total > 0:
        return 2 * flagged > flag_total  # the workers measured their own input waits
    if _known(idle) and _known(comm):
        return idle > comm
    if _known(idle):
        return idle >= IDLE_MIN
    return 2 * flagged > flag_total if flag_total > 0 else None


def evidence(
    achieved: float, steady: float, idle: float, comm: float, flagged: int, flag_total: int
) -> str:
    """A short human string listing only what is known."""
    parts = []
    if _known(achieved):
        parts.append(f"{100 * achieved:.0f}% of estimate")
    if _known(steady):
        parts.append(f"steady state {100 * steady:.0f}%")
    if _known(idle):
        parts.append(f"GPU idle {100 * idle:.0f}%")
    if _known(comm):
        parts.append(f"collectives {100 * comm:.0f}% of device time")
    if flag_total > 0:
        parts.append(f"{flagged}/{flag_total} workers flag input")
    return "; ".join(parts) if parts else "no evidence"


def idle_share(utilization_pct: float) -> float:
    """1 - utilization/100, NaN when unknown."""
    if not _known(utilization_pct):
        return float("nan")
    return 1.0 - utilization_pct / 100.0
