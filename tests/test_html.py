"""The HTML page: read back with html.parser, tables equal to the JSON report, offline, safe."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from conftest import cli_runner
from test_report_builders import make_data, metric, profile, run

from itwin_report import __version__
from itwin_report.cli import main
from itwin_report.render import render
from itwin_report.render.html import (
    PageContext,
    PagePlots,
    page_context,
    page_plots,
    page_time,
    render_html,
)
from itwin_report.report import build_report
from itwin_report.report.specs import TABLES
from itwin_report.util.notes import Note

REPORT = "generate-scalability-report"
WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
# names a page must show as text: markup, event handlers, a table breaker, a script link
# (each payload, if it ever ran, would mark the DOM: a browser test looks for "pwned")
HOSTILE = (
    "<script>document.title='pwned'</script>",
    "<img src=x onerror=document.body.classList.add('pwned1')>",
    "\"><svg onload=document.body.classList.add('pwned2')>",
    "</table><b>bold</b>",
    "javascript:document.body.classList.add('pwned3')",
)
HOSTILE_EXPERIMENT = "<i>exp</i> & 'co'"
# what a page may contain: the page's own elements and what matplotlib writes into SVG
ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "main", "header", "section", "div",
    "h1", "h2", "h3", "h4", "p", "ul", "li", "dl", "dt", "dd", "code", "table", "thead",
    "tbody", "tr", "th", "td", "figure",
    "svg", "defs", "g", "path", "text", "clippath", "rect", "use", "pattern",
}  # fmt: skip


class Page(HTMLParser):
    """Elements, text, and the tables (id -> header and rows of cell texts) of a page."""

    def __init__(self, source: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.texts: list[str] = []
        self.tables: dict[str, list[list[str]]] = {}
        self.section_ids: list[str] = []
        self.title = ""
        self._table: str | None = None
        self._cell: list[str] | None = None
        self._stack: list[str] = []
        self.feed(source)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        self._stack.append(tag)
        if tag == "section":
            self.section_ids.append(str(attributes.get("id")))
        if tag == "table":
            self._table = str(attributes.get("id"))
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if self._stack:
            self._stack.pop()
        if tag in ("td", "th") and self._table and self._cell is not None:
            self.tables[self._table][-1].append("".join(self._cell))
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._stack and self._stack[-1] == "style":
            return
        if self._stack and self._stack[-1] == "title":
            self.title += data
        self.texts.append(data)
        if self._cell is not None:
            self._cell.append(data)


NUMBER = re.compile(r"^~?(-?\d+(?:\.(\d+))?)(?: ?(s|x|%|Wh|W))?$")  # ~: an estimate


def check_cell(cell: str, value: Any, column: str) -> None:
    """A cell shows the JSON value, to the precision it prints."""
    if value is None:
        assert cell == "n/a", (column, cell)
    elif isinstance(value, bool):
        assert cell == ("yes" if value else "no"), (column, cell)
    elif isinstance(value, str):
        assert cell == value, (column, cell)
    elif isinstance(value, int) and column in ("workers", "runs", "epochs"):
        assert cell == str(value), (column, cell)
    else:
        match = NUMBER.match(cell)
        assert match, (column, cell)
        shown = float(match.group(1))
        places = len(match.group(2) or "")
        expected = float(value)
        if match.group(3) == "%" and (column.endswith(("fraction", "efficiency"))):
            expected *= 100
        assert abs(shown - expected) <= 0.5 * 10**-places + 1e-9, (column, cell, value)


def compare_tables(page: Page, doc: dict[str, Any]) -> int:
    """Every table of the page against the JSON report; returns the cells compared."""
    compared = 0
    for spec in TABLES:
        records = doc[spec.name]
        if not records:
            assert f"table-{spec.name}" not in page.tables
            continue
        header, *rows = page.tables[f"table-{spec.name}"]
        # an optional column (Compute (traces)) is printed when some row has a value
        shown = [
            c
            for c in spec.shown
            if not c.optional or any(rec[c.key] is not None for rec in records)
        ]
        assert header == [col.header for col in shown]
        assert len(rows) == len(records)
        for row, rec in zip(rows, records, strict=True):
            for cell, col in zip(row, shown, strict=True):
                check_cell(cell, rec[col.key], col.name)
                compared += 1
    return compared


def invoke(*args: str) -> tuple[int, str, str]:
    result = cli_runner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def pages(scaling_sqlite: tuple[str, dict], tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The sample store's report as an HTML page (with --html) and as JSON."""
    uri, _ = scaling_sqlite
    out = tmp_path_factory.mktemp("html")
    common = (REPORT, "--tracking-uri", uri, "-e", "scaling", "--include-unfinished")
    code, stdout, stderr = invoke(*common, "--html", str(out / "r.html"), "--plot-dir", str(out))
    assert code == 0, stderr
    code_json, doc, _ = invoke(*common, "--format", "json", "--no-plots", "-q")
    assert code_json == 0
    return {
        "html": (out / "r.html").read_text(encoding="utf-8"),
        "json": json.loads(doc),
        "stdout": stdout,
        "stderr": stderr,
        "uri": uri,
    }


