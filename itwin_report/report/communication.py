"""The Communication table: per configuration with traces, what its collectives move per step,
the bandwidth they reach, and why communication costs what it does.

From the matched traces' rows (``traces/analyze.py``: per job and rank, its steps, exposed
communication, device span, its collectives per size class with their busbw quartiles, and its
link fits), summed over every traced rank of the configuration's jobs:

* collectives and bytes per step: the kernels and their bytes over the profiled steps (a
  trace's kernels span every ProfilerStep it holds, the last one too, which HTA's analysed
  steps leave out when there are two or more), per rank;
* exposed communication per step: exposed seconds over the analysed steps, per rank;
* busbw: the median over the ranks' large-message (>= 1 MiB) rows of their median busbw; the
  world group's large messages are inter-node when the job spans two nodes or more and
  intra-node on one node (sub-groups are not placed: their ranks are not in the rows);
* the verdict, from those numbers only (:func:`verdict`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from itwin_report.analysis.comm_model import CommModel, Link
from itwin_report.analysis.intervals import mean_interval
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


def profiled_steps(rank: dict[str, Any]) -> int:
    """The profiler steps a rank's traces hold, which their kernels span: every ProfilerStep,
    the last one too (HTA's window, ``steps``, leaves it out when there are two or more)."""
    return int(rank.get("profiled_steps") or rank["steps"])


def _row(key: Config, ranks: list[dict[str, Any]], nodes: float) -> dict[str, Any]:
    classes = [c for r in ranks for c in r.get("size_classes") or []]
    steps = sum(profiled_steps(r) for r in ranks)
    analysed = sum(int(r["steps"]) for r in ranks)
    span = sum(_num(r.get("span_s")) for r in ranks)
    exposed = sum(_num(r.get("exposed_communication_s")) for r in ranks)
    sized = [c for c in classes if c.get("bytes") is not None]
    large = [c for c in classes if c["size_class"] == "large"]
    world = [c for c in large if c.get("group_size") == key[1]]
    out = {
        "strategy": key[0],
        "workers": key[1],
        "nodes": nodes,
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
    shares = [_per(_num(r.get("exposed_communication_s")), _num(r.get("span_s"))) for r in ranks]
    mean, low, _ = mean_interval([v for v in shares if v == v])
    out["verdict"], out["evidence"] = verdict(out, bool(classes), mean - low)
    return out


def verdict(
    row: Mapping[str, Any], has_collectives: bool = True, half: float = math.nan
) -> tuple[str, str]:
    """(verdict, evidence) from the row's own numbers: ``hidden behind compute`` (exposed
    communication under :data:`HIDDEN_SHARE` of the device time), ``latency-bound`` (small
    messages over :data:`LATENCY_SHARE` of the collectives' time), ``bandwidth-bound`` (large
    messages' busbw at :data:`NEAR_BETA` of the link fit's beta or more), else ``undecided``
    with what is missing. ``half``: the half-width of the exposed share's 95 % interval over
    the traced ranks; where it holds the line, ``near the line: hidden behind compute or …``."""
    if not has_collectives:
        return "undecided", "no collective kernels in the traces"
    share = row["exposed_comm_share"]
    if _missing(share):
        return "undecided", "no exposed communication share: the traces have no device span"
    ci = (
        f"95 % interval {100 * (share - half):.1f}–{100 * (share + half):.1f} %; "
        if half == half
        else ""
    )
    said = f"exposed communication {100 * share:.1f} % of the device time ({ci}the line: 5 %)"
    if half > 0 and abs(share - HIDDEN_SHARE) < half:
        word, why = _exposed(row, [said])
        return f"near the line: hidden behind compute or {word}", why
    if share < HIDDEN_SHARE:
        return "hidden behind compute", said
    return _exposed(row, [said])


def _exposed(row: Mapping[str, Any], said: list[str]) -> tuple[str, str]:
    """What an exposed communication is bound by: small messages, the link, or undecided."""
    small = row["small_time_share"]
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


GRADIENT_COLLECTIVES = ("all_reduce", "all_gather")  # each moves the whole gradient once


def comm_models(
    ranks: list[dict[str, Any]], table: pd.DataFrame, global_batch: frozenset[str] = frozenset()
) -> list[CommModel]:
    """Per strategy with traces: its communication model (:mod:`itwin_report.analysis.
    comm_model`) from its largest traced configuration whose collectives give their sizes;
    ``global_batch``: the strategies whose global batch is the same at every worker count."""
    out = []
    rows = table.dropna(subset=["bytes_per_step"]) if not table.empty else table
    for strategy, group in rows.groupby("strategy", sort=True) if not rows.empty else []:
        base = group.sort_values("workers").iloc[-1]
        n0 = int(base["workers"])
        mine = [r for r in ranks if (str(r["strategy"]), int(r["workers"])) == (strategy, n0)]
        model = _model(str(strategy), n0, mine, base)
        if model is not None:
            out.append(replace(model, fixed_global_batch=str(strategy) in global_batch))
    return out


def _model(strategy: str, n0: int, ranks: list[dict[str, Any]], row: pd.Series) -> CommModel | None:
    steps = sum(profiled_steps(r) for r in ranks)
    moved = [
        c
        for r in ranks
        for c in r.get("size_classes") or []
        if c["collective"] in GRADIENT_COLLECTIVES and c.get("bytes") is not None
    ]
    gradient = _per(sum(float(c["bytes"]) for c in moved), steps)
    jobs: dict[str, list[float]] = {}
    for r in ranks:
        jobs.setdefault(str(r["job_id"]), []).append(_num(r.get("compute_per_step_s")))
    compute, low, high = mean_interval([float(np.nanmean(v)) for v in jobs.values()])
    link = _link(n0, ranks, row)
    if not gradient > 0 or not compute > 0 or link is None or n0 < 2:
        return None
    return CommModel(
        strategy=strategy,
        base_workers=n0,
        gradient_bytes=gradient,
        collectives=_per(sum(int(c["count"]) for c in moved), steps),
        compute_s=compute,
        compute_ci=(low, high),
        link=link,
        inter_node=bool(row["nodes"] > 1),
    )


def _link(n0: int, ranks: list[dict[str, Any]], row: pd.Series) -> Link | None:
    """The median of the ranks' link fits and of their bounds; else the large messages' busbw
    (inter-node where placed) with no latency."""
    fits = [f for r in ranks for f in r.get("link_fits") or []]
    if fits:

        def med(key: str, i: int | None = None) -> float:
            values = [f[key] if i is None else f[key][i] for f in fits]
            known = [float(v) for v in values if v is not None]
            return float(np.median(known)) if known else math.nan

        return Link(
            n0,
            med("alpha_s"),
            med("beta_gbps"),
            (med("alpha_ci", 0), med("alpha_ci", 1)),
            (med("beta_ci", 0), med("beta_ci", 1)),
        )
    busbw = (
        row["busbw_inter_gbps"]
        if row["busbw_inter_gbps"] == row["busbw_inter_gbps"]
        else row["busbw_gbps"]
    )
    if not busbw > 0:
        return None
    return Link(n0, 0.0, float(busbw), fitted=False)


def with_comm(predictions: pd.DataFrame, models: list[CommModel]) -> pd.DataFrame:
    """``predictions`` with each row's compute and communication per step from its strategy's
    communication model (NaN without one): why the prediction stops scaling."""
    if predictions.empty:
        return predictions
    by = {m.strategy: m for m in models}
    pairs = [
        (by[s].compute_at(int(w)), by[s].comm_s(int(w))) if s in by else (math.nan, math.nan)
        for s, w in zip(predictions["strategy"], predictions["workers"], strict=True)
    ]
    return predictions.assign(
        compute_s_per_step=[c for c, _ in pairs], comm_s_per_step=[m for _, m in pairs]
    )
