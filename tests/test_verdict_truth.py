"""What bounds each configuration, against the emulator's truth: the report's verdicts never
contradict it, on itwinai's defaults (where the data cannot decide) and on the default preset
(where it can), over two noise seeds. The truth comes from the noise-free model alone
(``expected_truth``), never from the report's code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from itwin_report.emulator import EmulationOptions, expected_truth, run_emulation
from itwin_report.report import build_report
from itwin_report.store import load_experiment

NEAR = "near the line: "
STEPS = {"computation", "communication"}  # what "steady steps" leaves open


def _candidates(said: str) -> set[str]:
    """The verdicts a report line allows: one, both sides of a line, or any ("undecided")."""
    if said == "undecided":
        return {"*"}
    if said.startswith(NEAR):
        named = set(said[len(NEAR) :].split(" or "))
        return (named - {"steady steps"}) | (STEPS if "steady steps" in named else set())
    return {said}


def _verdicts(tmp_path: Path, options: EmulationOptions) -> list[tuple[Any, str, str, str]]:
    """(configuration, the report's bound_by, its evidence, the truth's bound_by) per row."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_emulation(options, uri)
    truth = {
        (c["strategy"], c["workers"]): c["bound_by"]
        for c in expected_truth(options)["configurations"]
    }
    report = build_report(load_experiment(uri, options.experiment_name, show_progress=False))
    rows = report.time_breakdown.to_dict("records")
    assert len(rows) == len(truth)
    return [
        (
            (r["strategy"], r["workers"]),
            r["bound_by"],
            r["evidence"],
            truth[r["strategy"], r["workers"]],
        )
        for r in rows
    ]


def _contradictions(rows: list[tuple[Any, str, str, str]]) -> list[Any]:
    return [
        (key, said, true)
        for key, said, _, true in rows
        if "*" not in _candidates(said) and true not in _candidates(said)
    ]


@pytest.mark.parametrize("seed", [0, 1])
def test_itwinai_defaults_give_no_verdict_against_the_truth(tmp_path: Path, seed: int) -> None:
    """`emulate --itwinai-only --workers 1,2,4,8,16 --log-on-workers 0`: no wall time, no Rate
    metrics, no traces: every row says undecided and what would decide it."""
    options = EmulationOptions(
        workers=(1, 2, 4, 8, 16), itwinai_only=True, log_on_workers="0", seed=seed
    )
    rows = _verdicts(tmp_path, options)
    assert len(rows) == 13 and _contradictions(rows) == []
    # the truth has a verdict for each (8 and 16 GPUs: fixed per-epoch overhead) ...
    assert {true for key, _, _, true in rows if key[1] >= 8} == {"fixed per-epoch overhead"}
    # ... which the data cannot show: no row claims one
    assert {said for _, said, _, _ in rows} == {"undecided"}
    for _, _, evidence, _ in rows:
        assert evidence.startswith("no wall-time split to decide from: it needs the runs' wall")
        assert "traces (--traces) would then split the steady steps" in evidence


def test_default_preset_verdicts_are_the_truths_or_near_the_line(tmp_path: Path) -> None:
    """The default emulation (performance.json, Rate metrics, no traces): the overhead and input
    verdicts are decided as the truth has them; 4 GPUs (24.9-25.2 % outside steady steps in
    the truth) are near the line or, clearly under it, undecided between the steps' causes."""
    options = EmulationOptions()
    rows = _verdicts(tmp_path, options)
    assert len(rows) == 12 and _contradictions(rows) == []
    decided = {key: said for key, said, _, true in rows if said == true}
    assert {k for k in decided if k[1] >= 8} == {k for k, *_ in rows if k[1] >= 8}
    for key, said, evidence, _ in rows:
        if key[1] == 4:
            assert said in {"undecided", f"{NEAR}fixed per-epoch overhead or steady steps"}
            assert "95 % interval" in evidence and "the line: 25 %" in evidence