def test_every_cell_equals_the_json_report(pages: dict) -> None:
    page = Page(pages["html"])
    compared = compare_tables(page, pages["json"])
    assert compared > 50
    assert pages["stdout"].startswith("Scalability report")  # --html keeps the console output


def test_page_reads_top_to_bottom(pages: dict) -> None:
    page = Page(pages["html"])
    assert page.section_ids == [
        "summary", "epoch_time", "gpu", "cost", "computation", "throughput", "time_breakdown",
        "scaling_models", "karp_flatt", "scaling-analysis", "pareto", "recommendation",
        "warnings", "methods",
    ]  # fmt: skip
    text = " ".join(" ".join(page.texts).split())
    assert "Scalability report: scaling" in text
    assert f"Tracking store {pages['uri']}" in text
    assert f"Tool itwin-report {__version__}" in text
    # conftest's store: 10 kept worker runs in 7 jobs; 2 malformed + 1 unfinished skipped
    # (with --include-unfinished the running job's killed worker is kept)
    assert re.search(r"Runs read \d+ worker runs in \d+ jobs", text)
    assert "Methods" in text and "Columns" in text
    # every warning of the JSON report is on the page
    for warning in pages["json"]["warnings"]:
        assert " ".join(warning.split()) in text
    # one inline SVG per plot written next to it, and the plots stay text
    svgs = [t for t, _ in page.tags if t == "svg"]
    assert len(svgs) == int(re.search(r"Wrote (\d+) plots", pages["stderr"]).group(1))
    assert "Workers (GPUs)" in page.texts


def test_offline_and_script_free(pages: dict) -> None:
    page = Page(pages["html"])
    metas = [a for t, a in page.tags if t == "meta" and a.get("http-equiv")]
    assert metas and metas[0]["http-equiv"] == "Content-Security-Policy"
    csp = str(metas[0]["content"])
    assert "default-src 'none'" in csp and "script-src" not in csp
    assert {t for t, _ in page.tags} <= ALLOWED_TAGS
    for tag, attrs in page.tags:
        assert not [k for k in attrs if k.startswith("on")], tag
        for key in ("src", "href", "action", "srcset", "poster", "data"):
            assert key not in attrs, (tag, key)
        link = attrs.get("xlink:href")
        assert link is None or link.startswith("#"), link
    assert "@import" not in pages["html"] and not re.search(r"url\((?!#)", pages["html"])


