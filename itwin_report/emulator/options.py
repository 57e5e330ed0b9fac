"""What one ``emulate`` invocation asks for (light: no numpy, pandas or mlflow)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from itwin_report.emulator.params import STRATEGIES, ModelParams, preset, with_overrides
from itwin_report.errors import ReportError

DEFAULT_WORKERS: tuple[int, ...] = (4, 8, 16, 32)
DEFAULT_EXPERIMENT = "emulated-cluster"
LOG_ON_WORKERS = ("all", "0")


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

    def validate(self) -> None:
        """ReportError for anything the model cannot run."""
        if not self.strategies:
            raise ReportError("no strategy given")
        for s in self.strategies:
            if s not in STRATEGIES:
                raise ReportError(f"unknown strategy {s!r}; choose from {', '.join(STRATEGIES)}")
        if not self.workers:
            raise ReportError("no worker count given")
        for n in self.workers:
            if n < 1:
                raise ReportError(f"worker count must be >= 1, got {n}")
        if self.repeats < 1:
            raise ReportError(f"--repeats must be >= 1, got {self.repeats}")
        if self.epochs is not None and self.epochs < 1:
            raise ReportError(f"--epochs must be >= 1, got {self.epochs}")
        if self.gpus_per_node is not None and self.gpus_per_node < 1:
            raise ReportError(f"--gpus-per-node must be >= 1, got {self.gpus_per_node}")
        if self.log_on_workers not in LOG_ON_WORKERS:
            raise ReportError(f"--log-on-workers must be 'all' or '0', got {self.log_on_workers!r}")
        if not self.experiment_name.strip():
            raise ReportError("--experiment-name must not be empty")

    def params(self) -> ModelParams:
        """Preset, then --gpus-per-node and --epochs, then --set; validated."""
        self.validate()
        p = preset(self.preset)
        if self.gpus_per_node is not None:
            p = replace(p, gpus_per_node=self.gpus_per_node)
        if self.epochs is not None:
            p = replace(p, epochs=self.epochs)
        return with_overrides(p, self.overrides)

    def log_ranks(self, workers: int) -> list[int]:
        """Ranks that have a worker run."""
        return list(range(workers)) if self.log_on_workers == "all" else [0]

    def jobs(self) -> list[tuple[int, str, int]]:
        """(repeat, strategy, workers) in the order they run."""
        return [
            (r, s, n) for r in range(self.repeats) for s in self.strategies for n in self.workers
        ]
