"""One rank's timeline: where its device time goes, by Holistic Trace Analysis's definitions.

The rules, as HTA applies them (so its users can trust the numbers):

* **window**: when the trace has two or more ``ProfilerStep`` annotations, the last step is
  left out: a device event counts only when a host event with its ``correlation`` started
  before the last step's annotation did (HTA drops it because its kernels may run past the end
  of the trace). The last step starts at the latest ``ProfilerStep`` annotation, the
  device-side one included (it starts when the step's first kernel does, after the host's).
  With one step or none the whole trace counts, and a warning says so.
* **rounding**: when any timestamp in the trace is fractional (nanosecond-resolution traces,
  all of PyTorch's), a start is rounded up and an end (start + duration) down to whole
  microseconds, as HTA does, the window's comparisons included; whole-microsecond traces are
  taken as they are.
* **span**: from the first event's start to the last event's end, the events merged.
* **compute / communication / memory**: the union of the intervals of that kind, so
  overlapping events of one kind count once; a device event of none of these kinds (a
  synchronisation) is busy time all the same; **idle**: the span with no event running;
  **non-compute**: the span less compute and idle (HTA's temporal breakdown).
* **overlap**: the time communication and compute both run, as a share of the communication
  time (HTA's communication-computation overlap); **exposed communication**: communication
  with no compute under it.

A trace without device events (a CPU-only, gloo job) gets the same on its CPU operators
(``cpu_op`` events on every host thread, nested operators counted once) and ``device`` says
``cpu``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from itwin_report.traces.kinds import COMMUNICATION, COMPUTE, MEMORY, PERCENTS, SECONDS
from itwin_report.traces.reader import RawTrace


@dataclass
class RankTimeline:
    """One trace's breakdown (seconds) and percentages (0-100, two decimals as HTA)."""

    file: str
    rank: int | None
    world_size: int | None
    device: str  # "gpu" or "cpu"
    steps: int  # profiler steps analysed
    span_s: float
    compute_s: float
    communication_s: float
    memory_s: float
    idle_s: float
    exposed_communication_s: float
    compute_pct: float
    non_compute_pct: float
    idle_pct: float
    overlap_pct: float
    compute_per_step_s: float  # compute / steps analysed (NaN without steps)
    launch_lag_s: float  # mean delay from a step's start to its first collective launch
    start_ns: float  # wall-clock start of the trace (baseTimeNanoseconds), NaN when absent
    notes: list[str] = field(default_factory=list)
    # wall clock (ns since the epoch) of the first event's start, NaN when the trace does not
    # say; set by the reader's caller (traces/analyze.py), which has the raw events, for
    # matching a trace to the MLflow run it was recorded in
    first_ns: float = float("nan")
    # per collective and group size of the trace's communication kernels (every one, the
    # window aside): traces/collectives.py's rows, set by the reader's caller too
    collectives: list[dict[str, object]] = field(default_factory=list)
    # the same kernels per collective, group size and size class (large, medium, small,
    # unknown) with the median and quartiles of their busbw, and the rank's link fit
    # (time = alpha + bus bytes / beta; None when it cannot be fitted): set with collectives
    size_classes: list[dict[str, object]] = field(default_factory=list)
    link_fit: dict[str, object] | None = None
    # the profiler steps the trace holds (its ProfilerStep annotations), the last one included:
    # the span of its collective kernels, which ``steps`` (HTA's window) may leave one out of
    profiled_steps: int = 0

    def row(self) -> dict[str, object]:
        """The JSON row of ``analyze-traces``."""
        return {
            "file": self.file,
            "rank": self.rank,
            "world_size": self.world_size,
            "device": self.device,
            "steps": self.steps,
            **{name: _finite(getattr(self, name)) for name in (*SECONDS, *PERCENTS)},
        }