def test_summary_answers_first_from_hand_worked_values() -> None:
    # ddp: 40, 20, 10 s at 4, 8, 16 workers (linear); ds: 62.5, 31.25 s at 4, 8 (1.5625x slower)
    runs, metrics, profs = [], [], []
    for strategy, counts, t4 in (("ddp", [4, 8, 16], 40.0), ("ds", [4, 8], 62.5)):
        for w in counts:
            rid = f"{strategy}{w}"
            runs.append(run(rid, rid, strategy, w))
            metrics += metric(rid, "epoch_time_s", [2 * t4 * 4 / w] + [t4 * 4 / w] * 2)
            metrics += metric(rid, "gpu_power_W", [100 * w] * 36)
            profs += profile(rid, [("aten::mm", 70), ("nccl:all_reduce", 20), ("other", 10)])
    rep = build_report(make_data(runs, metrics, profs))
    html = render_html(rep, PageContext("9.9", WHEN, 5, 5, 0))
    page = Page(html)
    summary = html.split('id="summary"')[1].split("</section>")[0]
    items = [" ".join(" ".join(Page(li).texts).split()) for li in summary.split("<li>")[1:]]
    # energy per run: 36 samples x 100*w W x 1 s / 3600 = w Wh on the one GPU that logged,
    # scaled to the job's w GPUs: w*w Wh over 3 epochs -> w*w/3 Wh per epoch, an estimate (~).
    # The front: ddp-16 (10 s, 85.33 Wh), ddp-8 (20 s, 21.33 Wh), ddp-4 (40 s, 5.33 Wh); from
    # ddp-4 to ddp-8: +100 % speed for +300 % energy, refused: the knee is ddp-4
    stops = rep.time_breakdown.set_index(["strategy", "workers"]).loc[("ddp", 16), "bound_by"]
    assert items == [
        "Use ddp on 4 GPUs: 40.00 s and ~5.33 Wh per epoch, the knee of the time–energy front "
        "(see Time–energy Pareto front)",
        "ddp scales to 16 GPUs at 100.0 % epoch-time efficiency, speedup 4.00x over 4 workers; "
        "100.0 % at 4 GPUs (see Epoch time)",
        f"What stops ddp at 16 GPUs: {stops} (see Where the time goes)",
        # no performance.json: the epochs only, 4 x (80 + 40 + 40) s / 3600 = 0.178 GPU-h
        "Book ddp on 4 GPUs: 0.178 GPU-hours per run, its epochs only (no wall time logged) "
        "(see Cost per configuration)",
    ]
    text = " ".join(" ".join(page.texts).split())
    # the details, each under its table and said once: ds's efficiency (ddp's is on top)
    assert (
        "ds reaches 100.0 % epoch-time efficiency at 8 workers (speedup 2.00x over 4 workers)."
        in text
    )
    assert text.count("epoch-time efficiency at 16 workers") == 0
    assert (
        "Energy per epoch for ddp goes from ~5.33 Wh at 4 workers to ~85.33 Wh at 16 workers"
        in text
    )
    assert "(16.00x)" in text
    assert "Bases in this report: ddp 4 workers, ds 4 workers." in text
    assert "Generated 2026-01-02T03:04:05+00:00" in text and "itwin-report 9.9" in text
    assert "Runs read 5 worker runs in 5 jobs" in text and "Runs skipped none" in text
    # the same lines in the same order in the terminal, markdown and JSON
    plain = render(rep, "table")
    top = plain.split("Summary:\n")[1].split("\n\n")[0].splitlines()
    assert top == [f"- {item}" for item in items]
    assert render(rep, "markdown").count("Use ddp on 4 GPUs: 40.00 s") == 1
    records = json.loads(render(rep, "json"))["summary"]
    assert [r["text"] for r in records[:4]] == items
    assert [(r["kind"], r["table"]) for r in records] == [
        ("strategy", "pareto"),
        ("scaling", "epoch_time"),
        ("limit", "time_breakdown"),
        ("booking", "cost"),
        ("detail", "epoch_time"),
        ("detail", "gpu"),
        ("detail", "gpu"),
    ]


def test_within_noise_names_every_overlapping_strategy() -> None:
    # two jobs per configuration: ddp 10 and 12 s (mean 11), hvd 11 and 13 s (mean 12), ds 10.5
    # and 12.5 s (11.5), mx 30 and 30.2 s: half-width t(1) 12.706 x 1.414 / 1.414 = 12.7 s for
    # the first three, so hvd and ds overlap ddp's [-1.7, 23.7] and mx (30.1 +- 1.27) does not
    runs, metrics = [], []
    times = {"ddp": (10.0, 12.0), "hvd": (11.0, 13.0), "ds": (10.5, 12.5), "mx": (30.0, 30.2)}
    for strategy, pair in times.items():
        for i, t in enumerate(pair):
            rid = f"{strategy}-{i}"
            runs.append(run(rid, rid, strategy, 2))
            metrics += metric(rid, "epoch_time_s", [t, t, t])
    rep = build_report(make_data(runs, metrics))
    text = " ".join(" ".join(Page(render_html(rep, PageContext("1", WHEN))).texts).split())
    assert (
        "Fastest strategy at 2 GPUs: within noise (ddp has the lowest mean; the 95 % intervals "
        "of ds and hvd overlap its own)" in text
    )


