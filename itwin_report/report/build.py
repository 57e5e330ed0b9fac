"""Building a report: pure aggregation of a :class:`RunData` into the report's tables."""

from __future__ import annotations

from math import nan
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from itwin_report.analysis.intervals import fastest_lines, mean_interval, run_groups
from itwin_report.analysis.node_step import node_steps
from itwin_report.analysis.scaling_mode import constant, decide, per_sample, weak_efficiency
from itwin_report.analysis.scaling_models import (
    Ceiling,
    describe,
    fit_all,
    karp_flatt_table,
    models_table,
    predict,
)
from itwin_report.data.rundata import RunData
from itwin_report.options import ReportOptions, Target, parse_target
from itwin_report.report.baseline import AUTO, Baseline
from itwin_report.report.breakdown import merged_stragglers, time_breakdown, trace_ranks
from itwin_report.report.common import normalized
from itwin_report.report.communication import comm_models, communication_table, with_comm
from itwin_report.report.computation import computation_table
from itwin_report.report.cost import CostFactors, add_costs, config_samples
from itwin_report.report.decision import Work, decide_costs
from itwin_report.report.epoch_time import epoch_time_table, run_means_table
from itwin_report.report.gate import evaluate
from itwin_report.report.gpu import gpu_table
from itwin_report.report.model import Analysis, Report
from itwin_report.report.nodes import config_nodes, with_nodes
from itwin_report.report.series import rate_series
from itwin_report.report.specs import TABLES, TIME_TO_TARGET
from itwin_report.report.stragglers import metric_stragglers
from itwin_report.report.throughput import throughput_table
from itwin_report.report.time_to_target import add_time_to_target
from itwin_report.util.errors import BadOption
from itwin_report.util.notes import tagged
from itwin_report.util.text import name_list

if TYPE_CHECKING:
    from itwin_report.traces.analyze import RunTraces

__all__ = ["build_report"]


def build_report(
    data: RunData,
    warmup_epochs: int = 1,
    rate_config: tuple[str, int] | None = None,
    throughput_source: str = "auto",
    baseline: str = AUTO,
    samples_per_epoch: float | None = None,
    scaling: str = "auto",
    predict_workers: list[int] | None = None,
    gate: tuple[float, str] | None = None,
    costs: CostFactors | None = None,
    max_energy_per_speedup: float | None = None,
    deadline: tuple[float | None, int | None] | None = None,
    traces: RunTraces | None = None,
    target: str | Target | None = None,
) -> Report:
    """Aggregate ``data`` into a :class:`Report`; raises ``BadOption`` on bad options (the
    rules of :mod:`itwin_report.options`).

    ``baseline``: ``auto`` (the single-GPU run when there is one, else per strategy),
    ``single-gpu`` or ``per-strategy``. ``samples_per_epoch`` states the samples per epoch of
    every run for the epoch-time throughput. ``costs``: the cost factors (none assumed);
    ``max_energy_per_speedup`` sets the knee's threshold; ``deadline``: (hours, epochs).
    ``traces``: profiler traces already read and matched to ``data``'s worker runs
    (:func:`itwin_report.traces.analyze.run_traces`): their per-rank breakdown feeds the time
    breakdown and the computation table, their stragglers join the metrics' ones.
    ``target``: ``METRIC>=VALUE`` or ``METRIC<=VALUE`` (:func:`itwin_report.options.parse_target`):
    adds the time-to-target table (:mod:`itwin_report.report.time_to_target`).
    """
    goal = None if target is None else parse_target(target)
    if gate is not None and gate[1] == "time-to-target" and goal is None:
        raise BadOption("--gate-on time-to-target needs --target METRIC>=VALUE")
    costs = costs or CostFactors()
    hours, epochs = deadline or (None, None)
    ReportOptions.of(
        warmup_epochs=warmup_epochs,
        baseline=baseline,
        scaling=scaling,
        throughput_source=throughput_source,
        samples_per_epoch=samples_per_epoch,
        predict=predict_workers or [],
        rate_config=rate_config,
        fail_under_efficiency=gate[0] if gate else None,
        gate_on=gate[1] if gate else None,
        max_energy_per_speedup=max_energy_per_speedup,
        deadline_hours=hours,
        epochs=epochs,
        **costs.to_dict(),
    )
    data = normalized(data)
    epoch, w_epoch, used = epoch_time_table(data, warmup_epochs, baseline)
    runs = run_means_table(data, warmup_epochs)
    mode, note = decide(data.runs, scaling)
    if mode == "weak":
        epoch = weak_efficiency(epoch, data.runs)
    gpu, w_gpu = gpu_table(data)
    ranks = trace_ranks(traces.ranks if traces is not None else [])
    comp, w_comp, no_gpu = computation_table(data, ranks)
    thr, w_thr, thr_used = throughput_table(
        data, gpu, comp, warmup_epochs, throughput_source, baseline, samples_per_epoch, used
    )
    analysis = analyse(epoch, thr, runs, mode, note, predict_workers or [], _samples(data))
    analysis.efficiency_note = efficiency_gap(epoch, thr)
    nodes = config_nodes(data.runs, costs.gpus_per_node)
    analysis.node_steps = node_steps(run_groups(runs), nodes, mode)
    comm = communication_table(traces.ranks if traces else [], nodes)
    if mode == "strong":
        analysis.comm_models = comm_models(traces.ranks if traces else [], comm, _fixed(data))
        analysis.predictions = with_comm(analysis.predictions, analysis.comm_models)
    slow = merged_stragglers(metric_stragglers(data), traces.stragglers if traces else [])
    w_time: list[str] = []
    breakdown = time_breakdown(data, thr, ranks, slow, w_time)
    gpu = add_costs(
        gpu, epoch, runs, data, costs, samples_per_epoch, _by_config(breakdown, "wall_s")
    )
    work = _work(data, mode, samples_per_epoch, breakdown)
    decision = decide_costs(epoch, gpu, runs, max_energy_per_speedup, hours, epochs, work)
    series, config, w_series = rate_series(data, rate_config)
    notes = _baseline_notes(used, thr_used, not thr.empty)
    report = Report(
        experiment=data.experiment,
        tracking_uri=data.tracking_uri,
        warmup_epochs=warmup_epochs,
        epoch_time=epoch,
        gpu=gpu,
        computation=comp,
        throughput=thr,
        rate_series=series,
        rate_config=config,
        warnings=[
            *tagged(notes, "epoch_time", "base"),
            *data.warnings,
            *tagged(w_epoch, "epoch_time"),
            *tagged(w_gpu, "gpu"),
            *tagged(w_comp, "computation"),
            *tagged(w_thr, "throughput"),
            *tagged(w_series, "throughput"),
            *tagged(traces.warnings if traces is not None else [], "time_breakdown"),
            *tagged(w_time, "time_breakdown", "dropped"),
        ],
        baseline=used.to_dict(),
        reasons={} if no_gpu is None else {"computation": no_gpu},
        analysis=analysis,
        data=data,
        costs=costs,
        decision=decision,
        time_breakdown=breakdown,
        stragglers=slow,
        trace_ranks=ranks,
        communication=comm,
    )
    if goal is not None:
        add_time_to_target(report, data, goal, used)
    _add_nodes(report, nodes)
    if gate is not None:
        report.gate = evaluate(report, *gate)
    return report


