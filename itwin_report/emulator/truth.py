"""The noise-free ground truth of an emulation: what the report should compute from it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from itwin_report.emulator import bounds, convergence, model, profile, timeline, tracing
from itwin_report.emulator.options import EmulationOptions
from itwin_report.emulator.params import ModelParams
from itwin_report.util.errors import ReportError


def configuration(
    p: ModelParams, strategy: str, workers: int, logging_ranks: int
) -> dict[str, Any]:
    """Truth of one (strategy, workers) configuration; energy over ``logging_ranks`` GPUs."""
    times = model.epoch_times(p, strategy, workers)
    lay = timeline.layout(p, strategy, workers, np.ones(p.epochs))
    util = timeline.utilization(lay, p.probing_interval)
    watts = timeline.power(p, util)
    energy = logging_ranks * float(watts.sum()) * p.probing_interval / 3600.0
    st = model.step(p, strategy, workers)
    total_time = p.setup_s + sum(times)
    perf = timeline.performance_record(p, strategy, workers, total_time)
    compute, comm = profile.fractions(profile.rows(p, strategy, workers))
    after = times[1:]
    return {
        "strategy": strategy,
        "workers": workers,
        "epoch_times_s": times,
        "mean_epoch_time_s": sum(times) / len(times),
        "mean_epoch_time_after_warmup_s": sum(after) / len(after) if after else None,
        "energy_wh": energy,
        "energy_wh_per_epoch": energy / p.epochs,
        "utilization_pct": float(util.mean()) if len(util) else None,
        "avg_power_w": float(watts.mean()) if len(watts) else None,
        "computation_fraction": compute,
        "communication_fraction": comm,
        "samples_per_sec": workers * perf["total_samples"] / total_time,
        "steady_samples_per_sec": workers * p.batch_size / st.time,
        "est_samples_per_sec": perf["est_samples_per_sec"],
        "samples_per_sec_per_gpu": perf["total_samples"] / total_time,
        "steady_samples_per_sec_per_gpu": p.batch_size / st.time,
        "samples_per_epoch": p.samples_per_epoch,
        "input_bound": st.input_bound,
        "gpus_per_node": p.gpus_per_node,
        "nodes": model.nodes(workers, p.gpus_per_node),
        "time_breakdown": bounds.breakdown(p, strategy, workers),
        "communication": tracing.communication_truth(p, strategy, workers),
        **convergence.truth(p, workers, times),
    }


def expected_truth(options: EmulationOptions) -> dict[str, Any]:
    """Ground truth for ``options`` (no MLflow needed).

    Under weak scaling each configuration's samples per epoch grow with its GPU count; the
    throughput per GPU (``samples_per_sec_per_gpu``) is then the measure to compare.
    """
    p = options.params()
    configs = []
    for c in options.configs():
        q = options.config_params(p, c.workers)
        row = configuration(q, c.model, c.workers, len(options.log_ranks(c.workers)))
        row["strategy"] = c.strategy
        if options.traces is not None:
            row["trace_ranks"] = tracing.rank_truth(tracing.rank_specs(q, c.model, c.workers))
        configs.append(row)
    weak = options.scaling == "weak"
    for row, efficiency in zip(configs, bounds.efficiencies(configs, weak), strict=True):
        b = row["time_breakdown"]
        b["efficiency"] = efficiency
        b["bound_by_without_traces"] = bounds.verdict(b, traces=False)[0]
        row["bound_by"], b["decided_by"] = bounds.verdict(b, traces=True)
    return {
        "preset": options.preset,
        "seed": options.seed,
        "scaling": options.scaling,
        "itwinai_only": options.itwinai_only,
        "energy_counter": options.energy_counter,
        "params": p.as_dict(),
        "target": convergence.target_text(p) if convergence.enabled(p) else None,
        "thresholds": {
            "overhead_share": bounds.OVERHEAD_SHARE,
            "exposed_share": bounds.EXPOSED_SHARE,
        },
        "configurations": configs,
    }


def write_truth(truth: dict[str, Any], path: str | Path) -> None:
    """Write the truth as indented JSON; ReportError when the file cannot be written."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(truth, indent=2) + "\n")
    except OSError as exc:
        raise ReportError(f"cannot write truth file {target}: {exc.strerror}") from exc