def _finite(value: float) -> float | None:
    return None if value != value else float(value)


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intervals merged as HTA merges them: sorted by start, a new group wherever a start lies
    beyond every earlier end; each group from its first start to its latest end."""
    if starts.size == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    new = np.empty(starts.size, dtype=bool)
    new[0] = True
    new[1:] = starts[1:] > reach[:-1]
    first = np.flatnonzero(new)
    return starts[first], np.maximum.reduceat(ends, first)


def covered(starts: np.ndarray, ends: np.ndarray) -> float:
    """Time covered by the intervals (their union's length)."""
    s, e = merge(starts, ends)
    return float(np.sum(e - s)) if s.size else 0.0


def rounded(ts: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start rounded up and end rounded down to whole microseconds."""
    return np.ceil(ts), np.floor(ts + dur)


def _starts(raw: RawTrace, ts: np.ndarray) -> np.ndarray:
    """Start times as the window compares them (rounded up when the trace is rounded)."""
    return np.ceil(ts) if raw.fractional else ts


def _last_step(raw: RawTrace) -> float | None:
    """When the last profiler step starts, None with fewer than two steps."""
    if np.unique(raw.step_ids).size < 2:
        return None
    return float(_starts(raw, raw.step_ts).max())


def _times(raw: RawTrace, ts: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends, rounded as HTA rounds them when the trace is fractional."""
    return rounded(ts, dur) if raw.fractional else (ts, ts + dur)


def window(raw: RawTrace) -> tuple[np.ndarray, int, list[str]]:
    """Which device events count (a mask), how many profiler steps, and notes."""
    ids = np.unique(raw.step_ids)
    last = _last_step(raw)
    if last is None:
        why = "no profiler step" if ids.size == 0 else "one profiler step"
        note = f"{why} in the trace: all of it is analysed (HTA leaves out the last step)"
        return np.ones(raw.kernel_ts.size, dtype=bool), int(ids.size), [note]
    before = raw.host_corr[_starts(raw, raw.host_ts) < last]
    return np.isin(raw.kernel_corr, before), int(ids.size) - 1, []


def analyse(raw: RawTrace, name: str) -> RankTimeline:
    """The timeline of one trace."""
    timeline = _analyse(raw, name)
    timeline.profiled_steps = int(np.unique(raw.step_ids).size)
    return timeline


def _analyse(raw: RawTrace, name: str) -> RankTimeline:
    steps_mask, steps, notes = window(raw)
    if raw.kernel_ts.size:
        device = "gpu"
        steps_mask, notes = _possible(steps_mask, raw.kernel_dur, "GPU kernel", notes)
        ts, end = _times(raw, raw.kernel_ts[steps_mask], raw.kernel_dur[steps_mask])
        kind = raw.kernel_kind[steps_mask]
        lag = _launch_lag(raw, steps_mask)
    else:
        device = "cpu"
        keep, notes = _possible(_cpu_window(raw), raw.op_dur, "CPU operator", notes)
        ts, end = _times(raw, raw.op_ts[keep], raw.op_dur[keep])
        kind = raw.op_kind[keep]
        lag = _cpu_launch_lag(raw, keep)
    meta = raw.meta.get("distributedInfo")
    info = meta if isinstance(meta, dict) else {}
    rank = _int_or_none(info.get("rank"))
    size = _int_or_none(info.get("world_size"))
    base = raw.meta.get("baseTimeNanoseconds")
    start_ns = (
        float(base) if isinstance(base, int | float) and not isinstance(base, bool) else np.nan
    )
    if ts.size == 0:
        nan = float("nan")
        return RankTimeline(name, rank, size, device, steps, *(nan,) * 12, start_ns, notes)
    span_start, span_end = merge(ts, end)
    span = float(span_end.max() - span_start.min())
    busy = float(np.sum(span_end - span_start))
    parts = {k: (ts[kind == k], end[kind == k]) for k in (COMPUTE, COMMUNICATION, MEMORY)}
    compute = covered(*parts[COMPUTE])
    comm = covered(*parts[COMMUNICATION])
    memory = covered(*parts[MEMORY])
    both = covered(
        np.concatenate([parts[COMPUTE][0], parts[COMMUNICATION][0]]),
        np.concatenate([parts[COMPUTE][1], parts[COMMUNICATION][1]]),
    )
    overlap = compute + comm - both
    idle = span - busy
    us = 1e6
    return RankTimeline(
        file=name,
        rank=rank,
        world_size=size,
        device=device,
        steps=steps,
        span_s=span / us,
        compute_s=compute / us,
        communication_s=comm / us,
        memory_s=memory / us,
        idle_s=idle / us,
        exposed_communication_s=(comm - overlap) / us,
        compute_pct=_pct(compute, span),
        non_compute_pct=_pct(span - compute - idle, span),
        idle_pct=_pct(idle, span),
        overlap_pct=_pct(overlap, comm),
        compute_per_step_s=compute / us / steps if steps else float("nan"),
        launch_lag_s=lag,
        start_ns=start_ns,
        notes=notes,
    )


def _possible(
    mask: np.ndarray, dur: np.ndarray, what: str, notes: list[str]
) -> tuple[np.ndarray, list[str]]:
    """``mask`` without the events of a negative (impossible) duration, and a note counting
    them."""
    negative = mask & (dur < 0)
    n = int(negative.sum())
    if not n:
        return mask, notes
    return mask & ~negative, [*notes, f"dropped {n} {what}(s) with a negative duration"]


def _pct(part: float, whole: float) -> float:
    return round(100.0 * part / whole, 2) if whole > 0 else float("nan")


def _int_or_none(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return None
    return int(value)


def _cpu_window(raw: RawTrace) -> np.ndarray:
    """CPU operators that started before the last profiler step (all with fewer than two)."""
    last = _last_step(raw)
    if last is None:
        return np.ones(raw.op_ts.size, dtype=bool)
    return _starts(raw, raw.op_ts) < last


def _step_starts(raw: RawTrace) -> np.ndarray:
    """The analysed steps' starts on the host, in order (the last step left out): the host's
    ``ProfilerStep`` annotations, not the device-side ones, which start when each step's first
    kernel does, often a step or more behind the host (all of them when there is no other)."""
    host = raw.step_ts[raw.step_device == 0]
    starts = np.sort(host if host.size else raw.step_ts, kind="stable")
    return starts[:-1] if starts.size >= 2 else starts


def _first_after(starts: np.ndarray, times: np.ndarray) -> float:
    """Mean, over the steps with one, of the delay from a step's start to the first of
    ``times`` inside it (NaN when no step has one)."""
    if starts.size == 0 or times.size == 0:
        return float("nan")
    times = np.sort(times)
    bounds = np.append(starts[1:], np.inf)
    at = np.searchsorted(times, starts, side="left")
    delays = [
        float(times[i] - s)
        for s, b, i in zip(starts, bounds, at, strict=True)
        if i < times.size and times[i] < b
    ]
    return float(np.mean(delays)) / 1e6 if delays else float("nan")


def _launch_lag(raw: RawTrace, mask: np.ndarray) -> float:
    """Mean delay from each step's start to the host launch of its first collective."""
    comm = raw.kernel_corr[mask & (raw.kernel_kind == COMMUNICATION)]
    launches = raw.host_ts[np.isin(raw.host_corr, comm)]
    return _first_after(_step_starts(raw), launches)


def _cpu_launch_lag(raw: RawTrace, keep: np.ndarray) -> float:
    """Mean delay from each step's start to its first communication operator."""
    return _first_after(_step_starts(raw), raw.op_ts[keep & (raw.op_kind == COMMUNICATION)])
