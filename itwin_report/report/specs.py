"""One definition per report table: its columns, dtypes, headers, formats and JSON names.

Aggregation builds its frames from these specs (column order and dtypes of an empty table),
every renderer reads headers, formats and alignment from them, and the JSON writer the names.
A column with ``header=None`` is kept in the frame, CSV and JSON, but not shown as a table
column (the throughput ``evidence`` is printed as a list under its table).

Light module: standard library only, so ``--help`` stays fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from itwin_report.report.columns import (  # the building blocks, used with the specs
    MISSING,
    Column,
    TableSpec,
    flag,
    integer,
    is_missing,
    number,
    percent_of_fraction,
    text,
)


def _key_columns() -> tuple[Column, ...]:
    return (
        Column(
            "strategy",
            "str",
            "Strategy",
            text,
            right=False,
            description="Distributed strategy (DDP, DeepSpeed, Horovod, ...) as the runs log it.",
        ),
        Column(
            "workers",
            "int64",
            "Workers",
            integer,
            description="Workers (GPUs) of the configuration: the global world size.",
        ),
        NODES,
        Column(
            "runs",
            "int64",
            "Runs",
            integer,
            description="Jobs of the configuration that contribute data to this table.",
        ),
    )


def _whole(value: Any) -> str:
    """A count that may be a mean: ``2``, or ``1.5`` when the jobs differ."""
    if is_missing(value):
        return MISSING
    return str(int(value)) if float(value).is_integer() else format(float(value), ".1f")


NODES = Column(
    "nodes",
    "float64",
    "Nodes",
    _whole,
    optional=True,
    description="Nodes of the configuration's jobs: the distinct hostname params of their "
    "ranks where every rank logged one, else GPUs / GPUs per node rounded up (--gpus-per-node, "
    "else the runs' gpus_per_node param); unknown otherwise. A mean when its jobs differ.",
)


def _base_columns() -> tuple[Column, ...]:
    """The configuration a row's speedup is measured against (CSV and JSON only)."""
    return (
        Column("base_strategy", "str", None, text, right=False, description="Base strategy."),
        Column("base_workers", "float64", None, integer, description="Base worker count."),
    )


SECONDS = number(".2f", " s")
SPEEDUP = number(".2f", "x")
COST = "cost"  # the GPU table's cost columns, printed as a table of their own


def _interval(name: str, what: str, group: str = "") -> tuple[Column, Column]:
    """The hidden 95 % interval bounds of column ``name`` (CSV and JSON only)."""
    return tuple(  # type: ignore[return-value]
        Column(
            f"{name}_ci_{end}",
            "float64",
            None,
            number(".4f"),
            group=group,
            description=f"{end.capitalize()} bound of the 95 % interval of {what}.",
        )
        for end in ("low", "high")
    )


