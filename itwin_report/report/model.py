"""The report model: the tables of one experiment's report and its analysis (no computing)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pandas as pd

from itwin_report.data.rundata import RunData

if TYPE_CHECKING:
    from itwin_report.analysis.comm_model import CommModel
    from itwin_report.analysis.node_step import NodeStep
    from itwin_report.analysis.scaling_models import StrategyModels
    from itwin_report.options import Target
    from itwin_report.report.cost import CostFactors
    from itwin_report.report.decision import Decision
    from itwin_report.report.gate import GateVerdict

__all__ = ["Analysis", "Report"]


@dataclass
class Report:
    """All tables of one experiment's report, plus the Rate series for its plot."""

    experiment: str
    tracking_uri: str
    warmup_epochs: int
    epoch_time: pd.DataFrame
    gpu: pd.DataFrame
    computation: pd.DataFrame
    throughput: pd.DataFrame
    rate_series: pd.DataFrame
    rate_config: tuple[str, int] | None
    warnings: list[str] = field(default_factory=list)
    baseline: dict = field(
        default_factory=lambda: {"mode": "per-strategy", "reference": None, "bases": []}
    )
    # why a table is empty or all unknown, for the plots' messages: {"computation": "..."}
    reasons: dict[str, str] = field(default_factory=dict)
    analysis: Analysis | None = None
    gate: GateVerdict | None = None  # --fail-under-efficiency's verdict, when asked for
    costs: CostFactors | None = None  # the cost factors given (None: the report predates them)
    decision: Decision | None = None  # the Pareto front, the knee and the recommendation
    # where the time goes per configuration, with its verdict (report/breakdown.py), and the
    # ranks or nodes that lag the others, in the traces or the metrics (one row per job and
    # rank or node: report/breakdown.py's STRAGGLER_COLUMNS)
    time_breakdown: pd.DataFrame = field(default_factory=lambda: _empty("time_breakdown"))
    stragglers: pd.DataFrame = field(default_factory=pd.DataFrame)
    # one row per job and rank with a matched profiler trace (report/breakdown.py's
    # TRACE_RANK_COLUMNS); empty without traces
    trace_ranks: pd.DataFrame = field(default_factory=pd.DataFrame)
    # per configuration with traces: collectives, bytes and bandwidth per step and why
    # communication costs what it does (report/communication.py); empty without traces
    communication: pd.DataFrame = field(default_factory=lambda: _empty("communication"))
    # the quality target (--target) and, per configuration, the time to reach it
    # (report/time_to_target.py); one row per job with its outcome in time_to_target_runs
    target: Target | None = None
    time_to_target: pd.DataFrame = field(default_factory=lambda: _empty("time_to_target"))
    time_to_target_runs: pd.DataFrame = field(default_factory=pd.DataFrame)
    # the target metric's points per run (strategy, workers, job_id, seconds since the run's
    # start, value), for the convergence plot
    convergence: pd.DataFrame = field(default_factory=pd.DataFrame)
    # the loaded data the report was built from (for the page's title block); not compared
    data: RunData | None = field(default=None, repr=False, compare=False)


@dataclass
class Analysis:
    """Intervals, scaling models and predictions (see ``docs/analysis.md``)."""

    scaling: str  # "strong" or "weak"
    scaling_note: str
    run_means: pd.DataFrame  # one row per run: strategy, workers, job_id, avg_epoch_time_s
    fastest: list[str]
    models: pd.DataFrame
    karp_flatt: pd.DataFrame
    model_lines: list[str]
    predictions: pd.DataFrame
    prediction_notes: list[str]
    fits: list[StrategyModels] = field(default_factory=list)
    # per strategy: the measured input ceiling bounding its predictions (workers, floor, rate)
    ceilings: dict = field(default_factory=dict)
    efficiency_note: str = ""  # why the two efficiencies differ, when they do beyond noise
    # per strategy: the efficiency lost from one node to two or more (analysis/node_step.py)
    node_steps: list[NodeStep] = field(default_factory=list)
    # per strategy with traces: compute and communication per step against workers
    # (analysis/comm_model.py), and where they cross
    comm_models: list[CommModel] = field(default_factory=list)


def _empty(table: str) -> pd.DataFrame:
    """An empty ``table`` with the columns and dtypes of its spec."""
    from itwin_report.report.specs import SPECS, TIME_TO_TARGET

    spec = TIME_TO_TARGET if table == TIME_TO_TARGET.name else SPECS[table]
    return pd.DataFrame({c.name: pd.Series(dtype=c.dtype) for c in spec.columns})