def test_fastest_only_when_intervals_separate() -> None:
    # three jobs each: ddp 10, 10.2, 9.8 s (mean 10, sd 0.2); hvd 20, 20.4, 19.6 s (mean 20,
    # sd 0.4). 95 % intervals with t(2) = 4.303: ddp 10 +- 0.50, hvd 20 +- 0.99: they separate.
    runs, metrics = [], []
    for strategy, times in (("ddp", (10.0, 10.2, 9.8)), ("hvd", (20.0, 20.4, 19.6))):
        for i, t in enumerate(times):
            rid = f"{strategy}-{i}"
            runs.append(run(rid, rid, strategy, 2))
            metrics += metric(rid, "epoch_time_s", [t, t, t])
    rep = build_report(make_data(runs, metrics))
    text = " ".join(" ".join(Page(render_html(rep, PageContext("1", WHEN))).texts).split())
    assert "Fastest strategy at 2 GPUs: ddp" in text
    assert "Fastest strategy at 2 GPUs: within noise" not in text


@pytest.fixture(scope="module")
def hostile_page(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real store whose experiment, strategies and run names are markup; its page."""
    root = tmp_path_factory.mktemp("hostile")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    build_hostile_store(uri)
    out = root / "hostile.html"
    code, _, err = invoke(
        REPORT, "--tracking-uri", uri, "-e", HOSTILE_EXPERIMENT, "-q", "--no-plots",
        "--format", "html", "-o", str(out),
    )  # fmt: skip
    assert code == 0, err
    return out.read_text(encoding="utf-8")


def build_hostile_store(uri: str) -> None:
    """Two worker counts per hostile strategy name; run names hostile too."""
    from itwin_report.emulator import mlflow_writer

    w = mlflow_writer.RunWriter(uri)
    exp = w.experiment_id(HOSTILE_EXPERIMENT, mlflow_writer.artifact_location(uri, "h"))
    t = 1_700_000_000_000
    for i, strategy in enumerate(HOSTILE):
        for size in (2, 4):
            top = w.create_run(exp, f"{HOSTILE[(i + 1) % len(HOSTILE)]}-{size}", t)
            worker = w.create_run(exp, HOSTILE[i], t, parent_run_id=top)
            points = [("epoch_time_s", 20.0 / size + i, t + s * 1000, s) for s in range(3)]
            points += [("gpu_power_W", 100.0, t + s * 1000, s) for s in range(3)]
            params = {"strategy": strategy, "global_rank": 0, "global_world_size": size}
            w.log_batch(worker, points, {**params, "probing_interval": 1})
            w.end_run(worker, t + 10_000)
            w.end_run(top, t + 11_000)
            t += 20_000


def test_hostile_names_are_text(hostile_page: str) -> None:
    page = Page(hostile_page)
    assert {t for t, _ in page.tags} <= ALLOWED_TAGS
    assert not [t for t, _ in page.tags if t in ("script", "img", "b", "i", "a", "iframe")]
    assert all(not k.startswith("on") for _, attrs in page.tags for k in attrs)
    assert not any("javascript:" in str(v) for _, attrs in page.tags for v in attrs.values())
    texts = page.texts
    cells = [c for rows in page.tables.values() for row in rows for c in row]
    for name in HOSTILE:
        assert name in cells  # table cells, literal
        assert name in texts  # SVG legend text, literal
    assert f"Scalability report: {HOSTILE_EXPERIMENT}" in texts
    # the epoch table has one row per (strategy, workers), none split by "</table>"
    header, *rows = page.tables["table-epoch_time"]
    assert len(rows) == 2 * len(HOSTILE) and all(len(r) == len(header) for r in rows)


def test_secrets_masked_and_warnings_kept() -> None:
    data = make_data(
        [run("a", "a", "ddp", 2)],
        metric("a", "epoch_time_s", [3.0, 2.0]),
        warnings=[
            Note("skipped 3 unfinished runs of x", kind="skipped", runs=3),
            Note("skipped worker y: no params", kind="skipped", runs=1),
            "<b>odd</b>",
        ],
    )
    data.tracking_uri = "https://user:hunter2@example.org/mlflow?token=abc&x=1"
    rep = build_report(data)
    context = page_context(data, "1.0", WHEN)
    assert (context.worker_runs, context.jobs, context.skipped) == (1, 1, 4)
    html = render_html(rep, context, page_plots(rep))
    assert "hunter2" not in html and "token=abc" not in html
    text = " ".join(" ".join(Page(html).texts).split())
    assert "https://user:***@example.org/mlflow?token=***&x=1" in text
    assert "Runs skipped 4 (see warnings)" in text and "<b>odd</b>" in text


def test_missing_plots_are_stated(tmp_path: Path) -> None:
    rep = build_report(make_data([run("a", "a", "ddp", 2)], metric("a", "epoch_time_s", [3, 2])))
    html = render_html(rep, PageContext("1", WHEN), page_plots(rep))
    text = " ".join(" ".join(Page(html).texts).split())
    assert "Plot gpu energy not drawn: no GPU metrics." in text
    assert "Plot rates not drawn: no run logged Rate/GlobalRate metrics." in text
    assert "No GPU data found." in text
    # same report, same date: the same bytes (SVG ids and metadata carry no randomness or clock)
    assert render_html(rep, PageContext("1", WHEN), page_plots(rep)) == html


def test_cli_format_html_and_not_drawn_message(scaling_sqlite: tuple[str, dict], tmp_path: Path):
    uri, _ = scaling_sqlite
    out = tmp_path / "page.html"
    code, stdout, stderr = invoke(
        REPORT, "--tracking-uri", uri, "-e", "scaling", "--format", "html", "-o", str(out),
        "--plot-dir", str(tmp_path / "plots"),
    )  # fmt: skip
    assert code == 0 and stdout == ""
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    # the sample store logs no Rate metrics: the message says which plot is missing and why
    assert "not drawn: rates: no run logged Rate/GlobalRate metrics" in stderr
    assert not (tmp_path / "plots" / "rates.png").exists()
    code, _, stderr = invoke(
        REPORT, "--tracking-uri", uri, "-e", "scaling", "--no-plots", "-q",
        "--html", str(tmp_path / "missing-dir" / "p.html"),
    )  # fmt: skip
    assert code == 1 and stderr.startswith("Error: cannot write") and "Traceback" not in stderr


def test_page_modules_stay_light() -> None:
    import subprocess
    import sys

    code = (
        "import sys, itwin_report.render.html, itwin_report.plots, itwin_report.render.summary\n"
        "heavy = ('mlflow', 'pandas', 'matplotlib', 'numpy')\n"
        "print(','.join(m for m in heavy if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == ""


def test_page_date_is_injected() -> None:
    assert page_time({"SOURCE_DATE_EPOCH": "86400"}) == datetime(1970, 1, 2, tzinfo=UTC)
    before = datetime.now(UTC)
    assert before <= page_time({"SOURCE_DATE_EPOCH": "soon"}) <= datetime.now(UTC)


def test_html_never_overwrites_the_store(tmp_path: Path) -> None:
    from itwin_report.emulator import mlflow_writer

    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    w = mlflow_writer.RunWriter(uri)
    w.experiment_id("e", mlflow_writer.artifact_location(uri, "e"))
    before = db.read_bytes()
    code, _, err = invoke(REPORT, "--tracking-uri", uri, "-e", "e", "--html", str(db), "-q")
    assert code == 2 and err.startswith("Error:") and "--html" in err
    assert db.read_bytes() == before


# ---- cost linear in the size of store values; outputs published as one set ----


class _Scanned:
    """One of the masker's patterns, counting the characters it is given to scan."""

    def __init__(self, pattern: re.Pattern[str], count: list[int]) -> None:
        self.pattern, self.count = pattern, count

    def sub(self, repl: Any, text: str) -> str:
        self.count[0] += len(text)
        return self.pattern.sub(repl, text)


def _long_name_page(
    size: int, monkeypatch: pytest.MonkeyPatch, plots: bool = True
) -> tuple[str, int, str]:
    """The page of two strategies, one named with ``size`` characters (with its plots, or
    none); the characters the masker scanned while building and rendering it."""
    from itwin_report.util import masking

    count = [0]
    for pattern in ("_USERINFO", "_QUERY_PAIR", "_BEARER"):
        monkeypatch.setattr(masking, pattern, _Scanned(getattr(masking, pattern), count))
    name = "n" * size
    runs, metrics = [], []
    for strategy in (name, "ddp"):
        for w in (2, 4, 8):
            rid = f"{strategy[:3]}{w}"
            runs.append(run(rid, rid, strategy, w))
            metrics += metric(rid, "epoch_time_s", [9.0, 8.0 / w, 8.0 / w])
            metrics += metric(rid, "gpu_power_W", [100.0] * 4)
    data = make_data(runs, metrics)
    rep = build_report(data, predict_workers=[32])
    drawn = page_plots(rep) if plots else PagePlots()
    html = render_html(rep, page_context(data, "1", WHEN), drawn)
    return html, count[0], name


def test_page_with_a_100_kb_name_costs_work_linear_in_its_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 100 kB strategy name: the page (tables, plots, summary) stays small, the name shown
    shortened, and the text scanned for secrets grows with the name's size, no faster (it took
    over 600 s when every value was shown and masked whole). Its time is measured by
    ``bench/bench_limits.py``, never asserted here."""
    from itwin_report.util.escape import ELLIPSIS, MAX_LINE, MAX_SHOWN

    html, scanned, _ = _long_name_page(100_000, monkeypatch)
    assert len(html) < 400_000
    runs_shown = [len(m) for m in re.findall("n{100,}" + ELLIPSIS + "?", html)]
    assert max(runs_shown) <= MAX_LINE and runs_shown.count(MAX_SHOWN) >= 3, runs_shown
    # each of the three patterns scans the name a bounded number of times (about 55 today)
    assert scanned < 3 * 100 * 100_000, scanned
    # work linear in the size (pages without plots): twice the name, about twice the scanning
    big_html, big, _ = _long_name_page(100_000, monkeypatch, plots=False)
    small_html, small, _ = _long_name_page(50_000, monkeypatch, plots=False)
    assert abs(len(big_html) - len(small_html)) < 1_000  # the page does not grow with the name
    assert small < big <= 2 * small + 100_000, (big, small)


def _outputs(tmp_path: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(tmp_path)): p.read_bytes()
        for p in sorted(tmp_path.rglob("*"))
        if p.is_file() and "store" not in p.parts
    }


def test_plots_of_an_earlier_report_are_removed(scaling_sqlite: tuple[str, dict], tmp_path: Path):
    """The sample store has no Rate metrics and no --predict here: a rates.png and a
    prediction.png from an earlier report go; files of other names or formats stay."""
    uri, _ = scaling_sqlite
    plots = tmp_path / "plots"
    plots.mkdir()
    for name in ("prediction.png", "rates.png", "notes.txt", "prediction.svg", "x.png"):
        (plots / name).write_text("from before")
    code, _, err = invoke(REPORT, "--tracking-uri", uri, "-e", "scaling", "--plot-dir", str(plots))
    assert code == 0, err
    names = {p.name for p in plots.iterdir()}
    assert {"notes.txt", "prediction.svg", "x.png", "speedup.png"} <= names
    assert not {"prediction.png", "rates.png"} & names
    assert not any(name.startswith(".") for name in names)
    drawn = int(re.search(r"Wrote (\d+) plots", err).group(1))
    assert len([n for n in names if n.endswith(".png")]) == drawn + 1  # + x.png


def test_outputs_are_published_as_one_set(
    scaling_sqlite: tuple[str, dict], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that fails while drawing the plots leaves the page, the report and the plots of
    the previous run exactly as they were: none of the new files is moved into place."""
    from itwin_report.plots import output

    uri, _ = scaling_sqlite
    args = (
        REPORT, "--tracking-uri", uri, "-e", "scaling", "-q", "--format", "json",
        "-o", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html"),
        "--plot-dir", str(tmp_path / "plots"),
    )  # fmt: skip
    code, _, err = invoke(*args, "--warmup-epochs", "0")
    assert code == 0, err
    before = _outputs(tmp_path)
    assert {"r.json", "r.html", "plots/speedup.png"} <= set(before)

    def fail(*_args: Any, **_kwargs: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(output, "write_figure", fail)
    code, out, err = invoke(*args, "--warmup-epochs", "1")
    assert code == 1 and out == ""
    assert err.startswith("Error: cannot write plots to") and "No space left" in err
    assert len(err.strip().splitlines()) == 1
    assert _outputs(tmp_path) == before  # no new page beside old plots, no temporary file


def test_stdout_on_a_full_disk_is_one_line(scaling_sqlite: tuple[str, dict]) -> None:
    import subprocess
    import sys

    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    uri, _ = scaling_sqlite
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "itwin_report", REPORT, "--tracking-uri", uri, "-e", "scaling",
             "-q", "--no-plots"],
            stdout=full, stderr=subprocess.PIPE, text=True, timeout=300,
        )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == ["Error: cannot write to stdout: No space left on device"]