def _cost_columns() -> tuple[Column, ...]:
    """GPU-hours, node-hours, energy per samples, and the optional facility, CO2e and money."""
    return (
        Column(
            "gpu_hours_per_epoch",
            "float64",
            "GPU-h per epoch",
            number(".4f"),
            group=COST,
            description="GPUs x mean epoch time after warm-up / 3600.",
        ),
        *_interval("gpu_hours_per_epoch", "GPU-hours per epoch (from epoch time's)", COST),
        Column(
            "gpu_hours_per_run",
            "float64",
            "GPU-h per run",
            number(".3f"),
            group=COST,
            description="GPUs x the job's wall time, set-up included (performance.json's "
            "total_time; without it the sum of its epoch times) / 3600, averaged over runs.",
        ),
        Column(
            "node_hours_per_epoch",
            "float64",
            "Node-h per epoch",
            number(".4f"),
            group=COST,
            description="Nodes x mean epoch time after warm-up / 3600.",
        ),
        Column(
            "energy_wh_per_1k_samples",
            "float64",
            "Energy per 1k samples",
            number(".3f", " Wh"),
            group=COST,
            estimated_by="energy_coverage",
            description="Energy per epoch / samples per epoch x 1000 (samples per epoch: "
            "the runs' param or --samples-per-epoch, else throughput x epoch time).",
        ),
        Column(
            "facility_wh_per_epoch",
            "float64",
            "Facility energy per epoch",
            number(".2f", " Wh"),
            group=COST,
            optional=True,
            estimated_by="energy_coverage",
            description="Energy per epoch x --pue (only with --pue).",
        ),
        Column(
            "facility_wh_per_run",
            "float64",
            "Facility energy per run",
            number(".1f", " Wh"),
            group=COST,
            optional=True,
            estimated_by="energy_coverage",
            description="Energy per run x --pue (only with --pue).",
        ),
        Column(
            "co2e_g_per_epoch",
            "float64",
            "CO2e per epoch",
            number(".1f", " g"),
            group=COST,
            optional=True,
            estimated_by="energy_coverage",
            description="(Facility) energy per epoch in kWh x --carbon-intensity (only "
            "with --carbon-intensity; x PUE when --pue is given).",
        ),
        Column(
            "co2e_g_per_run",
            "float64",
            "CO2e per run",
            number(".1f", " g"),
            group=COST,
            optional=True,
            estimated_by="energy_coverage",
            description="(Facility) energy per run in kWh x --carbon-intensity.",
        ),
        Column(
            "cost_per_epoch",
            "float64",
            "Cost per epoch",
            number(".2f"),
            group=COST,
            optional=True,
            description="GPU-hours per epoch x --gpu-hour-price (only with that option).",
        ),
        Column(
            "cost_per_run",
            "float64",
            "Cost per run",
            number(".2f"),
            group=COST,
            optional=True,
            description="GPU-hours per run x --gpu-hour-price (only with that option).",
        ),
    )


EPOCH_TIME = TableSpec(
    "epoch_time",
    "Epoch time",
    "No epoch time data found.",
    (
        *_key_columns(),
        Column(
            "epochs",
            "int64",
            "Epochs",
            integer,
            description="Epoch times averaged, after the warm-up epochs, pooled over the runs.",
        ),
        Column(
            "avg_epoch_time_s",
            "float64",
            "Avg epoch time",
            SECONDS,
            description="Mean epoch time over those epochs.",
        ),
        Column(
            "std_epoch_time_s",
            "float64",
            "Std between runs",
            SECONDS,
            description="Sample standard deviation of the per-run mean epoch times (two runs+).",
        ),
        Column(
            "speedup",
            "float64",
            "Speedup",
            SPEEDUP,
            json_name="epoch_time_speedup",
            description="Epoch-time speedup: t(base) / t(workers).",
        ),
        Column(
            "efficiency",
            "float64",
            "Efficiency (epoch time)",
            percent_of_fraction,
            json_name="epoch_time_efficiency",
            description="Epoch-time efficiency: speedup * base workers / workers.",
        ),
        *_base_columns(),
        *(
            Column(name, "float64", None, number(".3f"), description="95 % interval bound.")
            for name in (
                "speedup_ci_low",
                "speedup_ci_high",
                "efficiency_ci_low",
                "efficiency_ci_high",
            )
        ),
    ),
)

