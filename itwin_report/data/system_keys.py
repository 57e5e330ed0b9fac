"""MLflow's own GPU system metric keys: the one place that knows their layout.

``mlflow.enable_system_metrics_logging()`` logs, for every GPU index ``i`` the process sees,
``system/gpu_<i>_<measure>``, or ``system/<node id>/gpu_<i>_<measure>`` when a node id is set
(``MLFLOW_SYSTEM_METRICS_NODE_ID``; any text, slashes included). The report reads the measures
of :data:`SYSTEM_GPU_MEASURES`; their points keep their keys in the loaded metrics.

Light module: standard library only (the HTTP reader imports it).
"""

from __future__ import annotations

import re

SYSTEM_PREFIX = "system/"
# MLflow's measure -> the report's name for it
SYSTEM_GPU_MEASURES: dict[str, str] = {
    "power_usage_watts": "power_w",
    "utilization_percentage": "utilization_pct",
    "memory_usage_megabytes": "memory_mb",
    "memory_usage_percentage": "memory_pct",
}
_KEY = re.compile(
    r"system/(?:(?P<node>.+)/)?gpu_(?P<index>[0-9]+)_(?P<measure>"
    + "|".join(SYSTEM_GPU_MEASURES)
    + ")"
)


def system_gpu_key(key: str) -> tuple[str, int, str] | None:
    """(node id, "" without one; GPU index; the report's measure name) of a system GPU key the
    report reads, None for any other key."""
    found = _KEY.fullmatch(key) if key.startswith(SYSTEM_PREFIX) else None
    if found is None:
        return None
    return found["node"] or "", int(found["index"]), SYSTEM_GPU_MEASURES[found["measure"]]


def is_system_gpu_key(key: str) -> bool:
    """Whether ``key`` is a system GPU metric the report reads."""
    return system_gpu_key(key) is not None
