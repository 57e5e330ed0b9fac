"""The ``compare`` gate on emulated runs: does it pass an unchanged model and fail a slower one?

Run ``.venv/bin/python tools/gate_check.py`` (about 3 minutes on 2 cores): it writes, into one
SQLite store in a temporary folder, the default emulation (``itwin-report emulate``: 3 strategies
x 4, 8, 16, 32 GPUs x 2 runs) at the base seed, the same model at each other seed (only the
noise changes), and a model 10 % slower per GPU (``--set gpu_samples_per_sec=227.2727``, i.e.
250 / 1.1) at each other seed; then compares each with the base exactly as ``itwin-report
compare base.json other`` does and prints the exit code each would give and why.

    .venv/bin/python tools/gate_check.py --seeds 1,2,3,4,5 --base-seed 0 --slowdown 1.1

It exits 0 when every unchanged model passes and every slower one fails, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from itwin_report import api
from itwin_report.analysis.comparison import Side, compare_sides, gate_error
from itwin_report.emulator import EmulationOptions, run_emulation
from itwin_report.emulator.params import ModelParams
from itwin_report.render.comparison import side_from_report


def side(uri: str, name: str, seed: int, overrides: tuple[str, ...] = ()) -> Side:
    """Emulate experiment ``name`` at ``seed`` and read it back as a comparison side."""
    run_emulation(EmulationOptions(seed=seed, overrides=overrides, experiment_name=name), uri)
    report = api.build(api.load(uri, name))
    return side_from_report(report, name)


def gate(base: Side, other: Side) -> tuple[int, str]:
    """The exit code ``compare`` would give (0 or 4) and its one line."""
    result = compare_sides(base, other)
    error = gate_error(result)
    if error is None:
        return 0, f"pass ({result.family_size} tests)"
    return error.exit_code, str(error)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3,4,5")
    parser.add_argument("--base-seed", type=int, default=0)
    parser.add_argument("--slowdown", type=float, default=1.1, help="compute time per GPU x")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    rate = ModelParams().gpu_samples_per_sec / args.slowdown
    slower = (f"gpu_samples_per_sec={rate}",)
    with tempfile.TemporaryDirectory() as folder:
        uri = f"sqlite:///{Path(folder) / 'mlflow.db'}"
        base = side(uri, "base", args.base_seed)
        passed = failed = 0
        for seed in seeds:
            code, line = gate(base, side(uri, f"same-{seed}", seed))
            passed += code == 0
            print(f"unchanged, seed {seed}: exit {code}: {line}")
            code, line = gate(base, side(uri, f"slower-{seed}", seed, slower))
            failed += code == 4
            print(f"{args.slowdown - 1:.0%} slower per GPU, seed {seed}: exit {code}: {line}")
    print(
        f"unchanged model passes on {passed} of {len(seeds)} seeds; "
        f"model {args.slowdown - 1:.0%} slower per GPU fails on {failed} of {len(seeds)}"
    )
    return 0 if passed == failed == len(seeds) else 1


if __name__ == "__main__":
    sys.exit(main())
