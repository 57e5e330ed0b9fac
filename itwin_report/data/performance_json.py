"""Read and merge ``performance.json`` records (one per worker, or already merged).

Merge rules, none of which depends on the order of the records: samples add up (``math.fsum``),
``total_time`` is the longest record's (the job's wall time: the job ends with its last worker),
``compile_time`` and ``programming_time`` take the maximum, ``est_samples_per_sec`` must agree
(the smallest is kept), ``samples_per_sec`` is recomputed from the merged totals,
``suspected_input_bottleneck`` is true if any record says so, and the per-worker summaries
(``ordinals``) are sorted.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from itwin_report.data.rundata import PERFORMANCE_FIELDS
from itwin_report.util.errors import DataError

REQUIRED = ("total_samples", "total_time")
MAX_RECORD_BYTES = 16 << 20  # a performance.json is a few hundred bytes
NUMERIC = tuple(f for f in PERFORMANCE_FIELDS if f != "suspected_input_bottleneck")
ORDINAL_FIELDS = ("total_samples", "total_time", "samples_per_sec")


def _is_number(value: object) -> bool:
    """A JSON number that is finite as a float (no bool, NaN, Infinity, 1e400, 400 digits)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _check_ordinals(ordinals: object, source: str) -> None:
    """``ordinals``: worker ordinals (integers >= 0) or per-worker summaries (objects)."""
    if not isinstance(ordinals, list):
        raise DataError(f"{source}: ordinals is not a list")
    for item in ordinals:
        if isinstance(item, dict):
            bad = [f for f in ORDINAL_FIELDS if f in item and not _is_number(item[f])]
            if bad:
                raise DataError(f"{source}: an ordinal's {bad[0]} is not a finite number")
        elif isinstance(item, bool) or not isinstance(item, int) or not 0 <= item < 10**9:
            raise DataError(f"{source}: ordinals holds {str(item)[:40]!r}, not a worker ordinal")


