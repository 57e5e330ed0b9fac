"""Profiler traces: a streaming reader of PyTorch (Kineto) Chrome traces, per-rank timelines
by Holistic Trace Analysis's definitions, and the stragglers among the ranks of a job.

``analyze_traces(paths)`` is the entry point of ``analyze-traces``;
:mod:`itwin_report.traces.timeline` states the rules. For the scalability report,
``run_traces(runs, files)`` matches each trace to its MLflow job and worker run
(:mod:`itwin_report.traces.match`) and sums each rank's windows. Light on import: numpy,
pyarrow and ijson are loaded by the modules that use them.

Reading a trace (:func:`read_trace`): :mod:`~itwin_report.traces.source` opens it and reads its
metadata, :mod:`~itwin_report.traces.pieces` parses its events with pyarrow, a few MiB at a
time, :mod:`~itwin_report.traces.streaming` with ijson where that declines, and
:mod:`~itwin_report.traces.columns` keeps what the timelines use, by the rules of
:mod:`~itwin_report.traces.kinds`.
"""

from __future__ import annotations

from itwin_report.util.lazy import exports

_EXPORTS = {
    "TraceSet": "itwin_report.traces.analyze",
    "analyze_traces": "itwin_report.traces.analyze",
    "RunTraces": "itwin_report.traces.analyze",
    "run_traces": "itwin_report.traces.analyze",
    "TraceFile": "itwin_report.traces.match",
    "match_traces": "itwin_report.traces.match",
    "RankTimeline": "itwin_report.traces.timeline",
    "read_trace": "itwin_report.traces.reader",
}


__getattr__ = exports(_EXPORTS)


__all__ = sorted(_EXPORTS)
