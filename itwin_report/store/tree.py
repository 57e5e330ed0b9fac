"""From an experiment's run tree to the worker runs the report uses.

Every reader hands over the same two frames:

* ``runs``: live runs of the experiment, columns :data:`RAW_RUN_COLUMNS`
  (``parent_id`` is "" for a top-level run, ``has_params`` tells whether it logged any param,
  ``start_time``/``end_time`` are ms since the epoch, NaN when unknown);
* ``params``: long frame ``run_id, key, value`` restricted to :data:`WORKER_PARAMS`.

:func:`select_workers` walks the tree, filters by top-level run name, validates the params and
leaves out unfinished jobs, returning worker rows in the schema's ``runs`` layout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

from itwin_report.data.rundata import GPU_IDENTITY, RUN_COLUMNS, WORKER_PARAMS
from itwin_report.data.validate import (
    RANK,
    STRATEGY,
    WORLD_SIZE,
    check_worker_params,
    grouped,
    named,
)
from itwin_report.util.errors import ReportError
from itwin_report.util.notes import Note

PARENT_TAG = "mlflow.parentRunId"
# worker-run params read as numbers (NaN when absent or not a number)
FLOAT_PARAMS = (
    "probing_interval",
    "samples_per_epoch",
    "batch_size",
    "global_batch_size",
    "gpus_per_node",
)
RAW_RUN_COLUMNS: tuple[str, ...] = (
    "run_id",
    "name",
    "status",
    "parent_id",
    "artifact_uri",
    "has_params",
    "start_time",
    "end_time",
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


def _optional_float(
    frame: pd.DataFrame, column: str, name: str, bad: dict[str, list[str]]
) -> pd.Series:
    """A float param column; unparsable values become NaN, their runs noted in ``bad``."""
    values = pd.to_numeric(frame[column], errors="coerce")
    wrong = frame[column].notna() & values.isna()
    if wrong.any():
        bad.setdefault(f"{name} is not a number; ignored", []).extend(frame.loc[wrong, "run_name"])
    return values.astype("float64")


def _split_unfinished(
    workers: pd.DataFrame, statuses: dict[str, str]
) -> tuple[pd.DataFrame, list[str]]:
    """(finished workers, one warning naming the jobs that had unfinished workers)."""
    top_status = workers["top_id"].map(statuses)
    done = (workers["status"] == FINISHED) & (top_status == FINISHED)
    if done.all():
        return workers, []
    left = workers[~done]
    bad = (set(left["status"]) | set(top_status[~done])) - {FINISHED}
    n = len(left)
    warning = Note(
        f"skipped {n} unfinished run{'s' if n != 1 else ''} of {named(list(left['run_name']))}"
        f" (status {'/'.join(sorted(bad))}); use --include-unfinished to keep them",
        kind="skipped",
        runs=n,
    )
    return workers[done], [warning]


def _same_name_flat_jobs(cands: pd.DataFrame, names: Mapping[str, str]) -> list[str]:
    """A warning when top-level runs of one name look like the ranks of one job.

    Every rank logging its own top-level run under the job's name makes each rank a job of
    its own: the name then repeats with the same world size and different ranks.
    """
    flat = cands[cands["parent_id"] == ""]
    if flat.empty:
        return []
    stats = flat.groupby(["run_name", "workers"], sort=True)["rank"].agg(["size", "nunique"])
    stats = stats.reset_index()
    alike = (stats["workers"] > 1) & (stats["size"] > 1) & (stats["nunique"] > 1)
    suspects = [str(name) for name in stats.loc[alike, "run_name"]]
    if not suspects:
        return []
    rank = names.get(RANK, RANK)
    return [
        f"top-level runs named {named(suspects)} log different {rank} values: each rank's "
        "run is counted as a job of its own; log a job's ranks as child runs of one parent "
        "run to count them as one job"
    ]


def select_workers(
    runs: pd.DataFrame,
    params: pd.DataFrame,
    run_names: Sequence[str] = (),
    include_unfinished: bool = False,
    experiment: str = "",
    names: Mapping[str, str] | None = None,
) -> Selection:
    """Worker runs, validated and filtered, with warnings for what was left out.

    ``names`` maps the schema's param names to those logged in the store (``--workers-param``),
    so that warnings name the params the user logged. Each kind of problem is one warning
    naming its runs (top-level run names, at most five).
    """
    names = {p: (names or {}).get(p, p) for p in WORKER_PARAMS}
    runs = runs.reindex(columns=list(RAW_RUN_COLUMNS))  # a reader without times gives NaN
    parent, top = _ancestors(runs)
    run_name = dict(zip(runs["run_id"], runs["name"], strict=True))
    runs["parent_id"] = runs["run_id"].map(parent)
    runs["top_id"] = runs["run_id"].map(top)
    runs["run_name"] = runs["top_id"].map(run_name)
    statuses = dict(zip(runs["run_id"], runs["status"], strict=True))
    runs = _filter_names(runs, run_names, experiment)

    wide = (
        params.drop_duplicates(["run_id", "key"])
        .pivot(index="run_id", columns="key", values="value")
        .reindex(columns=list(WORKER_PARAMS))
        .astype(object)  # text as logged; an absent param is None, never a float column
    )
    leaves = runs[~runs["run_id"].isin(set(parent.values()))]
    leaves = leaves.merge(wide, left_on="run_id", right_index=True, how="left")

    warnings: list[str] = []
    core = [STRATEGY, WORLD_SIZE, RANK]
    is_cand = leaves[core].notna().any(axis=1)
    silent = ~is_cand & (leaves["run_id"] == leaves["top_id"]) & ~leaves["has_params"].astype(bool)
    no_params = leaves[~is_cand & ~silent]
    if not no_params.empty:
        logged = "/".join(names[p] for p in core)
        warnings.append(
            Note(
                f"skipped {len(no_params)} run(s) of {named(list(no_params['run_name']))}: "
                f"no {logged} params",
                kind="skipped",
                runs=len(no_params),
            )
        )
    cands = leaves[is_cand].copy()
    # a worker alone in its job (a flat run, a single child) is rank 0 when it logs no rank
    job = cands["parent_id"].where(cands["parent_id"] != "", cands["run_id"])
    alone = (job.map(job.value_counts()) == 1) & cands[RANK].isna()
    cands[RANK] = cands[RANK].where(~alone, "0")
    checked = check_worker_params(cands, names)
    flagged = (checked.problems != "").to_numpy()
    by_problem: dict[str, list[str]] = {}
    for name, text in zip(cands["run_name"][flagged], checked.problems[flagged], strict=True):
        by_problem.setdefault(text, []).append(str(name))
    warnings += grouped(by_problem, "skipped {n} worker run(s) of {runs}: {what}", "skipped")
    cands = cands.assign(workers=checked.workers, rank=checked.rank)[~flagged].copy()

    not_numbers: dict[str, list[str]] = {}
    for column in FLOAT_PARAMS:
        cands[column] = _optional_float(cands, column, names[column], not_numbers)
    warnings += grouped(not_numbers, "{what} in {n} worker run(s) of {runs}")
    for column in GPU_IDENTITY:  # text as logged, "" when absent
        given = cands[column].notna()
        cands[column] = cands[column].where(given, "").astype(str).str.strip()
    cands["job_id"] = cands["parent_id"].where(cands["parent_id"] != "", cands["run_id"])
    warnings.sort()
    if not include_unfinished:
        cands, skipped = _split_unfinished(cands, statuses)
        warnings.extend(skipped)
    warnings.extend(_same_name_flat_jobs(cands, names))

    cands = cands.sort_values(["run_name", "job_id", "rank", "run_id"])
    workers = cands.loc[:, [*RUN_COLUMNS, "artifact_uri"]].reset_index(drop=True)
    return Selection(workers=workers, warnings=warnings)


def choose_experiment(experiments: Sequence[tuple[object, str, int]], name: str | None) -> object:
    """Id of the experiment to read from ``(id, name, live run count)`` of the live experiments.

    Without a name, the one experiment that has runs is used (MLflow's empty "Default"
    experiment does not count); several or none is an error listing the names.
    """
    from itwin_report.util.errors import StoreError

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