NODE_TABLES = (*(spec.name for spec in TABLES), TIME_TO_TARGET.name)


def _add_nodes(report: Report, nodes: dict[tuple[str, int], float]) -> None:
    """Every per-configuration table of ``report`` with its ``nodes`` column filled."""
    for name in NODE_TABLES:
        setattr(report, name, with_nodes(getattr(report, name), nodes))


def _fixed(data: RunData) -> frozenset[str]:
    """The strategies whose ``global_batch_size`` param is the same at every worker count."""
    jobs = data.runs.drop_duplicates("job_id")
    return frozenset(
        str(s)
        for s, group in jobs.groupby("strategy")
        if group["global_batch_size"].notna().all()
        and group["workers"].nunique() > 1
        and constant(group["global_batch_size"].to_numpy(dtype=float))
    )


def _samples(data: RunData) -> dict[str, float]:
    """Per strategy: its runs' samples per epoch, when every run that logged it agrees."""
    jobs = data.runs.drop_duplicates("job_id").dropna(subset=["samples_per_epoch"])
    out = {}
    for strategy, group in jobs.groupby("strategy"):
        values = group["samples_per_epoch"].to_numpy(dtype=float)
        if constant(values):
            out[str(strategy)] = float(values.mean())
    return out


def _by_config(table: pd.DataFrame, column: str) -> dict[tuple[str, int], float]:
    """``column`` of a per-configuration table, by (strategy, workers)."""
    return {
        (str(s), int(w)): float(v)
        for s, w, v in zip(table["strategy"], table["workers"], table[column], strict=True)
    }


def _work(data: RunData, mode: str, given: float | None, breakdown: pd.DataFrame) -> Work:
    """What the decision compares: per epoch, or per 1k samples when samples per epoch vary."""
    samples = config_samples(data, given)
    return Work(samples, _by_config(breakdown, "outside_s"), per_sample(mode, samples.values()))


