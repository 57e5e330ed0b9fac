"""How close `--predict 64,128` comes to the emulator's truth, with the emulator's default noise.

For each preset and seed: emulate the preset's default jobs (every strategy on 4, 8, 16 and 32
GPUs, 2 repeats, rank 0 logging: ``--log-on-workers 0``) into a fresh SQLite store, build the
report with predictions at 64 and 128 GPUs, and compare each prediction with the truth the
emulator works out for 64 and 128 GPUs from its noise-free model (``expected_truth``; the mean
epoch time after warm-up). Prints one line per prediction and a summary per preset: how many
were made or refused, the largest error, and how many 95 % intervals hold the truth.

    python tools/prediction_accuracy.py                      # default, mnist, virgo; seeds 0-4
    python tools/prediction_accuracy.py --presets virgo --seeds 0,1
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path

from itwin_report.emulator import EmulationOptions, expected_truth, run_emulation
from itwin_report.report import build_report
from itwin_report.store import load_experiment

TARGETS = (64, 128)


def truth_at(preset: str) -> dict[tuple[str, int], float]:
    """The noise-free mean epoch time after warm-up at the target counts, per strategy."""
    options = EmulationOptions(workers=TARGETS, preset=preset, log_on_workers="0")
    return {
        (c["strategy"], c["workers"]): c["mean_epoch_time_after_warmup_s"]
        for c in expected_truth(options)["configurations"]
    }


def predictions(preset: str, seed: int, root: Path) -> list[dict]:
    """The report's prediction rows for one emulated preset and seed."""
    uri = f"sqlite:///{root / f'{preset}-{seed}.db'}"
    options = EmulationOptions(preset=preset, seed=seed, log_on_workers="0")
    run_emulation(options, uri)
    report = build_report(
        load_experiment(uri, options.experiment_name, show_progress=False),
        predict_workers=list(TARGETS),
    )
    assert report.analysis is not None
    return report.analysis.predictions.to_dict("records")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="default,mnist,virgo")
    parser.add_argument("--seeds", default="0,1,2,3,4")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        for preset in args.presets.split(","):
            truth = truth_at(preset)
            errors, inside, refused = [], 0, 0
            for seed in seeds:
                for row in predictions(preset, seed, Path(tmp)):
                    t = row["avg_epoch_time_s"]
                    true = truth[row["strategy"], int(row["workers"])]
                    if not t > 0:
                        refused += 1
                        continue
                    error = t / true - 1
                    hit = row["low_s"] <= true <= row["high_s"]
                    errors.append(error)
                    inside += hit
                    print(
                        f"{preset} seed {seed} {row['strategy']}-{row['workers']} "
                        f"({row['model']}): {t:.3f} s vs truth {true:.3f} s ({error:+.1%}), "
                        f"95 % interval {row['low_s']:.3f}-{row['high_s']:.3f} s"
                        f"{'' if hit else ' MISSES'}"
                    )
            worst = max(errors, key=abs) if errors else math.nan
            print(
                f"== {preset}: {len(errors)} predictions, {refused} refused; errors "
                f"{min(errors, default=math.nan):+.1%} to {max(errors, default=math.nan):+.1%} "
                f"(largest {worst:+.1%}); truth inside {inside} of {len(errors)} intervals"
            )


if __name__ == "__main__":
    main()
