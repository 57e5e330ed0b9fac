"""The analysis part of a report as text and JSON: intervals, scaling mode, models, predictions.

Light module: pandas is only touched through the report's frames.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from itwin_report.util.masking import mask_text

if TYPE_CHECKING:
    import pandas as pd

    from itwin_report.report import Report

CI_PAIRS = {
    "epoch_time_speedup_ci": ("speedup_ci_low", "speedup_ci_high"),
    "epoch_time_efficiency_ci": ("efficiency_ci_low", "efficiency_ci_high"),
}
MODEL_NAMES = {"amdahl": "Amdahl", "usl": "USL", "input ceiling": "input ceiling"}


def _plain(value: Any) -> Any:
    """JSON-safe scalar: numpy -> Python, NaN/inf -> None, text masked."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, str):
        return mask_text(value)
    return value


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [
        {str(k): _plain(v) for k, v in rec.items()}
        for rec in frame.astype(object).to_dict("records")
    ]


def pair_intervals(row: dict[str, Any]) -> dict[str, Any]:
    """A JSON epoch-time row with its interval columns paired as ``[low, high]`` (or None)."""
    if "speedup_ci_low" not in row:
        return row
    out = {k: v for k, v in row.items() if not k.endswith(("_ci_low", "_ci_high"))}
    for name, (low, high) in CI_PAIRS.items():
        lo, hi = row.get(low), row.get(high)
        out[name] = None if lo is None or hi is None else [lo, hi]
    return out


def json_fields(report: Report) -> dict[str, Any]:
    """The analysis keys of the JSON report (empty when the report carries no analysis)."""
    a = report.analysis
    if a is None:
        return {}
    return {
        "scaling": a.scaling,
        "scaling_note": a.scaling_note,
        "runs": _records(a.run_means),
        "fastest": [mask_text(line) for line in a.fastest],
        "scaling_models": _records(a.models),
        "karp_flatt": _records(a.karp_flatt),
        "model_summary": [mask_text(line) for line in a.model_lines],
        "predictions": _records(a.predictions),
        "prediction_notes": [mask_text(line) for line in a.prediction_notes],
        "efficiency_note": mask_text(a.efficiency_note),
        "node_steps": [_node_step(step) for step in getattr(a, "node_steps", [])],
        "communication_model": [
            _comm_model(m, _targets(report)) for m in getattr(a, "comm_models", [])
        ],
    }


def _targets(report: Report) -> list[int]:
    """The worker counts predictions were asked for."""
    a = report.analysis
    if a is None or a.predictions.empty:
        return []
    return sorted({int(w) for w in a.predictions["workers"]})


def _comm_model(m: Any, targets: list[int]) -> dict[str, Any]:
    """A communication model as JSON: its inputs, the crossing and the asked worker counts."""
    n, low, high = m.crossing()
    return {
        "strategy": mask_text(m.strategy),
        "base_workers": m.base_workers,
        "inter_node": m.inter_node,
        "gradient_bytes_per_step": _plain(m.gradient_bytes),
        "collectives_per_step": _plain(m.collectives),
        "compute_s_per_step": _plain(m.compute_s),
        "alpha_s": _plain(m.link.alpha_s),
        "beta_gbps": _plain(m.link.beta_gbps),
        "link": "fit" if m.link.fitted else "busbw",
        "crossing_workers": _plain(n),
        "crossing_ci": None if low != low or high != high else [low, high],
        "predictions": [
            {"workers": w, "compute_s_per_step": m.compute_at(w), "comm_s_per_step": m.comm_s(w)}
            for w in targets
        ],
        "text": mask_text(comm_sentence(m)),
    }


