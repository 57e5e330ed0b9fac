"""The tables of the GPUs: energy, utilisation and cost, and the computation's share."""

from __future__ import annotations

from itwin_report.report.columns import (  # the building blocks, used with the specs
    Column,
    TableSpec,
    number,
    percent_of_fraction,
    text,
)
from itwin_report.report.specs.common import (
    COST,
    interval_columns,
    key_columns,
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
        *interval_columns("gpu_hours_per_epoch", "GPU-hours per epoch (from epoch time's)", COST),
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


GPU = TableSpec(
    "gpu",
    "GPU energy and utilization",
    "No GPU data found.",
    (
        *key_columns(),
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
        *interval_columns("energy_wh_per_epoch", "energy per epoch"),
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
        *key_columns(),
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
