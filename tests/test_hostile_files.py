"""Files that must not end a whole command: one bad trace, compare side or performance record is
a warning naming it or a one-line error, read in bounded memory, never blocking."""

from __future__ import annotations

import gzip
import json
import os
import random
from pathlib import Path

import numpy as np
import pytest
from conftest import cli_runner
from test_traces_match import EXPERIMENT, T0, Job, S, write_store, write_traces

from itwin_report.cli import main
from itwin_report.emulator import kineto
from itwin_report.traces.analyze import analyze_traces
from itwin_report.traces.reader import read_trace
from itwin_report.traces.shape import ShapeError, ShapeGuard
from itwin_report.traces.source import TraceReadError

DEEP = 100_000


def _trace(folder: Path, rank: int, world: int = 3) -> Path:
    return kineto.write(kineto.RankSpec(rank=rank, world_size=world), folder)


def _deep_info(text: str) -> str:
    """The trace's ``distributedInfo`` nested :data:`DEEP` levels down."""
    at = text.index('"distributedInfo": ') + len('"distributedInfo": ')
    end = text.index("}", at) + 1
    return text[:at] + '{"a": ' * DEEP + text[at:end] + "}" * DEEP + text[end:]


def _one_line_each(texts: list[str]) -> None:
    assert all("\n" not in t and "unexpected" not in t for t in texts)


# ------------------------------------------------------------------ traces


def test_one_bad_trace_is_a_warning_and_the_others_are_read(tmp_path: Path) -> None:
    good = _trace(tmp_path, 0)
    latin = _trace(tmp_path / "latin", 1)
    kernel = b'"cat": "kernel", "name": "'
    latin.write_bytes(latin.read_bytes().replace(kernel, kernel + b"\xff", 1))
    deep = _trace(tmp_path / "deep", 2)
    deep.write_text(_deep_info(deep.read_text()))
    result = analyze_traces([tmp_path])
    assert [r.file for r in result.ranks] == [str(good)]
    texts = [str(w) for w in result.warnings]
    _one_line_each(texts)
    # worded by the JSON parser that met the byte (pyarrow's or ijson's, by version)
    assert any(t.startswith(f"{latin}: ") for t in texts), texts
    assert f"{deep}: not a trace (nested deeper than 256 levels)" in texts


def test_a_deep_trace_on_one_line_is_a_warning(tmp_path: Path) -> None:
    """One line (no layout for the fast reader): the careful reader stops before building it."""
    deep = _trace(tmp_path, 0)
    doc = json.loads(deep.read_text())
    deep.write_text(_deep_info(json.dumps(doc)))
    with pytest.raises(TraceReadError, match=r"not a trace \(nested deeper than 256 levels\)"):
        read_trace(deep)


def test_a_gzipped_trace_with_a_huge_name_stops_at_the_string_cap(tmp_path: Path) -> None:
    """A 3 MiB event name in a few KiB of gzip: refused at the 1 MiB cap of one string."""
    doc = json.loads(_trace(tmp_path / "src", 0).read_text())
    doc["traceEvents"][1]["name"] = "a" * (3 << 20)
    path = tmp_path / "worker_0.1.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert path.stat().st_size < 64 << 10
    with pytest.raises(TraceReadError, match=r"not a trace \(a text value longer than 1 MiB\)"):
        read_trace(path)


def _reference(text: bytes) -> tuple[int, int]:
    """(deepest nesting, longest string in bytes) worked out by walking the text by hand."""
    depth = deepest = longest = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i : i + 1]
        if c == b'"':
            j = i + 1
            while text[j : j + 1] != b'"':
                j += 2 if text[j : j + 1] == b"\\" else 1
            longest = max(longest, j - i - 1)
            i = j + 1
            continue
        if c in (b"{", b"["):
            depth += 1
            deepest = max(deepest, depth)
        elif c in (b"}", b"]"):
            depth -= 1
        i += 1
    return deepest, longest