def check_record(record: object, source: str) -> dict:
    """``record`` if it is a usable performance record, else ``DataError`` naming ``source``.

    Required: numeric ``total_samples`` and ``total_time``. The other numeric fields may be
    absent or null; ``suspected_input_bottleneck`` is true/false when present; a record that
    already merges several workers lists them under ``ordinals``.
    """
    if not isinstance(record, dict):
        raise DataError(f"{source}: expected a JSON object, found {type(record).__name__}")
    missing = [f for f in REQUIRED if record.get(f) is None]
    if missing:
        raise DataError(f"{source}: missing field(s) {', '.join(missing)}")
    for name in NUMERIC:
        value = record.get(name)
        if value is not None and not _is_number(value):
            raise DataError(f"{source}: field {name} is not a finite number: {str(value)[:40]!r}")
    flag = record.get("suspected_input_bottleneck", False)
    if not isinstance(flag, bool):
        raise DataError(f"{source}: suspected_input_bottleneck is not true/false: {flag!r}")
    if "ordinals" in record:
        _check_ordinals(record["ordinals"], source)
    return record


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_json(text: str | bytes) -> object:
    """Strict JSON: ``NaN``/``Infinity`` rejected (``ValueError``), nesting capped by recursion."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def read_record(path: Path) -> dict:
    """Load one performance.json; ``DataError`` naming the file if unusable (not a regular
    file, larger than :data:`MAX_RECORD_BYTES`, not JSON, or values outside the ranges the
    report's loader accepts: a negative time is no time)."""
    from itwin_report.util.files import read_regular

    path = Path(path)
    data = read_regular(path, MAX_RECORD_BYTES, "performance.json")
    try:
        record = parse_json(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"{path}: not a readable JSON file ({str(exc)[:200]})") from None
    return _in_range(check_record(record, str(path)), str(path))


def _in_range(record: dict, source: str) -> dict:
    """``record`` when its numbers lie in the loader's valid ranges (``data.validate``)."""
    import pandas as pd

    from itwin_report.data.validate import PERFORMANCE_OPTIONAL, PERFORMANCE_REQUIRED

    ranges = {**PERFORMANCE_REQUIRED, **PERFORMANCE_OPTIONAL}
    for name, valid in ranges.items():
        value = record.get(name)
        if value is None or (name == "est_samples_per_sec" and value == 0):  # 0: unset
            continue
        if name == "records" and not isinstance(value, int | float):
            continue  # check_record words it
        if not bool(valid.ok(pd.Series([float(value)], dtype="float64"))[0]):
            raise DataError(f"{source}: {name} is {value:g}, not {valid}")
    return record


def merge_records(records: Sequence[dict], names: Sequence[str] | None = None) -> dict:
    """Merge worker records into one; ``DataError`` if their estimates disagree."""
    if not records:
        raise DataError("no performance records to merge")
    names = list(names) if names is not None else [f"record {i}" for i in range(len(records))]
    if len(names) != len(records):
        raise ValueError("names and records differ in length")
    samples = math.fsum(_num(r, "total_samples") for r in records)
    total_time = max(_num(r, "total_time") for r in records)
    merged: dict[str, Any] = {
        "total_samples": samples,
        "total_time": total_time,
        "samples_per_sec": samples / total_time if total_time else 0.0,
        "compile_time": max(_num(r, "compile_time") for r in records),
        "programming_time": max(_num(r, "programming_time") for r in records),
        "est_samples_per_sec": _agreed_estimate(records, names),
        "suspected_input_bottleneck": any(
            bool(r.get("suspected_input_bottleneck")) for r in records
        ),
        "records": sum(record_count(r) for r in records),
        "ordinals": sorted((o for r in records for o in _ordinals(r)), key=_ordinal_order),
    }
    return merged


def _ordinal_order(ordinal: object) -> tuple[int, float, str]:
    """Worker ordinals (integers) first, by number; then summaries, by their JSON text."""
    if isinstance(ordinal, int | float):
        return 0, float(ordinal), ""
    return 1, 0.0, json.dumps(ordinal, sort_keys=True, default=str)


def merge_files(paths: Sequence[Path]) -> dict:
    """Read and merge the given performance.json files (one file given twice, under any name,
    is an error: its samples would count twice)."""
    seen: dict[tuple[int, int], Path] = {}
    for path in map(Path, paths):
        try:
            info = os.stat(path)
        except OSError:
            continue  # reading it words why
        first = seen.setdefault((info.st_dev, info.st_ino), path)
        if first is not path:
            raise DataError(
                f"{path} is the same file as {first}: given twice, its samples would count twice"
            )
    return merge_records([read_record(Path(p)) for p in paths], [str(p) for p in paths])


def to_json(merged: dict) -> str:
    """The merged record as strict JSON: an unknown value (NaN) is written as null."""

    def plain(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value

    return json.dumps(plain(merged), indent=4, sort_keys=True, allow_nan=False) + "\n"


def record_count(record: dict) -> int:
    """How many workers a record stands for: len(ordinals), else its ``records``, else 1."""
    if isinstance(record.get("ordinals"), list):
        return len(record["ordinals"])
    count = record.get("records")
    return int(count) if isinstance(count, int | float) and count == count and count > 0 else 1


def _ordinals(record: dict) -> list[dict]:
    """The per-worker summaries a record contributes to the merged ``ordinals``."""
    if isinstance(record.get("ordinals"), list):
        return [dict(o) if isinstance(o, dict) else o for o in record["ordinals"]]
    total_time = _num(record, "total_time")
    samples = _num(record, "total_samples")
    return [
        {
            "total_samples": samples,
            "total_time": total_time,
            "samples_per_sec": samples / total_time if total_time else 0.0,
        }
    ]


def _agreed_estimate(records: Sequence[dict], names: Sequence[str]) -> float:
    """The common ``est_samples_per_sec``: the smallest given, when all agree within 1e-9
    (NaN when none is known; 0 counts as unknown)."""
    known = []
    for name, record in zip(names, records, strict=True):
        value = record.get("est_samples_per_sec")
        if value is None or value != value or value == 0:
            continue  # absent, null or 0: no estimate (0 is what an unset estimate reads)
        known.append((float(value), name))
    if not known:
        return float("nan")
    low, high = min(known), max(known)
    if not math.isclose(low[0], high[0], rel_tol=1e-9, abs_tol=1e-12):
        raise DataError(
            f"est_samples_per_sec disagrees: {low[1]} says {low[0]:g}, {high[1]} says {high[0]:g}"
        )
    return low[0]


def _num(record: dict, name: str) -> float:
    """A numeric field, 0 when absent or null."""
    value = record.get(name)
    return 0.0 if value is None else float(value)
