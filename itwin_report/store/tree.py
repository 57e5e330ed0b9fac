"""From an experiment's run tree to the worker runs the report uses.

Every reader hands over the same two frames:

* ``runs``: live runs of the experiment, columns :data:`RAW_RUN_COLUMNS`
  (``parent_id`` is "" for a top-level run, ``has_params`` tells whether it logged any param);
* ``params``: long frame ``run_id, key, value`` restricted to :data:`WORKER_PARAMS`.

:func:`select_workers` walks the tree, filters by top-level run name, validates the params and
leaves out unfinished jobs, returning worker rows in the schema's ``runs`` layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from itwin_report.errors import ReportError
from itwin_report.schema import RUN_COLUMNS, WORKER_PARAMS

PARENT_TAG = "mlflow.parentRunId"
RAW_RUN_COLUMNS: tuple[str, ...] = (
    "run_id",
    "name",
    "status",
    "parent_id",
    "artifact_uri",
    "has_params",
)
FINISHED = "FINISHED"
MAX_LISTED_NAMES = 20


@dataclass
class Selection:
    """Worker runs (schema ``runs`` columns plus ``artifact_uri``) and what was skipped."""

    workers: pd.DataFrame
    warnings: list[str] = field(default_factory=list)


def _ancestors(runs: pd.DataFrame) -> tuple[dict[str, str], dict[str, str]]:
    """(live parent of each run or "", top-level ancestor of each run)."""
    ids = set(runs["run_id"])
    parent = {
        r: (p if p in ids and p != r else "")
        for r, p in zip(runs["run_id"], runs["parent_id"], strict=True)
    }
    top: dict[str, str] = {}
    for run_id in parent:
        node, seen = run_id, {run_id}
        while parent[node] and parent[node] not in seen:
            node = parent[node]
            seen.add(node)
        top[run_id] = node
    return parent, top


def listed_names(names: Sequence[str]) -> str:
    """Sorted names, at most :data:`MAX_LISTED_NAMES` of them, then "... and N more"."""
    unique = sorted(set(names))
    text = ", ".join(unique[:MAX_LISTED_NAMES])
    if len(unique) > MAX_LISTED_NAMES:
        text += f" ... and {len(unique) - MAX_LISTED_NAMES} more"
    return text or "(none)"


def _filter_names(runs: pd.DataFrame, run_names: Sequence[str], experiment: str) -> pd.DataFrame:
    """Runs whose top-level ancestor is named in ``run_names`` (all runs when empty)."""
    if not run_names:
        return runs
    tops = runs.loc[runs["run_id"] == runs["top_id"], "name"]
    missing = [n for n in dict.fromkeys(run_names) if n not in set(tops)]
    if missing:
        raise ReportError(
            f"no top-level run named {', '.join(map(repr, missing))} in experiment "
            f"{experiment!r}; runs: {listed_names(list(tops))}"
        )
    return runs[runs["run_name"].isin(list(run_names))]


def _as_int(values: pd.Series) -> pd.Series:
    """Integers parsed from strings like "4" or "4.0"; NaN where not an integer."""
    numbers = pd.to_numeric(values, errors="coerce")
    return numbers.where(numbers.notna() & (numbers == numbers.round()))


def _problems(cands: pd.DataFrame) -> pd.Series:
    """Per candidate worker, what is wrong with its params ("" when nothing)."""
    size = _as_int(cands["global_world_size"])
    rank = _as_int(cands["global_rank"])
    checks = [
        (cands["strategy"].isna() | (cands["strategy"].astype(object) == ""), "no strategy param"),
        (cands["global_world_size"].isna(), "no global_world_size param"),
        (cands["global_world_size"].notna() & size.isna(), "global_world_size is not an integer"),
        (size.notna() & (size < 1), "global_world_size is below 1"),
        (cands["global_rank"].isna(), "no global_rank param"),
        (cands["global_rank"].notna() & rank.isna(), "global_rank is not an integer"),
        (rank.notna() & ((rank < 0) | (rank >= size)), "global_rank is outside 0..world size-1"),
    ]
    out = pd.Series("", index=cands.index, dtype=object)
    for mask, text in checks:
        mask = mask.fillna(False).astype(bool)
        out[mask] = out[mask].map(lambda prev, t=text: f"{prev}; {t}" if prev else t)
    return out


def _describe(row: pd.Series) -> str:
    """``'worker_1' (ab12cd34) of 'ddp-4'`` for warnings."""
    where = "" if row["run_id"] == row["top_id"] else f" of {row['run_name']!r}"
    return f"run {row['name']!r} ({str(row['run_id'])[:8]}){where}"


def _optional_float(frame: pd.DataFrame, column: str, warnings: list[str]) -> pd.Series:
    """A float param column; unparsable values become NaN with a warning."""
    values = pd.to_numeric(frame[column], errors="coerce")
    bad = frame[column].notna() & values.isna()
    for _, row in frame[bad].iterrows():
        warnings.append(f"{_describe(row)}: {column} {row[column]!r} is not a number; ignored")
    return values.astype("float64")


def _split_unfinished(
    workers: pd.DataFrame, statuses: dict[str, str]
) -> tuple[pd.DataFrame, list[str]]:
    """(finished workers, one warning per job that had unfinished workers)."""
    top_status = workers["top_id"].map(statuses)
    done = (workers["status"] == FINISHED) & (top_status == FINISHED)
    warnings = []
    for _, group in workers[~done].groupby("job_id", sort=False):
        bad = set(group["status"]) | set(top_status[group.index])
        bad.discard(FINISHED)
        n = len(group)
        warnings.append(
            f"skipped {n} unfinished run{'s' if n != 1 else ''} of {group['run_name'].iloc[0]}"
            f" (status {'/'.join(sorted(bad))}); use --include-unfinished to keep them"
        )
    return workers[done], sorted(warnings)


def select_workers(
    runs: pd.DataFrame,
    params: pd.DataFrame,
    run_names: Sequence[str] = (),
    include_unfinished: bool = False,
    experiment: str = "",
) -> Selection:
    """Worker runs, validated and filtered, with warnings for what was left out."""
    runs = runs.loc[:, list(RAW_RUN_COLUMNS)].copy()
    parent, top = _ancestors(runs)
    names = dict(zip(runs["run_id"], runs["name"], strict=True))
    runs["parent_id"] = runs["run_id"].map(parent)
    runs["top_id"] = runs["run_id"].map(top)
    runs["run_name"] = runs["top_id"].map(names)
    statuses = dict(zip(runs["run_id"], runs["status"], strict=True))
    runs = _filter_names(runs, run_names, experiment)

    wide = (
        params.drop_duplicates(["run_id", "key"])
        .pivot(index="run_id", columns="key", values="value")
        .reindex(columns=list(WORKER_PARAMS))
    )
    leaves = runs[~runs["run_id"].isin(set(parent.values()))]
    leaves = leaves.merge(wide, left_on="run_id", right_index=True, how="left")

    warnings: list[str] = []
    core = ["strategy", "global_world_size", "global_rank"]
    is_cand = leaves[core].notna().any(axis=1)
    silent = ~is_cand & (leaves["run_id"] == leaves["top_id"]) & ~leaves["has_params"].astype(bool)
    for _, row in leaves[~is_cand & ~silent].iterrows():
        warnings.append(
            f"skipped {_describe(row)}: no strategy/global_world_size/global_rank params"
        )
    cands = leaves[is_cand].copy()
    # a worker alone in its job (a flat run, a single child) is rank 0 when it logs no rank
    job = cands["parent_id"].where(cands["parent_id"] != "", cands["run_id"])
    alone = job.map(job.value_counts()) == 1
    cands.loc[alone & cands["global_rank"].isna(), "global_rank"] = "0"
    problems = _problems(cands)
    flagged = problems != ""
    for (_, row), text in zip(cands[flagged].iterrows(), problems[flagged], strict=True):
        warnings.append(f"skipped {_describe(row)}: {text}")
    cands = cands[problems == ""].copy()

    cands["workers"] = _as_int(cands["global_world_size"]).astype("int64")
    cands["rank"] = _as_int(cands["global_rank"]).astype("int64")
    cands["probing_interval"] = _optional_float(cands, "probing_interval", warnings)
    cands["samples_per_epoch"] = _optional_float(cands, "samples_per_epoch", warnings)
    cands["batch_size"] = _optional_float(cands, "batch_size", warnings)
    cands["job_id"] = cands["parent_id"].where(cands["parent_id"] != "", cands["run_id"])
    warnings.sort()
    if not include_unfinished:
        cands, skipped = _split_unfinished(cands, statuses)
        warnings.extend(skipped)

    cands = cands.sort_values(["run_name", "job_id", "rank", "run_id"])
    workers = cands.loc[:, [*RUN_COLUMNS, "artifact_uri"]].reset_index(drop=True)
    return Selection(workers=workers, warnings=warnings)


def choose_experiment(experiments: Sequence[tuple[object, str, int]], name: str | None) -> object:
    """Id of the experiment to read from ``(id, name, live run count)`` of the live experiments.

    Without a name, the one experiment that has runs is used (MLflow's empty "Default"
    experiment does not count); several or none is an error listing the names.
    """
    from itwin_report.errors import StoreError

    names = [n for _, n, _ in experiments]
    if name is not None:
        for exp_id, exp_name, _ in experiments:
            if exp_name == name:
                return exp_id
        raise StoreError(f"no experiment named {name!r}; experiments: {listed_names(names)}")
    if len(experiments) == 1:
        return experiments[0][0]
    with_runs = [(i, n) for i, n, count in experiments if count > 0]
    if len(with_runs) == 1:
        return with_runs[0][0]
    raise StoreError(
        f"the store holds {len(experiments)} experiments; choose one with --experiment-name: "
        f"{listed_names(names)}"
    )
