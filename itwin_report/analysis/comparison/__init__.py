"""Compare two reports configuration by configuration and find regressions (pure functions).

A side is a saved JSON report (``--format json``) or a freshly built :class:`Report`; both are
reduced to the same :class:`Side`. Every number read from a side must lie in the range the
loader accepts for it (:mod:`itwin_report.data.validate`); a value outside is left out with a
warning.

What is compared, per configuration (strategy, workers), among the metrics picked (all by
default): the mean epoch time, the parallel efficiency computed from epoch time (the epoch-time
table's, not the throughput table's), the throughput in samples/s and the GPU energy per epoch.
A change is a *regression* when it is for the worse by more than ``max_regression`` (relative)
and beyond noise: every row whose sides have two runs or more gets a one-sided Welch t-test
(:mod:`itwin_report.analysis.noise_tests`), each metric a test of its mean change over the
configurations too, and Holm–Bonferroni over all of them holds the comparison's false-alarm
rate at 5 %. A row without a noise test (one run on a side) is decided by the threshold alone,
and says so.

A configuration of the baseline that the current report lacks fails the comparison too, unless
missing configurations are allowed.

The package: :mod:`.metrics` (what is compared and where a report holds it), :mod:`.sides`
(reading a side) and :mod:`.compare` (the verdicts and the gate).
"""

from itwin_report.analysis.comparison.compare import (
    OVERALL_COLUMNS,
    Comparison,
    Unreached,
    _records,
    check_target,
    compare,
    compare_sides,
    compared_words,
    gate_error,
    method_words,
    pick_metrics,
    reached_words,
    regressions,
    safe_name,
)
from itwin_report.analysis.comparison.metrics import (
    BY_NAME,
    BY_OPTION,
    COLUMNS,
    METRICS,
    Config,
    Metric,
    Side,
    config_name,
    label,
)
from itwin_report.analysis.comparison.sides import load_side_file, side_from_dict

__all__ = [
    "BY_NAME",
    "BY_OPTION",
    "COLUMNS",
    "METRICS",
    "OVERALL_COLUMNS",
    "Comparison",
    "Config",
    "Metric",
    "Side",
    "Unreached",
    "_records",
    "check_target",
    "compare",
    "compare_sides",
    "compared_words",
    "config_name",
    "gate_error",
    "label",
    "load_side_file",
    "method_words",
    "pick_metrics",
    "reached_words",
    "regressions",
    "safe_name",
    "side_from_dict",
]
