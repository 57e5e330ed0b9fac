"""The Communication table: per configuration with traces, what its collectives move per step,
the bandwidth they reach, and why communication costs what it does.

From the matched traces' rows (``traces/analyze.py``: per job and rank, its steps, exposed
communication, device span, its collectives per size class with their busbw quartiles, and its
link fits), summed over every traced rank of the configuration's jobs:

* collectives and bytes per step: the kernels and their bytes over the profiled steps (a
  trace's kernels span its analysed steps and the last one, which HTA leaves out: ``steps + 1``
  profiled steps when two or more were analysed), per rank;
* exposed communication per step: exposed seconds over the analysed steps, per rank;
* busbw: the median over the ranks' large-message (>= 1 MiB) rows of their median busbw; the
  world group's large messages are inter-node when the job spans two nodes or more and
  intra-node on one node (sub-groups are not placed: their ranks are not in the rows);
* the verdict, from those numbers only (:func:`verdict`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from itwin_report.report.common import finish
from itwin_report.report.specs import COMMUNICATION

COLUMNS = COMMUNICATION.names
HIDDEN_SHARE = 0.05  # exposed communication below 5 % of the device time: hidden
LATENCY_SHARE = 0.5  # small messages (< 64 KiB) over half the collectives' time: latency
NEAR_BETA = 0.7  # large messages' busbw at 70 % of the link fit's beta or more: bandwidth
Config = tuple[str, int]


def communication_table(ranks: list[dict[str, Any]], nodes: Mapping[Config, float]) -> pd.DataFrame:
    """One row per configuration with traced ranks (:data:`COLUMNS`)."""
    groups: dict[Config, list[dict[str, Any]]] = {}
    for row in ranks:
        groups.setdefault((str(row["strategy"]), int(row["workers"])), []).append(row)
    rows = [_row(key, mine, nodes.get(key, math.nan)) for key, mine in sorted(groups.items())]
    return finish(rows, COLUMNS)


def profiled_steps(analysed: int) -> int:
    """The profiler steps a trace's kernels span: the analysed ones, and the last one HTA
    leaves out when it left one out (two analysed or more; with one, all of it counts)."""
    return analysed + 1 if analysed >= 2 else analysed


def _row(key: Config, ranks: list[dict[str, Any]], nodes: float) -> dict[str, Any]:
    classes = [c for r in ranks for c in r.get("size_classes") or []]
    steps = sum(profiled_steps(int(r["steps"])) for r in ranks)
    analysed = sum(int(r["steps"]) for r in ranks)
    span = sum(_num(r.get("span_s")) for r in ranks)
    exposed = sum(_num(r.get("exposed_communication_s")) for r in ranks)
    sized = [c for c in classes if c.get("bytes") is not None]
    large = [c for c in classes if c["size_class"] == "large"]
    world = [c for c in large if c.get("group_size") == key[1]]
    out = {
        "strategy": key[0],
        "workers": key[1],
        "runs": len({str(r["job_id"]) for r in ranks}),
        "collectives_per_step": _per(sum(int(c["count"]) for c in classes), steps),
        "bytes_per_step": _per(sum(float(c["bytes"]) for c in sized), steps) if sized else None,
        "exposed_comm_s_per_step": _per(exposed, analysed),
        "exposed_comm_share": _per(exposed, span),
        "small_time_share": _per(
            sum(float(c["time_s"]) for c in classes if c["size_class"] == "small"),
            sum(float(c["time_s"]) for c in classes),
        ),
        "busbw_gbps": _median(large),
        "busbw_inter_gbps": _median(world) if nodes == nodes and nodes > 1 else math.nan,
        "busbw_intra_gbps": _median(large) if nodes == 1 else math.nan,
        "link_beta_gbps": _beta(ranks),
    }
    out["verdict"], out["evidence"] = verdict(out, bool(classes))
    return out


def verdict(row: Mapping[str, Any], has_collectives: bool = True) -> tuple[str, str]:
    """(verdict, evidence) from the row's own numbers: ``hidden behind compute`` (exposed
    communication under :data:`HIDDEN_SHARE` of the device time), ``latency-bound`` (small
    messages over :data:`LATENCY_SHARE` of the collectives' time), ``bandwidth-bound`` (large
    messages' busbw at :data:`NEAR_BETA` of the link fit's beta or more), else ``undecided``
    with what is missing."""
    if not has_collectives:
        return "undecided", "no collective kernels in the traces"
    share, small = row["exposed_comm_share"], row["small_time_share"]
    if _missing(share):
        return "undecided", "no exposed communication share: the traces have no device span"
    said = [f"exposed communication {100 * share:.1f} % of the device time (the line: 5 %)"]
    if share < HIDDEN_SHARE:
        return "hidden behind compute", "; ".join(said)
    if not _missing(small):
        said.append(f"small messages {100 * small:.0f} % of the collectives' time (the line: 50 %)")
        if small > LATENCY_SHARE:
            return "latency-bound", "; ".join(said)
    bw, beta = row["busbw_gbps"], row["link_beta_gbps"]
    if _missing(bw):
        return "undecided", "; ".join([*said, "no large messages (>= 1 MiB) with a busbw"])
    if _missing(beta):
        text = f"large messages' busbw {bw:.1f} GB/s, no link fit to compare it with (it needs "
        return "undecided", "; ".join([*said, text + "kernels of three sizes or more)"])
    said.append(
        f"large messages' busbw {bw:.1f} GB/s, {100 * bw / beta:.0f} % of the link fit's "
        f"{beta:.1f} GB/s (the line: 70 %)"
    )
    if bw >= NEAR_BETA * beta:
        return "bandwidth-bound", "; ".join(said)
    return "undecided", "; ".join([*said, "neither many small messages nor a saturated link"])


def _beta(ranks: list[dict[str, Any]]) -> float:
    """The median beta of the ranks' link fits (NaN without one)."""
    betas = [float(f["beta_gbps"]) for r in ranks for f in r.get("link_fits") or []]
    return float(np.median(betas)) if betas else math.nan


def _median(rows: list[dict[str, Any]]) -> float:
    values = [float(c["busbw_median_gbps"]) for c in rows if c.get("busbw_median_gbps") is not None]
    return float(np.median(values)) if values else math.nan


def _per(part: float, whole: float) -> float:
    return part / whole if whole > 0 and part == part else math.nan


def _num(value: Any) -> float:
    return math.nan if value is None else float(value)


def _missing(value: Any) -> bool:
    return value is None or value != value
