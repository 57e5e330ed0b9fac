"""What bounds each emulated configuration, from the model's own numbers (the truth's verdicts).

The report's "Where the time goes" rules (``itwin_report.report.breakdown``), applied to the
noise-free model in the same order:

1. **a straggler**: a rank (or a node) planted with ``--set straggler_factor``
   (:func:`~itwin_report.emulator.model.slow_ranks`); the emulated metrics move in lockstep,
   so only traces show it (``bound_by_without_traces`` skips this rule);
2. **the input pipeline**: the model's ``input_bound``;
3. **fixed per-epoch overhead**: ``1 - steady / wall >= OVERHEAD_SHARE``, with ``wall =
   setup_s + sum of epoch times`` and ``steady = epochs * S * step / (N b)`` (the epochs'
   samples at the steady-state rate);
4. **communication**: with traces, the ranks' mean exposed communication at least
   ``EXPOSED_SHARE`` of the device span (from the traces' own truth,
   :func:`itwin_report.emulator.kineto.truth`);
5. else **computation**; without traces the report cannot split the steps, so
   ``bound_by_without_traces`` is then **undecided**.

The thresholds are restated here (the emulator never imports the report); a test checks that
they equal the report's.
"""

from __future__ import annotations

from typing import Any

from itwin_report.emulator import model, tracing
from itwin_report.emulator.params import ModelParams

OVERHEAD_SHARE = 0.25
EXPOSED_SHARE = 0.20

STRAGGLER = "a straggler"
INPUT = "the input pipeline"
OVERHEAD = "fixed per-epoch overhead"
COMMUNICATION = "communication"
COMPUTATION = "computation"
UNDECIDED = "undecided"
VERDICTS = (STRAGGLER, INPUT, OVERHEAD, COMMUNICATION, COMPUTATION)


def breakdown(p: ModelParams, strategy: str, workers: int) -> dict[str, Any]:
    """Where the time of one configuration goes (noise-free), and the device shares its
    traces show (the mean over its ranks, percent of each rank's span)."""
    st = model.step(p, strategy, workers)
    epochs = sum(model.epoch_times(p, strategy, workers))
    wall = p.setup_s + epochs
    steady = p.epochs * p.samples_per_epoch * st.time / (workers * p.batch_size)
    ranks = tracing.rank_truth(tracing.rank_specs(p, strategy, workers))
    return {
        "wall_s": wall,
        "epochs_s": epochs,
        "outside_s": wall - epochs,
        "steady_s": steady,
        "rest_s": epochs - steady,
        "outside_steady_share": 1 - steady / wall,
        "compute_pct": _mean([r["compute_pct"] for r in ranks]),
        "exposed_communication_pct": _mean(
            [100 * r["exposed_communication_s"] / r["span_s"] for r in ranks]
        ),
        "idle_pct": _mean([r["idle_pct"] for r in ranks]),
        "input_bound": st.input_bound,
        "loader_wait_share": st.loader_wait / st.time,
        "straggler_ranks": list(model.slow_ranks(p, workers)),
        "straggler_factor": p.straggler_factor,
    }


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def verdict(b: dict[str, Any], traces: bool) -> tuple[str, str]:
    """(bound_by, the numbers that decide it) for breakdown ``b``; ``traces``: whether the
    report has the traces (otherwise no straggler is visible and the steps stay undecided)."""
    slow = b["straggler_ranks"]
    if traces and slow:
        who = f"rank {slow[0]}" if len(slow) == 1 else f"ranks {slow[0]}-{slow[-1]}"
        return STRAGGLER, f"{who}: compute x{b['straggler_factor']:g}"
    if b["input_bound"]:
        return (
            INPUT,
            f"input-bound: the loader's wait is {100 * b['loader_wait_share']:.1f} % of a step",
        )
    share = b["outside_steady_share"]
    if share >= OVERHEAD_SHARE:
        return OVERHEAD, (
            f"{100 * share:.1f} % of the wall time ({b['wall_s']:.1f} s) is outside steady-state "
            f"steps (at least {100 * OVERHEAD_SHARE:.0f} %)"
        )
    if not traces:
        return UNDECIDED, (
            f"{100 * share:.1f} % outside steady steps; no traces to split the steps into "
            "compute and exposed communication"
        )
    exposed = b["exposed_communication_pct"]
    if exposed >= 100 * EXPOSED_SHARE:
        return COMMUNICATION, (
            f"exposed communication {exposed:.1f} % of the device span "
            f"(at least {100 * EXPOSED_SHARE:.0f} %)"
        )
    return COMPUTATION, f"compute {b['compute_pct']:.1f} %, exposed communication {exposed:.1f} %"


def efficiencies(rows: list[dict[str, Any]], weak: bool) -> list[float | None]:
    """Epoch-time efficiency of each truth row as the report's epoch-time table computes it,
    from the mean epoch time after warm-up ``E``: against the 1-worker row when there is one
    (else the strategy's smallest worker count), ``E_b N_b / (E N)``; under weak scaling
    against the strategy's smallest worker count, ``(S / N) / (S_b / N_b) * E_b / E``."""
    single = next((r for r in rows if r["workers"] == 1), None)
    out: list[float | None] = []
    for row in rows:
        mine = [r for r in rows if r["strategy"] == row["strategy"]]
        base = min(mine, key=lambda r: r["workers"])
        if single is not None and not weak:
            base = single
        e, eb = row["mean_epoch_time_after_warmup_s"], base["mean_epoch_time_after_warmup_s"]
        if e is None or eb is None:
            out.append(None)
        elif weak:
            work = (row["samples_per_epoch"] / row["workers"]) / (
                base["samples_per_epoch"] / base["workers"]
            )
            out.append(work * eb / e)
        else:
            out.append(eb * base["workers"] / (e * row["workers"]))
    return out