GPU = TableSpec(
    "gpu",
    "GPU energy and utilization",
    "No GPU data found.",
    (
        *_key_columns(),
        Column(
            "energy_wh",
            "float64",
            "Energy per run",
            number(".1f", " Wh"),
            description="Energy of one run, all its GPUs (~: scaled from the GPUs measured), "
            "averaged over runs.",
            estimated_by="energy_coverage",
        ),
        Column(
            "energy_wh_per_epoch",
            "float64",
            "Energy per epoch (all epochs)",
            number(".2f", " Wh"),
            description="Each run's energy over all its epochs (warm-up included), averaged "
            "over runs.",
            estimated_by="energy_coverage",
        ),
        *_interval("energy_wh_per_epoch", "energy per epoch"),
        Column(
            "energy_source",
            "str",
            "Source",
            text,
            right=False,
            description="Where energy comes from: the GPUs' cumulative energy counter "
            "(gpu_energy_J, exact), power samples (x probing interval, or over their "
            "timestamps for MLflow's system metrics), or both (some runs each).",
        ),
        Column(
            "energy_coverage",
            "float64",
            None,
            number(".3f"),
            description="GPUs that logged metrics / GPUs of the job, averaged over runs.",
        ),
        Column(
            "utilization_pct",
            "float64",
            "Utilization",
            number(".1f", " %"),
            description="Mean GPU utilization (share of time a kernel ran) over all samples.",
        ),
        Column(
            "avg_power_w",
            "float64",
            "Avg power per GPU",
            number(".1f", " W"),
            description="Mean power of one GPU over all samples.",
        ),
        Column(
            "peak_gpu_memory_mb",
            "float64",
            "Peak memory",
            number(".0f", " MB"),
            description="Highest GPU memory used by any GPU of the configuration (MLflow's "
            "system metrics, memory_usage_megabytes).",
            optional=True,
        ),
        Column(
            "peak_gpu_memory_pct",
            "float64",
            "Peak memory %",
            number(".1f", " %"),
            description="Highest share of its memory any GPU of the configuration used "
            "(memory_usage_percentage).",
            optional=True,
        ),
        *_cost_columns(),
    ),
)

COMPUTATION = TableSpec(
    "computation",
    "Computation vs other",
    "No profiler data found.",
    (
        *_key_columns(),
        Column(
            "computation_fraction",
            "float64",
            "Computation",
            percent_of_fraction,
            description="Share of profiled GPU time in compute kernels (aten::, c10::, ...).",
        ),
        Column(
            "communication_fraction",
            "float64",
            "Communication",
            percent_of_fraction,
            description="Share of profiled GPU time in collectives (NCCL, all-reduce, ...).",
        ),
        Column(
            "other_fraction",
            "float64",
            "Other",
            percent_of_fraction,
            description="The rest of the profiled GPU time: 1 - computation - communication.",
        ),
        Column(
            "trace_compute_fraction",
            "float64",
            "Compute (traces)",
            percent_of_fraction,
            optional=True,
            description="From traces, where the configuration has them: share of the device "
            "span with a compute kernel running, overlapped communication counted once (the "
            "ranks' mean). The three fractions before it sum the profiler averages, which count "
            "communication that overlaps computation twice and so understate computation.",
        ),
    ),
)

THROUGHPUT = TableSpec(
    "throughput",
    "Throughput",
    "No throughput data found.",
    (
        *_key_columns(),
        Column(
            "samples_per_sec",
            "float64",
            "Samples/s",
            number(".1f"),
            description="Samples per second of the whole job, averaged over runs.",
        ),
        *_interval("samples_per_sec", "throughput (from the runs' own)"),
        Column(
            "samples_per_sec_per_gpu",
            "float64",
            "Per GPU",
            number(".1f"),
            description="Samples per second / workers.",
        ),
        Column(
            "speedup",
            "float64",
            "Speedup",
            SPEEDUP,
            json_name="throughput_speedup",
            description="Throughput speedup: r(workers) / r(base).",
        ),
        Column(
            "efficiency",
            "float64",
            "Efficiency (throughput)",
            percent_of_fraction,
            json_name="throughput_efficiency",
            description="End-to-end throughput efficiency: speedup * base workers / workers "
            "(pays for set-up, validation and checkpoints, which epoch times leave out).",
        ),
        *_base_columns(),
        Column(
            "est_samples_per_sec",
            "float64",
            "Estimate",
            number(".1f"),
            description="The trainer's own estimate of samples per second (performance.json).",
        ),
        Column(
            "achieved_fraction",
            "float64",
            "Achieved",
            percent_of_fraction,
            description="Samples per second / estimate.",
        ),
        Column(
            "input_bound",
            "object",
            "Input-bound",
            flag,
            right=False,
            description="The input-bottleneck verdict (None: undecided).",
        ),
        Column(
            "source",
            "str",
            "Source",
            text,
            right=False,
            description="Where throughput comes from: performance.json, rate metrics, epoch time.",
        ),
        Column(
            "evidence",
            "str",
            None,
            text,
            right=False,
            description="The verdict's evidence, listed under the table.",
        ),
    ),
)