@pytest.mark.parametrize("seed", range(6))
def test_the_shape_guard_agrees_with_a_walk_of_the_text(seed: int) -> None:
    rng = random.Random(seed)

    def value(level: int) -> object:
        kind = rng.choice(["s", "n", "l", "o"] if level < 12 else ["s", "n"])
        if kind == "s":
            return "".join(
                rng.choice(['"', "\\", "{", "]", "a", "é", "\n"]) for _ in range(rng.randint(0, 40))
            )
        if kind == "n":
            return rng.random()
        if kind == "l":
            return [value(level + 1) for _ in range(rng.randint(0, 3))]
        return {f'k{i}\\"[': value(level + 1) for i in range(rng.randint(0, 3))}

    text = json.dumps([value(0) for _ in range(20)], ensure_ascii=False).encode()
    deepest, longest = _reference(text)
    cuts = sorted(rng.sample(range(1, len(text)), min(30, len(text) - 1)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    ShapeGuard(max_depth=deepest, max_string=longest).feed(b"")  # nothing: nothing checked
    guard = ShapeGuard(max_depth=deepest, max_string=longest)
    for piece in pieces:
        guard.feed(piece)  # exactly at the bounds: passes
    assert guard.depth == 0 and not guard.in_string
    for bounds, what in (((deepest - 1, longest), "nested"), ((deepest, longest - 1), "text")):
        guard = ShapeGuard(*bounds)
        with pytest.raises(ShapeError, match=what):
            for piece in pieces:
                guard.feed(piece)
    assert np.isfinite(deepest)


def test_a_deep_trace_logged_as_an_artifact_is_a_warning_in_the_report(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    job = Job("ddp-2", 2, T0, T0 + 60 * S, logged=(0, 1))
    w = write_store(uri, [job])
    staged = write_traces(tmp_path / "staged", job, kineto.job(2), after_s=5)
    assert job.runs is not None
    w.log_text(job.runs[0], staged[0].read_text(), f"profiler/{staged[0].name}")
    w.log_text(job.runs[1], _deep_info(staged[1].read_text()), f"profiler/{staged[1].name}")
    result = cli_runner().invoke(
        main,
        ["generate-scalability-report", "--tracking-uri", uri, "-e", EXPERIMENT,
         "--format", "json", "--no-plots", "-q"],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    body = json.loads(result.stdout)
    assert [r["rank"] for r in body["trace_ranks"]] == [0]
    texts = [w if isinstance(w, str) else w["text"] for w in body["warnings"]]
    warned = [t for t in texts if staged[1].name in t]
    assert len(warned) == 1 and "nested deeper than 256 levels" in warned[0], body["warnings"]


# ------------------------------------------------------------------ merge-performance


def _record(path: Path, samples: float, seconds: float) -> Path:
    path.write_text(json.dumps({"total_samples": samples, "total_time": seconds}))
    return path


def _merge(*args: str) -> tuple[int, str, str]:
    result = cli_runner().invoke(main, ["merge-performance", *args])
    return result.exit_code, result.stdout, result.stderr


def test_merge_refuses_what_is_not_a_regular_file_before_opening_it(tmp_path: Path) -> None:
    good = _record(tmp_path / "w0.json", 10, 1)
    fifo = tmp_path / "w1.json"
    os.mkfifo(fifo)  # nobody writes: opening it to read would block
    for other, why in ((fifo, "not a regular file"), (Path("/dev/zero"), "not a regular file")):
        code, out, err = _merge(str(good), str(other))
        assert (code, out) == (1, "")
        assert err == f"Error: {other}: {why}\n"


def test_merge_refuses_a_record_larger_than_any_can_be(tmp_path: Path) -> None:
    good = _record(tmp_path / "w0.json", 10, 1)
    huge = tmp_path / "w1.json"
    with open(huge, "wb") as fh:
        fh.truncate(4 << 30)  # sparse: 4 GiB that take no disk
    code, _, err = _merge(str(good), str(huge))
    assert code == 1
    assert err == (
        f"Error: {huge}: 4,294,967,296 bytes, more than a performance.json can be (16,777,216)\n"
    )


@pytest.mark.parametrize(
    ("samples", "seconds", "why"),
    [
        (10, -5, "total_time is -5, not"),
        (-10, 1, "total_samples is -10, not"),
        (10, 0, "total_time is 0, not"),
    ],
)
def test_merge_refuses_impossible_records(
    tmp_path: Path, samples: float, seconds: float, why: str
) -> None:
    good = _record(tmp_path / "w0.json", 10, 1)
    bad = _record(tmp_path / "w1.json", samples, seconds)
    code, out, err = _merge(str(good), str(bad))
    assert (code, out) == (1, "")
    assert err.startswith(f"Error: {bad}: {why}") and err.count("\n") == 1


def test_merge_refuses_the_same_file_twice_under_any_name(tmp_path: Path) -> None:
    a = _record(tmp_path / "w0.json", 10, 1)
    b = _record(tmp_path / "w1.json", 30, 2)
    link = tmp_path / "again.json"
    link.symlink_to(a)
    for twice in ([a, b, a], [a, b, link]):
        code, out, err = _merge(*map(str, twice))
        assert (code, out) == (1, "")
        same = f"{twice[2]} is the same file as {a}: given twice, its samples would count twice"
        assert err == f"Error: {same}\n"
    code, out, _ = _merge(str(a), str(b))
    assert code == 0 and json.loads(out)["total_samples"] == 40  # 10 + 30, each once


# ------------------------------------------------------------------ compare sides


def test_a_compare_side_larger_than_any_report_is_refused_unread(tmp_path: Path) -> None:
    base = tmp_path / "base.json"
    with open(base, "wb") as fh:
        fh.truncate(4 << 30)
    result = cli_runner().invoke(main, ["compare", str(base), str(base)])
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: {base}: 4,294,967,296 bytes, more than a saved report can be (268,435,456)\n"
    )


def test_a_compare_side_nested_too_deep_is_one_line(tmp_path: Path) -> None:
    base = tmp_path / "base.json"
    base.write_text("[" * DEEP + "]" * DEEP)
    result = cli_runner().invoke(main, ["compare", str(base), str(base)])
    assert result.exit_code == 1 and result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"Error: {base}: not valid JSON")