def comm_sentence(m: Any) -> str:
    """Why a strategy stops scaling, in one sentence, with the numbers that say it."""
    link = m.link
    where = "inter-node" if m.inter_node else "intra-node"
    said = f"β {link.beta_gbps:.1f} GB/s, α {1e6 * link.alpha_s:.1f} µs"
    if not link.fitted:
        said = f"β = its large messages' busbw {link.beta_gbps:.1f} GB/s, latency not fitted"
    n, low, high = m.crossing()
    if n != n:
        end = "they do not cross below 10 million GPUs"
    else:
        ci = (
            "no 95 % interval: it needs a link fit and two runs or more"
            if low != low or high != high
            else f"95 % interval {low:.0f}–{high:.0f}"
        )
        end = f"they cross at {n:.0f} GPUs ({ci}): beyond it a step is bound by communication"
    trend = (
        "shrinks as 1/n (the global batch is fixed)"
        if m.fixed_global_batch
        else "stays the same (the batch per worker is fixed)"
    )
    return (
        f"{m.strategy}: from {m.base_workers} GPUs ({where} link, {said}), compute per step "
        f"{1e3 * m.compute_s:.2f} ms {trend} while the ring all-reduce of "
        f"{m.gradient_bytes / 1e6:.1f} MB per step takes {1e3 * m.comm_s(m.base_workers):.2f} ms "
        f"and grows with n; {end}."
    )


def _node_step(step: Any) -> dict[str, Any]:
    """A node step as JSON: its fields, the interval paired, and its sentence."""
    row = {k: _plain(v) for k, v in step.to_dict().items()}
    low, high = row.pop("efficiency_lost_ci_low"), row.pop("efficiency_lost_ci_high")
    row["efficiency_lost_ci"] = None if low is None or high is None else [low, high]
    row["text"] = mask_text(step.sentence)
    return row


def interval_text(low: Any, high: Any, fmt: str) -> str:
    """``[low, high]`` formatted, or n/a."""
    if low is None or high is None or low != low or high != high:
        return "n/a"
    return f"{format(float(low), fmt)}–{format(float(high), fmt)}"


def model_rows(report: Report) -> tuple[list[str], list[list[str]]]:
    """(headers, rows) of the fitted-models table."""
    headers = [
        "Strategy",
        "Model",
        "Points",
        "Serial fr.",
        "σ",
        "κ",
        "Peak",
        "R²",
        "LOO err",
        "Chosen",
    ]
    rows = []
    if report.analysis is not None:
        for r in _records(report.analysis.models):
            rows.append(
                [
                    str(r["strategy"]),
                    MODEL_NAMES[r["model"]],
                    str(r["points"]),
                    _fmt(r["serial_fraction"], ".4f"),
                    _fmt(r["contention"], ".4f"),
                    _fmt(r["coherency"], ".2e"),
                    "none"
                    if r["model"] == "usl" and r["peak_workers"] is None
                    else _fmt(r["peak_workers"], ".0f"),
                    _fmt(r["r2"], ".4f"),
                    _fmt(r["loo_error"], ".1%"),
                    "yes" if r["chosen"] else "no",
                ]
            )
    return headers, rows


def prediction_rows(report: Report) -> tuple[list[str], list[list[str]]]:
    """(headers, rows) of the predictions table: every strategy and count asked for."""
    headers = [
        "Strategy",
        "Workers",
        "Model",
        "Epoch time",
        "95 % interval",
        "Speedup",
        "Eff. (epoch time)",
        "Base",
        "Note",
    ]
    rows = []
    if report.analysis is not None:
        for r in _records(report.analysis.predictions):
            answered = r["avg_epoch_time_s"] is not None
            rows.append(
                [
                    str(r["strategy"]),
                    str(r["workers"]),
                    MODEL_NAMES.get(r["model"], str(r["model"])) if answered else "none",
                    _fmt(r["avg_epoch_time_s"], ".2f") + (" s" if answered else ""),
                    interval_text(r["low_s"], r["high_s"], ".2f")
                    + (" s" if r["low_s"] is not None else ""),
                    _fmt(r["speedup"], ".2f") + ("x" if answered else ""),
                    _pct(r["efficiency"]),
                    f"{r['base_strategy']}-{r['base_workers']}",
                    str(r["note"] or ""),
                ]
            )
    return headers, rows


def _fmt(value: Any, fmt: str) -> str:
    return "n/a" if value is None else format(float(value), fmt)