PERCENT = number(".1f", " %")

TIME_BREAKDOWN = TableSpec(
    "time_breakdown",
    "Where the time goes",
    "No time breakdown: no configuration has epoch times.",
    (
        *_key_columns(),
        Column(
            "wall_s",
            "float64",
            "Wall time",
            SECONDS,
            description="A run's wall time "
            "(total_time of performance.json: the longest worker's), averaged over runs.",
        ),
        Column(
            "epochs_s",
            "float64",
            "In epochs",
            SECONDS,
            description="The sum of the run's epoch times (warm-up included).",
        ),
        Column(
            "outside_s",
            "float64",
            "Set-up, teardown",
            SECONDS,
            description="Wall time outside the epochs: set-up and teardown.",
        ),
        Column(
            "steady_s",
            "float64",
            "Steady steps",
            SECONDS,
            description="The epochs' samples "
            "at the steady-state rate of the rate metrics: training steps alone.",
        ),
        Column(
            "rest_s",
            "float64",
            "Other in epochs",
            SECONDS,
            description="Epoch time beyond "
            "the steady steps: validation, checkpoints, the warm-up's excess.",
        ),
        Column(
            "compute_pct",
            "float64",
            "Compute",
            PERCENT,
            description="From traces: share of the device span with a compute kernel running.",
        ),
        Column(
            "exposed_communication_pct",
            "float64",
            "Exposed comm",
            PERCENT,
            description="From traces: communication with no compute under it.",
        ),
        Column(
            "idle_pct", "float64", "Idle", PERCENT, description="From traces: no kernel running."
        ),
        Column(
            "bound_by",
            "str",
            "Bound by",
            text,
            right=False,
            description="What bounds the "
            "configuration: a straggler, the input pipeline, fixed per-epoch overhead, "
            "communication or computation (docs/traces.md).",
        ),
        Column(
            "evidence",
            "str",
            None,
            text,
            right=False,
            description="The numbers that decide the verdict, listed under the table.",
        ),
    ),
)


def _scaled(factor: float, fmt: str, unit: str) -> Any:
    """Formatter: ``value x factor`` in ``fmt`` with ``unit`` (bytes as MB, seconds as ms)."""
    show = number(fmt, unit)
    return lambda value: show(value if is_missing(value) else float(value) * factor)


GBPS = number(".1f", " GB/s")

COMMUNICATION = TableSpec(
    "communication",
    "Communication",
    "No communication table: no configuration has traces with collectives.",
    (
        *_key_columns(),
        Column(
            "collectives_per_step",
            "float64",
            "Collectives/step",
            number(".1f"),
            description="Collective kernels per profiled step of one rank (traces).",
        ),
        Column(
            "bytes_per_step",
            "float64",
            "Data/step",
            _scaled(1e-6, ".1f", " MB"),
            description="Bytes those kernels move per step of one rank: max(in, out) elements "
            "x the dtype's size, summed (n/a when no kernel gives its size).",
        ),
        Column(
            "exposed_comm_s_per_step",
            "float64",
            "Exposed comm/step",
            _scaled(1e3, ".2f", " ms"),
            description="Communication with no compute under it, per analysed step of one "
            "rank (the time breakdown's exposed communication).",
        ),
        Column(
            "exposed_comm_share",
            "float64",
            None,
            number(".4f"),
            description="Exposed communication / the ranks' device span (0..1).",
        ),
        Column(
            "small_time_share",
            "float64",
            "Small msgs",
            percent_of_fraction,
            description="Share of the collectives' kernel time in messages under 64 KiB.",
        ),
        Column(
            "busbw_gbps",
            "float64",
            "busbw (large)",
            GBPS,
            description="Median bus bandwidth of large messages (>= 1 MiB): the median over "
            "the ranks of each rank's median, nccl-tests' busbw = bytes / time x the "
            "collective's factor.",
        ),
        Column(
            "busbw_inter_gbps",
            "float64",
            "Inter-node",
            GBPS,
            optional=True,
            description="The same for world-group collectives of a job on two nodes or more.",
        ),
        Column(
            "busbw_intra_gbps",
            "float64",
            "Intra-node",
            GBPS,
            optional=True,
            description="The same for a job on one node.",
        ),
        Column(
            "link_beta_gbps",
            "float64",
            "Link β",
            GBPS,
            optional=True,
            description="Bandwidth of the ranks' link fit, kernel time = α + bus bytes / β "
            "(the median over the ranks).",
        ),
        Column(
            "verdict",
            "str",
            "Verdict",
            text,
            right=False,
            description="hidden behind compute (exposed under 5 % of the device time), "
            "latency-bound (small messages over half the collectives' time), bandwidth-bound "
            "(large messages' busbw at 70 % of β or more), or undecided (what is missing); "
            "near the line where the exposed share's interval holds its line.",
        ),
        Column(
            "evidence",
            "str",
            None,
            text,
            right=False,
            description="The numbers that decide the verdict, listed under the table.",
        ),
    ),
)


