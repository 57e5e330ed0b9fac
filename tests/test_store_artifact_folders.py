"""Runs without an artifact folder are left out of the artifact reads, found by listing folders;
what is read is what reading every run gives."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from itwin_report.data.rundata import PERFORMANCE_ARTIFACT, PROFILE_ARTIFACT
from itwin_report.store import _may_hold_artifacts
from itwin_report.store.artifacts import read_artifacts

PROFILE = "name,self_cuda_time_total\naten::mm,5.0\nnccl:all_reduce,2.0\n"


def _workers(uris: list[str]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run_id": [f"{i:032x}" for i in range(len(uris))],
            "run_name": [f"job-{i}" for i in range(len(uris))],
            "rank": 0,
            "artifact_uri": uris,
        }
    )


def _write(root: Path) -> None:
    (root / PROFILE_ARTIFACT).parent.mkdir(parents=True)
    (root / PROFILE_ARTIFACT).write_text(PROFILE)
    (root / PERFORMANCE_ARTIFACT).parent.mkdir(parents=True)
    (root / PERFORMANCE_ARTIFACT).write_text('{"total_samples": 10, "total_time": 2.0}')


@pytest.mark.parametrize("layout", ["flat", "mlflow", "file-uri"])
def test_only_runs_with_a_folder_are_read_and_nothing_is_lost(tmp_path: Path, layout: str) -> None:
    def root(i: int) -> Path:
        if layout == "flat":
            return tmp_path / "art" / f"run {i}"
        return tmp_path / "mlruns" / "1" / f"run {i}" / "artifacts"

    roots = [root(i) for i in range(12)]
    for r in roots[::3]:
        _write(r)
    roots[1].mkdir(parents=True)  # a folder without the files
    uris = [r.as_uri() if layout == "file-uri" else str(r) for r in roots]
    uris.append("mlflow-artifacts:/1/remote/artifacts")  # not local: kept for its warning
    workers = _workers(uris)
    kept = _may_hold_artifacts(workers)
    assert list(kept.index) == [0, 1, 3, 6, 9, 12]  # folders exist for 0, 1, 3, 6, 9
    everything = read_artifacts(workers, None, False)
    some = read_artifacts(kept, None, False)
    for a, b in zip(everything[:2], some[:2], strict=True):
        pd.testing.assert_frame_equal(a, b)
    assert everything[2] == some[2] and everything[2]  # the remote run's warning
    assert len(some[0]) == 8 and len(some[1]) == 4


def test_runs_under_a_missing_folder_are_dropped_and_odd_uris_kept(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    workers = _workers([f"{blocker}/sub/run{i}" for i in range(3)])
    assert len(_may_hold_artifacts(workers)) == 0  # under a file: no folder, nothing to read
    missing = _workers([str(tmp_path / "none" / f"run{i}") for i in range(3)])
    assert len(_may_hold_artifacts(missing)) == 0
    odd = _workers(["run-without-a-folder", "", "file:///x/y?z=1"])
    assert len(_may_hold_artifacts(odd)) == 3