def sentences(report: Report) -> list[str]:
    """Scaling mode, fastest strategies, model summaries and prediction notes."""
    a = report.analysis
    if a is None:
        return []
    unfitted = {sm.strategy for sm in a.fits if sm.chosen is None}
    # a strategy without a model already says why in its model line
    notes = [
        n
        for n in a.prediction_notes
        if not any(n.startswith(f"no prediction for {s}: ") for s in unfitted)
    ]
    gap = [a.efficiency_note] if a.efficiency_note else []
    steps = [step.sentence for step in getattr(a, "node_steps", [])]
    comm = [comm_sentence(m) for m in getattr(a, "comm_models", [])]
    return [a.scaling_note, *a.fastest, *a.model_lines, *steps, *comm, *notes, *gap]


TableParts = tuple[str, str, list[str], list[list[str]], list[bool], str]


def interval_rows(report: Report) -> tuple[list[str], list[list[str]]]:
    """(headers, rows) of the speedup/efficiency interval table; no rows without intervals."""
    headers = [
        "Strategy",
        "Workers",
        "Runs",
        "Speedup",
        "95 % interval",
        "Efficiency",
        "95 % interval",
    ]
    frame = report.epoch_time
    if "speedup_ci_low" not in frame.columns:
        return headers, []
    known = frame[frame["speedup_ci_low"].notna() | frame["efficiency_ci_low"].notna()]
    rows = []
    for r in _records(known):
        rows.append(
            [
                str(r["strategy"]),
                str(r["workers"]),
                str(r["runs"]),
                _fmt(r["speedup"], ".2f"),
                interval_text(r["speedup_ci_low"], r["speedup_ci_high"], ".2f"),
                _pct(r["efficiency"]),
                "n/a"
                if r["efficiency_ci_low"] is None
                else f"{_pct(r['efficiency_ci_low'])}–{_pct(r['efficiency_ci_high'])}",
            ]
        )
    return headers, rows


def karp_flatt_rows(report: Report) -> tuple[list[str], list[list[str]]]:
    headers = ["Strategy", "Workers", "Karp–Flatt serial fraction", "95 % interval", "Base"]
    rows = []
    if report.analysis is not None:
        for r in _records(report.analysis.karp_flatt):
            rows.append(
                [
                    str(r["strategy"]),
                    str(r["workers"]),
                    _fmt(r["karp_flatt"], ".4f"),
                    interval_text(r["karp_flatt_low"], r["karp_flatt_high"], ".4f"),
                    f"{r['base_strategy']}-{r['base_workers']}",
                ]
            )
    return headers, rows


def comm_model_rows(report: Report) -> tuple[list[str], list[list[str]]]:
    """(headers, rows): per strategy with a communication model, at each predicted count."""
    headers = ["Strategy", "Workers", "Compute/step", "Comm/step", "Bound by"]
    rows = []
    a = report.analysis
    for m in getattr(a, "comm_models", []) if a is not None else []:
        for w in _targets(report):
            compute, comm = m.compute_at(w), m.comm_s(w)
            bound = "communication" if comm >= compute else "computation"
            rows.append(
                [m.strategy, str(w), f"{1e3 * compute:.2f} ms", f"{1e3 * comm:.2f} ms", bound]
            )
    return headers, rows


def _pct(value: Any) -> str:
    return "n/a" if value is None else f"{float(value) * 100:.1f} %"


def analysis_tables(report: Report) -> list[TableParts]:
    """The analysis tables that have rows: (name, heading, headers, rows, right, empty)."""
    out: list[TableParts] = []
    parts = (
        ("intervals", "Speedup and efficiency, 95 % intervals", interval_rows(report)),
        ("scaling_models", "Scaling models", model_rows(report)),
        ("karp_flatt", "Karp–Flatt serial fraction", karp_flatt_rows(report)),
        ("predictions", "Predictions", prediction_rows(report)),
        ("communication_model", "Compute and communication per step", comm_model_rows(report)),
    )
    for name, heading, (headers, rows) in parts:
        if rows:
            right = [False] + [True] * (len(headers) - 1)
            if name == "scaling_models":
                right[1] = right[-1] = False
            if name == "predictions":
                right[2] = right[-2] = right[-1] = False
            if name == "communication_model":
                right[-1] = False
            out.append((name, heading, headers, rows, right, ""))
    return out