@dataclass(frozen=True)
class _OfRuns(Column):
    """A count shown with the row's runs: ``4 of 5``."""

    def cell(self, row: dict[str, Any]) -> str:
        shown = self.fmt(row.get(self.name))
        runs = row.get("runs")
        return shown if shown == MISSING or is_missing(runs) else f"{shown} of {integer(runs)}"


TIME_TO_TARGET = TableSpec(
    "time_to_target",
    "Time to target",
    "No time to target: no run logged the target's metric.",
    (
        *_key_columns()[:3],
        Column(
            "runs",
            "int64",
            None,
            integer,
            description="Jobs of the configuration, whether they reached the target or not.",
        ),
        _OfRuns(
            "runs_reached",
            "int64",
            "Reached",
            integer,
            description="Jobs with a point that meets the target (shown as 'reached of runs'); "
            "the others are left out of the means.",
        ),
        Column(
            "avg_time_to_target_s",
            "float64",
            "Time to target",
            SECONDS,
            description="From the worker run's start to the timestamp of the first point that "
            "meets the target, averaged over the runs that reached it.",
        ),
        *_interval("time_to_target", "the mean time to target (Student-t over runs)"),
        Column(
            "epochs_to_target",
            "float64",
            "Epochs to target",
            number(".1f"),
            description="The step of that first point, read as epochs, averaged over the runs "
            "that reached the target.",
        ),
        Column(
            "global_batch_size",
            "float64",
            "Global batch",
            number(",.0f"),
            description="The global_batch_size param, else batch_size x workers (n/a: neither).",
        ),
        Column(
            "speedup",
            "float64",
            "Speedup",
            SPEEDUP,
            json_name="time_to_target_speedup",
            description="Time-to-target speedup: t(base) / t(workers).",
        ),
        Column(
            "efficiency",
            "float64",
            "Efficiency (time to target)",
            percent_of_fraction,
            json_name="time_to_target_efficiency",
            description="Time-to-target efficiency: speedup * base workers / workers.",
        ),
        *_base_columns(),
    ),
)
"""Printed after the other tables, only when a target is given (``--target``)."""

TABLES: tuple[TableSpec, ...] = (
    EPOCH_TIME,
    GPU,
    COMPUTATION,
    THROUGHPUT,
    TIME_BREAKDOWN,
    COMMUNICATION,
)
"""The report's tables, in the order they are printed."""

SPECS: dict[str, TableSpec] = {spec.name: spec for spec in TABLES}
TABLE_NAMES: tuple[str, ...] = tuple(SPECS)


def spec(name: str) -> TableSpec:
    """The spec of table ``name``."""
    return SPECS[name]


def _dtypes() -> dict[str, str]:
    out: dict[str, str] = {}
    for table in (*TABLES, TIME_TO_TARGET):
        for col in table.columns:
            if out.setdefault(col.name, col.dtype) != col.dtype:
                raise TypeError(f"column {col.name!r} has two dtypes")
    return out


DTYPES: dict[str, str] = _dtypes()
"""Every report column's dtype (a name means the same in every table)."""
