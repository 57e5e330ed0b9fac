"""What one ``emulate`` invocation asks for, with its documented limits (light: no numpy/mlflow).

Every option is checked here, before any store is opened; a bad value is a usage error (exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

from itwin_report.emulator import model
from itwin_report.emulator.params import STRATEGIES, ModelParams, preset, with_overrides
from itwin_report.util.errors import EXIT_USAGE, ReportError

DEFAULT_WORKERS: tuple[int, ...] = (4, 8, 16, 32)
DEFAULT_EXPERIMENT = "emulated-cluster"
LOG_ON_WORKERS = ("all", "0")
SCALING = ("strong", "weak")
NON_DISTRIBUTED = "non-distributed"  # itwinai's strategy param of a 1-worker job

# documented limits (docs/emulator.md)
MAX_WORKERS = 4096  # per job
MAX_EPOCHS = 1000
MAX_REPEATS = 100
MAX_SEED = 2**32 - 1
MAX_GPUS_PER_NODE = 1024
MAX_WORKER_RUNS = 20_000  # all jobs together
MAX_POINTS = 5_000_000  # metric points of all worker runs together
MAX_STEPS_PER_JOB = 10_000_000  # training steps emulated per job (all epochs)
MAX_NAME = 250
MAX_TRACE_FILES = 20_000  # profiler traces (one per rank of every job) in all


class OptionError(ReportError):
    """An ``emulate`` option outside its documented range: bad usage."""

    exit_code = EXIT_USAGE


class Config(NamedTuple):
    """One emulated configuration: the logged strategy, the modelled one, and the GPU count."""

    strategy: str  # as logged (``non-distributed`` for one worker)
    model: str  # strategy whose performance model runs
    workers: int


def _range(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise OptionError(f"{name} must be between {low} and {high}, got {value}")


@dataclass(frozen=True)
class EmulationOptions:
    """Options of one emulation; ``params()`` resolves the model parameters."""

    strategies: tuple[str, ...] = STRATEGIES
    workers: tuple[int, ...] = DEFAULT_WORKERS
    epochs: int | None = None  # None: the preset's
    repeats: int = 2
    seed: int = 0
    preset: str = "default"
    gpus_per_node: int | None = None  # None: the preset's
    overrides: tuple[str, ...] = ()  # NAME=VALUE
    log_on_workers: str = "all"
    experiment_name: str = DEFAULT_EXPERIMENT
    append: bool = False
    performance_json: bool = True
    itwinai_only: bool = False  # only what itwinai 0.4.2 logs
    energy_counter: bool = False  # log gpu_energy_J and each rank's hostname and gpu_index
    scaling: str = "strong"
    traces: str | None = None  # folder for one profiler trace per rank of every job

    def validate(self) -> None:
        """OptionError for anything outside the documented limits."""
        if not self.strategies:
            raise OptionError("no strategy given")
        for s in self.strategies:
            if s not in STRATEGIES:
                raise OptionError(f"unknown strategy {s!r}; choose from {', '.join(STRATEGIES)}")
        if len(set(self.strategies)) != len(self.strategies):
            raise OptionError("--strategies lists a strategy twice")
        if not self.workers:
            raise OptionError("no worker count given")
        for n in self.workers:
            _range("--workers", n, 1, MAX_WORKERS)
        if len(set(self.workers)) != len(self.workers):
            raise OptionError("--workers lists a count twice")
        _range("--repeats", self.repeats, 1, MAX_REPEATS)
        _range("--seed", self.seed, 0, MAX_SEED)
        if self.epochs is not None:
            _range("--epochs", self.epochs, 1, MAX_EPOCHS)
        if self.gpus_per_node is not None:
            _range("--gpus-per-node", self.gpus_per_node, 1, MAX_GPUS_PER_NODE)
        if self.log_on_workers not in LOG_ON_WORKERS:
            raise OptionError(f"--log-on-workers must be 'all' or '0', got {self.log_on_workers!r}")
        if self.scaling not in SCALING:
            raise OptionError(f"--scaling must be 'strong' or 'weak', got {self.scaling!r}")
        name = self.experiment_name
        if not name.strip() or len(name) > MAX_NAME or any(ord(c) < 32 for c in name):
            raise OptionError(f"--experiment-name must be 1 to {MAX_NAME} printable characters")
        runs = sum(len(self.log_ranks(c.workers)) for c in self.configs()) * self.repeats
        if runs > MAX_WORKER_RUNS:
            raise OptionError(f"{runs} worker runs asked for; the limit is {MAX_WORKER_RUNS}")
        if self.traces is not None:
            self._check_traces(self.traces)

    def _check_traces(self, folder: str) -> None:
        files = sum(c.workers for c in self.configs()) * self.repeats
        if files > MAX_TRACE_FILES:
            raise OptionError(f"{files} trace files asked for; the limit is {MAX_TRACE_FILES}")
        if not folder.strip() or any(ord(c) < 32 for c in folder):
            raise OptionError("--traces must name a folder")
        path = Path(folder).expanduser()
        if path.exists() and not path.is_dir():
            raise OptionError(f"--traces {folder}: not a folder")

    def params(self) -> ModelParams:
        """Preset, then --gpus-per-node and --epochs, then --set; validated."""
        self.validate()
        try:
            p = preset(self.preset)
        except ReportError as exc:
            raise OptionError(str(exc)) from None
        if self.gpus_per_node is not None:
            p = replace(p, gpus_per_node=self.gpus_per_node)
        if self.epochs is not None:
            p = replace(p, epochs=self.epochs)
        try:
            p = with_overrides(p, self.overrides)
        except ReportError as exc:
            raise OptionError(str(exc)) from None
        _range("epochs", p.epochs, 1, MAX_EPOCHS)
        _range("gpus_per_node", p.gpus_per_node, 1, MAX_GPUS_PER_NODE)
        self._check_size(p)
        return p

    def _check_size(self, p: ModelParams) -> None:
        """Refuse emulations too large to write (points and steps, from the noise-free model)."""
        points = 0
        for c in self.configs():
            q = self.config_params(p, c.workers)
            steps = model.steps_per_epoch(q.samples_per_epoch, c.workers, q.batch_size) * q.epochs
            if steps > MAX_STEPS_PER_JOB:
                raise OptionError(
                    f"{c.strategy} on {c.workers} GPUs emulates {steps} training steps; "
                    f"the limit is {MAX_STEPS_PER_JOB} (lower samples_per_epoch or epochs)"
                )
            seconds = sum(model.epoch_times(q, c.model, c.workers))
            series = 3 if self.energy_counter else 2  # GPU series per rank
            per_rank = series * seconds / q.probing_interval + 2 * steps / q.log_every_steps
            points += int(per_rank + 3 * q.epochs) * len(self.log_ranks(c.workers))
        points *= self.repeats
        if points > MAX_POINTS:
            raise OptionError(
                f"about {points} metric points asked for; the limit is {MAX_POINTS} "
                "(fewer jobs, epochs or samples, or a longer probing_interval)"
            )

    def config_params(self, p: ModelParams, workers: int) -> ModelParams:
        """Parameters of one worker count: weak scaling grows the epoch with the GPUs."""
        if self.scaling == "strong":
            return p
        base = min(self.workers)
        return replace(p, samples_per_epoch=round(p.samples_per_epoch * workers / base))

    def configs(self) -> list[Config]:
        """The configurations: one non-distributed job for 1 GPU, then strategy x workers."""
        out = []
        if 1 in self.workers and self.strategies:
            out.append(Config(NON_DISTRIBUTED, self.strategies[0], 1))
        out += [Config(s, s, n) for s in self.strategies for n in self.workers if n > 1]
        return out

    def log_ranks(self, workers: int) -> list[int]:
        """Ranks that have a worker run."""
        return list(range(workers)) if self.log_on_workers == "all" else [0]

    def jobs(self) -> list[tuple[int, Config]]:
        """(repeat, configuration) in the order they run."""
        return [(r, c) for r in range(self.repeats) for c in self.configs()]
