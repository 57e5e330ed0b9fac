"""Plant realistic bugs one at a time and check that the test suite catches each.

Each mutant replaces one exact piece of source text (it must occur exactly once) in a copy of
the package and runs the test files that guard that code. A mutant is *caught* when those tests
fail. The working tree is never touched: the package and tests are copied to a temporary folder
and run from there (``PYTHONPATH`` puts the copy first).

    python tools/mutants.py            # every mutant
    python tools/mutants.py M3 M7      # some of them

The last line is ``caught K of N planted bugs``; the exit code is 1 when a bug survives.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutant:
    name: str
    what: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


MUTANTS = (
    Mutant(
        "M1",
        "efficiency against the row's own smallest count, not the decided base",
        "itwin_report/report/baseline.py",
        'out["efficiency"] = speedup * base_w / workers',
        'out["efficiency"] = speedup * np.nanmin(workers) / workers',
        ("tests/test_one_truth.py", "tests/test_report_itwinai.py"),
    ),
    Mutant(
        "M2",
        "the fallback sample interval read as milliseconds",
        "itwin_report/report/gpu.py",
        "return float(np.median(np.diff(steps)))",
        "return float(np.median(np.diff(steps))) / 1000",
        ("tests/test_report_gpu.py",),
    ),
    Mutant(
        "M3",
        "warm-up boundary off by one",
        "itwin_report/report/epoch_time.py",
        'return epochs[epochs["step"] >= warmup_epochs]',
        'return epochs[epochs["step"] > warmup_epochs]',
        ("tests/test_report_epoch_time.py",),
    ),
    Mutant(
        "M4",
        "c10d:: (communication) counted as computation",
        "itwin_report/report/computation.py",
        'COMPUTATION_PATTERN = r"\\b(?:aten|at|c10|autograd)::"',
        'COMPUTATION_PATTERN = r"\\b(?:aten|at|c10\\w*|autograd)::"',
        ("tests/test_report_computation.py",),
    ),
    Mutant(
        "M5",
        "normal quantile 1.96 instead of Student's t for a mean's interval",
        "itwin_report/analysis/intervals.py",
        "half = t_quantile(len(x) - 1) * float(x.std(ddof=1)) / math.sqrt(len(x))",
        "half = 1.96 * float(x.std(ddof=1)) / math.sqrt(len(x))",
        ("tests/test_confidence.py",),
    ),
    Mutant(
        "M6",
        "error messages no longer masked at the CLI's one exit point",
        "itwin_report/cli/group.py",
        "lines = [line.strip() for line in mask_text(message).splitlines() if line.strip()]",
        "lines = [line.strip() for line in message.splitlines() if line.strip()]",
        ("tests/test_cli.py", "tests/test_store_errors.py"),
    ),
    Mutant(
        "M7",
        "markdown no longer escapes '*'",
        "itwin_report/util/escape.py",
        '_MD_SPECIAL = re.compile(r"([\\\\`*_\\[\\]#])")',
        '_MD_SPECIAL = re.compile(r"([\\\\`_\\[\\]#])")',
        ("tests/test_render.py",),
    ),
    Mutant(
        "M8",
        "the columnar reader returns float32",
        "itwin_report/store/columnar.py",
        "pc.cast(column, pa.float64(), safe=False).to_numpy(zero_copy_only=False)",
        "pc.cast(column, pa.float32(), safe=False).to_numpy(zero_copy_only=False)",
        ("tests/test_columnar.py",),
    ),
    Mutant(
        "M9",
        "a repeated metric point keeps the first value, not the last",
        "itwin_report/data/frames.py",
        "same &= values[:-1] == values[1:]",
        "same &= values[1:] == values[:-1]\n    repeated[1:] = same\n    return repeated",
        ("tests/test_validate.py", "tests/test_frames.py"),
    ),
    Mutant(
        "M10",
        "energy of rank 0 shown as the job's (no scaling to all GPUs)",
        "itwin_report/report/gpu.py",
        'per_job["scaled_wh"] = per_job["energy_wh"] / per_job["coverage"]',
        'per_job["scaled_wh"] = per_job["energy_wh"]',
        ("tests/test_report_gpu.py", "tests/test_one_truth.py"),
    ),
    Mutant(
        "M11",
        "the gate ignores configurations it cannot evaluate",
        "itwin_report/report/gate.py",
        'unknown = [f"{s}-{w}" for s, w in configs if (s, w) not in known]',
        "unknown: list[str] = []",
        ("tests/test_one_truth.py",),
    ),
    Mutant(
        "M12",
        "Karp–Flatt with the terms of the numerator swapped",
        "itwin_report/analysis/scaling_models.py",
        "e = (1.0 / speedup - 1.0 / n) / (1.0 - 1.0 / n)",
        "e = (1.0 / n - 1.0 / speedup) / (1.0 - 1.0 / n)",
        ("tests/test_scaling_models.py", "tests/test_one_truth.py"),
    ),
    Mutant(
        "M13",
        "the interval's base runs taken from the row's own strategy",
        "itwin_report/analysis/intervals.py",
        'base_key = (rec["base_strategy"], int(base_w))',
        'base_key = (str(rec["strategy"]), int(base_w))',
        ("tests/test_confidence.py", "tests/test_one_truth.py"),
    ),
    Mutant(
        "M14",
        "predictions no longer capped by a measured input ceiling",
        "itwin_report/analysis/scaling_models.py",
        "if cap is not None and (capped or t < cap.floor_s):",
        "if False:",
        ("tests/test_scaling_models.py", "tests/test_one_truth.py"),
    ),
    Mutant(
        "M15",
        "the spread between runs as a population standard deviation",
        "itwin_report/report/epoch_time.py",
        "std = float(np.std(run_means.to_numpy(), ddof=1))",
        "std = float(np.std(run_means.to_numpy(), ddof=0))",
        ("tests/test_report_epoch_time.py",),
    ),
    Mutant(
        "M16",
        "throughput speedup inverted (a rate treated like a time)",
        "itwin_report/report/throughput.py",
        'table, notes = base_rule.apply(table, "samples_per_sec", True, used)',
        'table, notes = base_rule.apply(table, "samples_per_sec", False, used)',
        ("tests/test_report_throughput.py", "tests/test_one_truth.py"),
    ),
    Mutant(
        "M17",
        "a device or a FIFO output renamed over like a regular file",
        "itwin_report/util/atomic.py",
        "return not stat.S_ISREG(mode) or _through_fd_link(path)",
        "return _through_fd_link(path)",
        ("tests/test_outputs_in_place.py",),
    ),
    Mutant(
        "M18",
        "an output inside an input folder (of traces) let through",
        "itwin_report/store/uri.py",
        "if source.is_dir() and _same_or_inside(path, source):",
        "if False:",
        ("tests/test_outputs_in_place.py",),
    ),
    Mutant(
        "M19",
        "the API's run_names text split into its characters",
        "itwin_report/options.py",
        "values = [value] if isinstance(value, str) else value",
        "values = value",
        ("tests/test_options.py",),
    ),
    Mutant(
        "M20",
        "MLflow's system power integrated over the sample steps, not the timestamps",
        "itwin_report/report/system_gpus.py",
        'seconds = power["timestamp"].astype("float64").groupby(series).diff() / 1000.0',
        'seconds = power["step"].astype("float64").groupby(series).diff()',
        ("tests/test_system_metrics.py",),
    ),
    Mutant(
        "M21",
        "a GPU that several runs of a job logged counted once per run",
        "itwin_report/report/system_gpus.py",
        'kept = series.drop_duplicates(["job_id", "gpu", "measure"])',
        "kept = series",
        ("tests/test_system_metrics.py",),
    ),
    Mutant(
        "M22",
        "the node id of a system metric key ignored (two nodes' GPUs taken for one)",
        "itwin_report/report/system_gpus.py",
        '[~unnamed, host != "", alone]',
        '[unnamed & ~unnamed, host != "", alone]',
        ("tests/test_system_metrics.py",),
    ),
    Mutant(
        "M23",
        "a redirect to another origin followed",
        "itwin_report/store/http.py",
        "if origin(target) != origin(self.base):",
        "if origin(target) == ('', '', None):",
        ("tests/test_store_hostile.py",),
    ),
    Mutant(
        "M24",
        "the same performance.json given twice is merged twice",
        "itwin_report/data/performance_json.py",
        "if first is not path:",
        "if first is not path and False:",
        ("tests/test_hostile_files.py",),
    ),
    Mutant(
        "M25",
        "a bound-by verdict without a wall-time split, from the traces' steps alone",
        "itwin_report/report/breakdown.py",
        "return UNDECIDED, _missing(row, shares.exposed, input_bound)",
        "return _steps(row, shares.exposed)",
        ("tests/test_traces_report.py", "tests/test_verdict_truth.py"),
    ),
    Mutant(
        "M26",
        "a share within its noise of the threshold decided by its point value",
        "itwin_report/report/breakdown.py",
        "if half > 0 and abs(value - line) < half:",
        "if half > 0 and abs(value - line) < 0:",
        ("tests/test_traces_report.py", "tests/test_verdict_truth.py"),
    ),
    Mutant(
        "M27",
        "a capped prediction's interval not widened for extrapolation",
        "itwin_report/analysis/scaling_models.py",
        "half = self.rel_half * reach",
        "half = self.rel_half",
        ("tests/test_scaling_models.py", "tests/test_prediction_truth.py"),
    ),
    Mutant(
        "M28",
        "compare weighs each test alone: Holm's step-down dropped from the family",
        "itwin_report/analysis/significance.py",
        "threshold = alpha / (m - k)",
        "threshold = alpha",
        ("tests/test_compare_noise.py",),
    ),
    Mutant(
        "M29",
        "the mean change over the configurations weighed with one configuration's variance each",
        "itwin_report/analysis/noise_tests.py",
        "mean.terms = [(c / k, key, cell) for r in tested for c, key, cell in r.terms]",
        "mean.terms = [(c, key, cell) for r in tested for c, key, cell in r.terms]",
        ("tests/test_compare_noise.py",),
    ),
    Mutant(
        "M30",
        "all-reduce's busbw factor (n-1)/n, as all-gather's, instead of 2(n-1)/n",
        "itwin_report/traces/collectives.py",
        "return 2 * (n - 1) / n",
        "return (n - 1) / n",
        ("tests/test_traces_collectives.py",),
    ),
    Mutant(
        "M31",
        "a message's bytes from its input buffer only (an all-gather's output ignored)",
        "itwin_report/traces/collectives.py",
        "elems = np.maximum(kernels.in_elems, kernels.out_elems).astype(np.float64)",
        "elems = kernels.in_elems.astype(np.float64)",
        ("tests/test_traces_collectives.py",),
    ),
    Mutant(
        "M32",
        "terminal tables never narrower than 100 columns (every line wraps at 80)",
        "itwin_report/render/styled.py",
        "width = max(MIN_WIDTH, width)",
        "width = max(100, width)",
        ("tests/test_readable.py::test_tables_are_narrower_than_before_on_80_columns",),
    ),
    Mutant(
        "M33",
        "weak scaling decided per epoch: configurations doing different work compared as equals",
        "itwin_report/report/decision.py",
        "k = 1000.0 / work.samples.get(key, math.nan) if work.per_sample else 1.0",
        "k = 1.0",
        ("tests/test_decisions.py",),
    ),
    Mutant(
        "M34",
        "within noise names only the runner-up, not every configuration that overlaps",
        "itwin_report/analysis/intervals.py",
        "return Verdict(best, tuple(within), unknown)",
        "return Verdict(best, tuple(within[:1]), unknown)",
        ("tests/test_decisions.py",),
    ),
    Mutant(
        "M35",
        "time to target from the last point that meets the target, not the first",
        "itwin_report/report/time_to_target.py",
        "return None if not len(hits) else ordered.iloc[int(hits[0])]",
        "return None if not len(hits) else ordered.iloc[int(hits[-1])]",
        ("tests/test_time_to_target.py",),
    ),
    Mutant(
        "M36",
        "runs that never reached the target counted as reaching it",
        "itwin_report/report/time_to_target.py",
        '"runs_reached": len(reached),',
        '"runs_reached": len(group),',
        ("tests/test_time_to_target.py",),
    ),
    Mutant(
        "M37",
        "time-to-target speedup against each strategy's own smallest count, not the report's base",
        "itwin_report/report/time_to_target.py",
        'base_rule.apply(table, "avg_time_to_target_s", False, used)',
        'base_rule.apply(table, "avg_time_to_target_s", False, base_rule.Baseline("x"))',
        ("tests/test_time_to_target.py",),
    ),
    Mutant(
        "M38",
        "a message of exactly 1 MiB counted as medium, not large",
        "itwin_report/traces/collectives.py",
        "np.where(size >= LARGE_BYTES, 0,",
        "np.where(size > LARGE_BYTES, 0,",
        ("tests/test_traces_collectives.py",),
    ),
    Mutant(
        "M39",
        "compare's time to target tested on the runs' epoch times, not their times to target",
        "itwin_report/analysis/noise_tests.py",
        "terms = _runs_terms(key, baseline.target_runs, current.target_runs)",
        "terms = _runs_terms(key, baseline.runs, current.runs)",
        ("tests/test_compare_target.py",),
    ),
    Mutant(
        "M40",
        "a configuration whose runs no longer reach the target passes compare",
        "itwin_report/analysis/comparison/compare.py",
        "return self.baseline[0] > 0 and self.current[0] == 0",
        "return self.baseline[0] == 0 and self.current[0] > 0",
        ("tests/test_compare_target.py",),
    ),
    Mutant(
        "M41",
        "a job's nodes from the hostnames of some of its ranks, not only when every rank has one",
        "itwin_report/report/nodes.py",
        "from_hosts = hosts.where(ranks == jobs)",
        "from_hosts = hosts.where(ranks > 0)",
        ("tests/test_nodes.py",),
    ),
    Mutant(
        "M42",
        "the node step from the smallest one-node configuration, not the largest",
        "itwin_report/analysis/node_step.py",
        "_step(strategy, max(one), min(more), placed, run_groups, mode)",
        "_step(strategy, min(one), min(more), placed, run_groups, mode)",
        ("tests/test_nodes.py",),
    ),
    Mutant(
        "M43",
        "an older trace's kernel sized from the outermost comms op around its launch",
        "itwin_report/traces/comm_ops.py",
        "np.argmax(starts[around])",
        "np.argmin(starts[around])",
        ("tests/test_traces_collectives.py",),
    ),
    Mutant(
        "M44",
        "energy to target from the job's whole power samples, not those up to the target",
        "itwin_report/report/energy_to_target.py",
        "float(np.nansum(watts[stamps <= at])) / total",
        "float(np.nansum(watts)) / total",
        ("tests/test_decision_target.py",),
    ),
    Mutant(
        "M45",
        "bandwidth-bound only at the link fit's full beta, not near it",
        "itwin_report/report/communication.py",
        "if bw >= NEAR_BETA * beta:",
        "if bw >= beta:",
        ("tests/test_communication.py",),
    ),
    Mutant(
        "M46",
        "a one-node job's collectives counted as inter-node",
        "itwin_report/report/communication.py",
        "if nodes == nodes and nodes > 1 else",
        "if nodes == nodes and nodes >= 1 else",
        ("tests/test_communication.py",),
    ),
    Mutant(
        "M47",
        "the emulator's all-reduce kernels timed for (n-1)/n of their bytes, not 2(n-1)/n",
        "itwin_report/emulator/tracing.py",
        'return 2 * (n - 1) / n if collective == "allreduce" else (n - 1) / n',
        'return (n - 1) / n if collective == "allreduce" else (n - 1) / n',
        ("tests/test_traces_collectives.py",),
    ),
    Mutant(
        "M48",
        "the ring all-reduce's volume counted once, not twice (reduce-scatter and all-gather)",
        "itwin_report/analysis/comm_model.py",
        "volume = 2 * (n - 1) / n * self.gradient_bytes",
        "volume = (n - 1) / n * self.gradient_bytes",
        ("tests/test_comm_model.py",),
    ),
    Mutant(
        "M49",
        "a group's NaN points counted as numbers, so its mean is too low",
        "itwin_report/data/frames.py",
        "counts = points - np.bincount(group[nan], minlength=size)",
        "counts = points",
        ("tests/test_frames.py",),
    ),
    Mutant(
        "M50",
        "every rank's points pooled as one rank's, so no rank can lag",
        "itwin_report/report/stragglers.py",
        "entry = totals.setdefault((job_rank[0], str(key_names[k]), job_rank[1]), [0.0, 0])",
        "entry = totals.setdefault((job_rank[0], str(key_names[k]), 0), [0.0, 0])",
        ("tests/test_traces_report.py", "tests/test_categorical_tables.py", "tests/test_cli.py"),
    ),
)


def _copy(dest: Path) -> None:
    for name in ("itwin_report", "tests", "docs", "fixtures"):
        if (ROOT / name).exists():
            shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)


def run(mutant: Mutant, work: Path) -> tuple[bool, float]:
    """(caught, seconds): plant ``mutant`` in the copy, run its tests, put the source back."""
    path = work / mutant.path
    source = path.read_text(encoding="utf-8")
    if source.count(mutant.old) != 1:
        raise SystemExit(f"{mutant.name}: the text to replace occurs {source.count(mutant.old)}x")
    path.write_text(source.replace(mutant.old, mutant.new), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(work), "PYTHONDONTWRITEBYTECODE": "1"}
    start = time.perf_counter()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *mutant.tests],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        path.write_text(source, encoding="utf-8")
    return result.returncode != 0, time.perf_counter() - start


def main(names: list[str]) -> int:
    chosen = [m for m in MUTANTS if not names or m.name in names]
    caught = 0
    with tempfile.TemporaryDirectory(prefix="itwin-mutants-") as tmp:
        work = Path(tmp)
        _copy(work)
        print(f"{'mutant':<6}  {'result':<8}  {'s':>5}  what")
        for mutant in chosen:
            hit, seconds = run(mutant, work)
            caught += hit
            word = "caught" if hit else "SURVIVED"
            print(f"{mutant.name:<6}  {word:<8}  {seconds:5.1f}  {mutant.what}", flush=True)
    print(f"caught {caught} of {len(chosen)} planted bugs")
    return 0 if caught == len(chosen) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