def efficiency_gap(epoch: pd.DataFrame, throughput: pd.DataFrame) -> str:
    """One sentence naming the configurations whose end-to-end throughput efficiency lies
    outside the 95 % interval of their epoch-time efficiency (empty when none does)."""
    if epoch.empty or throughput.empty:
        return ""
    both = epoch.merge(throughput, on=["strategy", "workers"], suffixes=("", "_thr"))
    gaps = [
        f"{r['strategy']}-{int(r['workers'])} ({100 * r['efficiency']:.1f} % vs "
        f"{100 * r['efficiency_thr']:.1f} %)"
        for r in both.to_dict("records")
        if r["efficiency_ci_low"] == r["efficiency_ci_low"]
        and not r["efficiency_ci_low"] <= r["efficiency_thr"] <= r["efficiency_ci_high"]
    ]
    if not gaps:
        return ""
    return (
        "Epoch-time and end-to-end throughput efficiency differ beyond the 95 % interval for "
        f"{name_list(gaps)}: throughput is measured over the whole run, so it also pays for "
        "set-up, validation and checkpoints, which epoch times after warm-up leave out."
    )


def input_ceilings(
    epoch: pd.DataFrame,
    throughput: pd.DataFrame,
    samples: dict[str, float] | None = None,
    runs: pd.DataFrame | None = None,
) -> dict[str, Ceiling]:
    """Per strategy with an input-bound configuration: from its smallest input-bound worker
    count on, the epoch time cannot drop below the fastest measured there, with that mean's
    95 % interval over its ``runs`` (the run means). The ceiling's rate is samples per epoch /
    that time (NaN when the samples per epoch are unknown)."""
    out: dict[str, Ceiling] = {}
    if throughput.empty:
        return out
    bound = throughput[throughput["input_bound"].map(lambda v: v is True or v == True)]  # noqa: E712
    for strategy, rows in bound.groupby("strategy", sort=True):
        start = int(rows["workers"].min())
        mine = epoch[(epoch["strategy"] == strategy) & (epoch["workers"] >= start)]
        times = mine["avg_epoch_time_s"].dropna()
        if times.empty:
            continue
        floor = float(times.min())
        at = int(
            mine["workers"].to_numpy()[int(np.nanargmin(mine["avg_epoch_time_s"].to_numpy(float)))]
        )
        rate = (samples or {}).get(str(strategy), nan) / floor
        groups = run_groups(runs) if runs is not None else {}
        mean, low, _ = mean_interval(groups.get((str(strategy), at), np.empty(0)))
        half = (mean - low) / mean if mean > 0 else nan
        out[str(strategy)] = Ceiling(start, floor, rate, at, half)
    return out


def analyse(
    epoch: pd.DataFrame,
    throughput: pd.DataFrame,
    runs: pd.DataFrame,
    mode: str,
    note: str,
    targets: list[int],
    samples: dict[str, float] | None = None,
) -> Analysis:
    """Fastest-strategy statements, model fits (strong scaling only) and predictions.

    Input-bound configurations are left out of the fits (their time is the input pipeline's,
    not the model's) and bound the predictions from below.
    """
    ceilings = input_ceilings(epoch, throughput, samples, runs) if mode == "strong" else {}
    bound = {(s, c.workers) for s, c in ceilings.items()}
    exclude = {
        (str(s), int(w))
        for s, w in zip(epoch["strategy"], epoch["workers"], strict=True)
        if any(s == b and w >= bw for b, bw in bound)
    }
    models = fit_all(epoch, exclude) if mode == "strong" else []
    targets = sorted(set(targets))
    predictions = predict(models, targets, ceilings)
    notes = []
    if mode == "weak" and targets:
        notes = ["no predictions under weak scaling: the models describe a fixed global problem"]
    return Analysis(
        scaling=mode,
        scaling_note=note,
        run_means=runs,
        fastest=fastest_lines(runs),
        models=models_table(models),
        karp_flatt=karp_flatt_table(models),
        model_lines=[describe(m) for m in models],
        predictions=predictions,
        prediction_notes=notes,
        fits=models,
        ceilings=ceilings,
    )


def _baseline_notes(epoch: Baseline, throughput: Baseline, has_throughput: bool) -> list[str]:
    """One line saying what speedup is measured against, when it is the single-GPU run."""
    notes = []
    own = [s for s, (_, w) in epoch.bases if w != 1]
    if epoch.reference is not None:
        who = "every strategy are" if not own else f"every strategy but {', '.join(own)} are"
        notes.append(
            f"speedup and efficiency of {who} against {epoch.describe()}; "
            "--baseline per-strategy measures each strategy against its own smallest count"
        )
    if has_throughput and throughput != epoch:
        notes.append(f"throughput speedup is against {throughput.describe()}")
    return notes
