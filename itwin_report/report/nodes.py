"""How many nodes a job spans: the one home of that rule, read by every table and the analysis.

* A job's nodes are the distinct ``hostname`` params of its ranks when every rank logged one
  (the job's worker count of ranks, each with a hostname);
* else its GPUs / GPUs per node rounded up, GPUs per node being ``--gpus-per-node`` when given,
  else the ``gpus_per_node`` param its ranks logged (when they agree);
* else unknown (NaN): nothing is assumed.

A configuration's nodes are its jobs' (their mean when jobs of one configuration were placed
differently, NaN when none is known); every per-configuration table carries them as ``nodes``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

Config = tuple[str, int]


def job_nodes(runs: pd.DataFrame, gpus_per_node: float | None = None) -> pd.Series:
    """Per job (indexed by ``job_id``): the nodes it spans, NaN when unknown."""
    jobs = runs.drop_duplicates("job_id").set_index("job_id")["workers"].astype(float)
    named = runs[runs["hostname"].astype(str) != ""]
    hosts = named.groupby("job_id")["hostname"].nunique().reindex(jobs.index)
    ranks = named.groupby("job_id")["rank"].nunique().reindex(jobs.index)
    from_hosts = hosts.where(ranks == jobs).astype("float64")
    per_node = _per_node(runs, jobs.index, gpus_per_node)
    by_gpus = (jobs / per_node).map(math.ceil, na_action="ignore").astype("float64")
    return from_hosts.combine_first(by_gpus).rename("nodes")


def _per_node(runs: pd.DataFrame, jobs: pd.Index, given: float | None) -> pd.Series:
    """Per job: GPUs per node, ``given`` else its ranks' ``gpus_per_node`` param when they
    agree (NaN otherwise)."""
    if given is not None:
        return pd.Series(float(given), index=jobs)
    if "gpus_per_node" not in runs:
        return pd.Series(math.nan, index=jobs)
    logged = runs.groupby("job_id")["gpus_per_node"].agg(["min", "max"]).reindex(jobs)
    return logged["min"].where(logged["min"] == logged["max"])


def config_nodes(runs: pd.DataFrame, gpus_per_node: float | None = None) -> dict[Config, float]:
    """Per configuration (strategy, workers): its jobs' mean nodes, NaN when none is known."""
    nodes = job_nodes(runs, gpus_per_node)
    jobs = runs.drop_duplicates("job_id").set_index("job_id")[["strategy", "workers"]]
    jobs = jobs.assign(nodes=nodes.reindex(jobs.index))
    out: dict[Config, float] = {}
    means = jobs.groupby(["strategy", "workers"], sort=True)["nodes"].mean()
    for strategy, workers, value in zip(
        means.index.get_level_values(0), means.index.get_level_values(1), means, strict=True
    ):
        out[(str(strategy), int(workers))] = float(value)
    return out


def with_nodes(table: pd.DataFrame, nodes: dict[Config, float]) -> pd.DataFrame:
    """``table`` (rows keyed by strategy and workers) with its ``nodes`` column filled."""
    if table.empty or "workers" not in table:
        return table
    values = [
        nodes.get((str(s), int(w)), math.nan)
        for s, w in zip(table["strategy"], table["workers"], strict=True)
    ]
    return table.assign(nodes=np.asarray(values, dtype="float64"))
