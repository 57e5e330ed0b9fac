"""The tables read from profiler traces: the time breakdown and communication."""

from __future__ import annotations

from itwin_report.report.columns import (  # the building blocks, used with the specs
    Column,
    TableSpec,
    number,
    percent_of_fraction,
    text,
)
from itwin_report.report.specs.common import (
    GBPS,
    PERCENT,
    SECONDS,
    evidence_column,
    key_columns,
    scaled,
)

TIME_BREAKDOWN = TableSpec(
    "time_breakdown",
    "Where the time goes",
    "No time breakdown: no configuration has epoch times.",
    (
        *key_columns(),
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
        evidence_column("The numbers that decide the verdict, listed under the table."),
    ),
)


COMMUNICATION = TableSpec(
    "communication",
    "Communication",
    "No communication table: no configuration has traces with collectives.",
    (
        *key_columns(),
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
            scaled(1e-6, ".1f", " MB"),
            description="Bytes those kernels move per step of one rank: max(in, out) elements "
            "x the dtype's size, summed (n/a when no kernel gives its size).",
        ),
        Column(
            "exposed_comm_s_per_step",
            "float64",
            "Exposed comm/step",
            scaled(1e3, ".2f", " ms"),
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
        evidence_column("The numbers that decide the verdict, listed under the table."),
    ),
)
