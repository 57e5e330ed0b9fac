"""The tables of time: epoch time, throughput and time to target."""

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
from itwin_report.report.specs.common import (
    SECONDS,
    SPEEDUP,
    base_columns,
    evidence_column,
    interval_columns,
    key_columns,
)

EPOCH_TIME = TableSpec(
    "epoch_time",
    "Epoch time",
    "No epoch time data found.",
    (
        *key_columns(),
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
        *base_columns(),
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

THROUGHPUT = TableSpec(
    "throughput",
    "Throughput",
    "No throughput data found.",
    (
        *key_columns(),
        Column(
            "samples_per_sec",
            "float64",
            "Samples/s",
            number(".1f"),
            description="Samples per second of the whole job, averaged over runs.",
        ),
        *interval_columns("samples_per_sec", "throughput (from the runs' own)"),
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
        *base_columns(),
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
        evidence_column("The verdict's evidence, listed under the table."),
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
        *key_columns()[:3],
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
        *interval_columns("time_to_target", "the mean time to target (Student-t over runs)"),
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
        *base_columns(),
    ),
)
"""Printed after the other tables, only when a target is given (``--target``)."""
