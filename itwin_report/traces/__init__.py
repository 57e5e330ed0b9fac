"""Profiler traces: a streaming reader of PyTorch (Kineto) Chrome traces, per-rank timelines
by Holistic Trace Analysis's definitions, and the stragglers among the ranks of a job.

``analyze_traces(paths)`` is the entry point; :mod:`itwin_report.traces.timeline` states the
rules. Light on import: numpy and ijson are loaded by the modules that use them.
"""

from __future__ import annotations

from itwin_report.util.lazy import exports

_EXPORTS = {
    "TraceSet": "itwin_report.traces.analyze",
    "analyze_traces": "itwin_report.traces.analyze",
    "RankTimeline": "itwin_report.traces.timeline",
    "read_trace": "itwin_report.traces.reader",
}


__getattr__ = exports(_EXPORTS)


__all__ = sorted(_EXPORTS)
