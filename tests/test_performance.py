"""performance.json reading and merging."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
from conftest import cli_runner

from itwin_report.data.performance_json import merge_files, merge_records, read_record, to_json
from itwin_report.util.errors import DataError


def rec(samples: float, time: float, est: float = 500.0, **extra) -> dict:
    base = {
        "total_samples": samples,
        "total_time": time,
        "samples_per_sec": samples / time if time else 0.0,
        "compile_time": 1.0,
        "programming_time": 2.0,
        "est_samples_per_sec": est,
        "suspected_input_bottleneck": False,
    }
    return {**base, **extra}


def test_merge_rules() -> None:
    merged = merge_records(
        [rec(1000, 10), rec(1200, 12, compile_time=5.0, suspected_input_bottleneck=True),
         rec(800, 8, programming_time=7.0)]
    )  # fmt: skip
    assert merged["total_samples"] == 3000  # 1000 + 1200 + 800
    assert merged["total_time"] == 12  # the longest worker's: the job's wall time
    assert merged["samples_per_sec"] == 250  # 3000 / 12
    assert (merged["compile_time"], merged["programming_time"]) == (5.0, 7.0)
    assert merged["est_samples_per_sec"] == 500.0
    assert merged["suspected_input_bottleneck"] is True
    assert merged["records"] == 3
    assert [o["samples_per_sec"] for o in merged["ordinals"]] == [100, 100, 100]


def test_merged_record_counts_its_ordinals_and_zero_time() -> None:
    inner = merge_records([rec(10, 1), rec(20, 1)])
    outer = merge_records([inner, rec(30, 0)])
    assert outer["records"] == 3 and len(outer["ordinals"]) == 3
    assert outer["total_samples"] == 60 and outer["samples_per_sec"] == 60
    zero = merge_records([rec(30, 1) | {"total_time": 0}])
    assert zero["samples_per_sec"] == 0


def test_disagreeing_estimates_name_both() -> None:
    with pytest.raises(DataError, match=r"w0\.json says 500, w1\.json says 600"):
        merge_records([rec(1, 1, 500), rec(1, 1, 600)], ["w0.json", "w1.json"])
    with pytest.raises(DataError):
        merge_records([])
    assert math.isnan(merge_records([rec(1, 1, math.nan)])["est_samples_per_sec"])


def test_files(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(rec(100, 4)))
    b.write_text(json.dumps(rec(300, 5)))
    merged = merge_files([a, b])
    assert merged["samples_per_sec"] == 80  # 400 / 5
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DataError, match=r"bad\.json"):
        read_record(bad)
    with pytest.raises(DataError, match=r"missing\.json: file not found"):
        read_record(tmp_path / "missing.json")
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"total_samples": 1}))
    with pytest.raises(DataError, match=r"partial\.json: missing field.*total_time"):
        read_record(partial)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(rec(1, 1) | {"total_time": "soon"}))
    with pytest.raises(DataError, match="total_time is not a finite number"):
        read_record(wrong)
    listy = tmp_path / "list.json"
    listy.write_text("[]")
    with pytest.raises(DataError, match="expected a JSON object"):
        read_record(listy)


HOSTILE = {
    "infinity": '{"total_samples": 1, "total_time": Infinity}',
    "nan": '{"total_samples": NaN, "total_time": 1}',
    "1e400": '{"total_samples": 1e400, "total_time": 1}',
    "huge-int": '{"total_samples": 1' + "0" * 400 + ', "total_time": 1}',
    "giant-int": '{"total_samples": 1' + "0" * 5000 + ', "total_time": 1}',
    "deep": '{"total_samples": 1, "total_time": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "ordinals-text": '{"total_samples": 1, "total_time": 1, "ordinals": ["a", "b"]}',
    "ordinals-nan": '{"total_samples": 1, "total_time": 1, "ordinals": [{"total_time": "x"}]}',
    "ordinals-bool": '{"total_samples": 1, "total_time": 1, "ordinals": [true]}',
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_merge_performance_rejects_hostile_files_in_one_line(case: str, tmp_path: Path) -> None:

    from itwin_report.cli import main

    good, bad = tmp_path / "good.json", tmp_path / f"{case}.json"
    good.write_text(json.dumps(rec(10, 1)))
    bad.write_text(HOSTILE[case])
    out = tmp_path / "merged.json"
    result = cli_runner().invoke(main, ["merge-performance", str(good), str(bad), "-o", str(out)])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and f"{case}.json" in lines[0]
    assert "unexpected" not in lines[0] and not out.exists()


def test_merged_output_is_strict_json_with_null_for_unknown(tmp_path: Path) -> None:

    from itwin_report.cli import main

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(rec(100, 4) | {"est_samples_per_sec": None, "ordinals": [0]}))
    b.write_text(json.dumps(rec(300, 5) | {"est_samples_per_sec": None}))
    result = cli_runner().invoke(main, ["merge-performance", str(a), str(b)])
    assert result.exit_code == 0, result.output

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} written")

    merged = json.loads(result.stdout, parse_constant=refuse)
    assert merged["est_samples_per_sec"] is None and merged["total_samples"] == 400
    assert merged["records"] == 2 and merged["ordinals"][0] == 0


def test_the_merge_does_not_depend_on_the_order() -> None:
    records = [
        rec(0.1, 10.0, est=500.0, compile_time=3.0),
        rec(0.2, 12.5, est=500.0 * (1 + 1e-12), suspected_input_bottleneck=True),
        rec(0.3, 11.0, est=500.0, programming_time=9.0),
    ]
    names = ["w0.json", "w1.json", "w2.json"]
    outputs = {
        to_json(merge_records([records[i] for i in order], [names[i] for i in order]))
        for order in itertools.permutations(range(3))
    }
    assert len(outputs) == 1  # all 6 orders give the same bytes
    merged = json.loads(outputs.pop())
    # fsum: exactly 0.6, where 0.1 + 0.2 + 0.3 summed in this order gives 0.6000000000000001
    assert merged["total_samples"] == 0.6 != 0.1 + 0.2 + 0.3
    assert merged["total_time"] == 12.5 and merged["samples_per_sec"] == 0.6 / 12.5
    assert merged["est_samples_per_sec"] == 500.0  # the smallest of the agreeing estimates
    assert (merged["compile_time"], merged["programming_time"]) == (3.0, 9.0)
    assert merged["suspected_input_bottleneck"] is True
    assert sorted(o["total_time"] for o in merged["ordinals"]) == [10.0, 11.0, 12.5]


def test_disagreeing_estimates_are_named_the_same_way_in_any_order() -> None:
    a, b = rec(1, 1, 600), rec(1, 1, 500)
    messages = set()
    for pair, names in (((a, b), ["a", "b"]), ((b, a), ["b", "a"])):
        with pytest.raises(DataError) as info:
            merge_records(list(pair), names)
        messages.add(str(info.value))
    assert messages == {"est_samples_per_sec disagrees: b says 500, a says 600"}


def test_command_output_is_the_same_for_both_orders(tmp_path: Path) -> None:
    from itwin_report.cli import main

    w0, w1 = tmp_path / "w0.json", tmp_path / "w1.json"
    w0.write_text(json.dumps(rec(1000, 20.0)))
    w1.write_text(json.dumps(rec(1200, 24.0)))
    texts = []
    for files in ((w0, w1), (w1, w0)):
        result = cli_runner().invoke(main, ["merge-performance", *map(str, files)])
        assert result.exit_code == 0, result.output
        texts.append(result.stdout)
    assert texts[0] == texts[1]
    merged = json.loads(texts[0])
    assert merged["total_time"] == 24.0 and merged["samples_per_sec"] == 2200 / 24.0


def test_merge_output_never_overwrites_an_input_or_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from itwin_report.cli import main

    w0 = tmp_path / "w0.json"
    w0.write_text(json.dumps(rec(1000, 20.0)))
    db = tmp_path / "mlflow.db"
    db.write_bytes(b"SQLite format 3\x00" + bytes(100))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    for target, why in (
        (w0, f"would overwrite the input {w0}"),
        (db, "would write into the tracking store"),
        (Path(f"{db}-journal"), "would write into the tracking store"),
    ):
        result = cli_runner().invoke(main, ["merge-performance", str(w0), "-o", str(target)])
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(f"Error: --output {target} {why}")
        assert result.stderr.count("\n") == 1
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
