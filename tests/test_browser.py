"""The HTML page in a real browser: headless Chromium builds its DOM, screenshots it, prints it.

Run by ``make test-browser`` (which installs Debian's ``chromium`` when missing), not by
``make test``: every test here carries the ``browser`` marker, deselected by default.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from test_html import HOSTILE, HOSTILE_EXPERIMENT, REPORT, Page, build_hostile_store, invoke

pytestmark = pytest.mark.browser

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
)
DEMO_PAGE_ENV = "ITWIN_REPORT_DEMO_PAGE"  # a page written by `make demo`; else one is emulated


@pytest.fixture(scope="module")
def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.fail(
            "chromium not found: `make test-browser` installs it (apt-get install chromium)"
        )
    return found


def browse(chromium: str, page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [chromium, *FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
            capture_output=True,
            text=True,
            timeout=180,
            check=True,
        )


def dom(chromium: str, page: Path) -> Page:
    """The DOM Chromium built (after any script would have run), parsed back."""
    return Page(browse(chromium, page, "--dump-dom").stdout)


def screenshot_stats(chromium: str, page: Path, out: Path) -> tuple[int, float]:
    """(distinct colours, share of non-white pixels) of a 1280 px wide screenshot."""
    from PIL import Image

    browse(chromium, page, f"--screenshot={out}", "--window-size=1280,2000")
    with Image.open(out) as image:
        rgb = image.convert("RGB")
        assert rgb.size == (1280, 2000)
        counts = rgb.getcolors(maxcolors=1280 * 2000) or []
    white = sum(n for n, colour in counts if colour == (255, 255, 255))
    return len(counts), 1 - white / (1280 * 2000)


@pytest.fixture(scope="module")
def demo_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get(DEMO_PAGE_ENV)
    if given:
        return Path(given)
    from itwin_report.emulator import EmulationOptions, run_emulation

    root = tmp_path_factory.mktemp("browser-demo")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    options = EmulationOptions(
        strategies=("deepspeed", "torch-ddp"), workers=(2, 4), epochs=3, repeats=2
    )
    run_emulation(options, uri)
    page = root / "report.html"
    code, _, err = invoke(
        REPORT, "--tracking-uri", uri, "-q", "--no-plots", "--format", "html", "-o", str(page)
    )
    assert code == 0, err
    return page


@pytest.fixture(scope="module")
def hostile_pages(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The hostile store's page, and the same page without its Content-Security-Policy."""
    root = tmp_path_factory.mktemp("browser-hostile")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    build_hostile_store(uri)
    page = root / "hostile.html"
    code, _, err = invoke(
        REPORT, "--tracking-uri", uri, "-e", HOSTILE_EXPERIMENT, "-q", "--no-plots",
        "--format", "html", "-o", str(page),
    )  # fmt: skip
    assert code == 0, err
    source = page.read_text(encoding="utf-8")
    bare = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", source)
    assert bare != source
    (root / "no-csp.html").write_text(bare, encoding="utf-8")
    return page, root / "no-csp.html"


def test_demo_page_renders(chromium: str, demo_page: Path, tmp_path: Path) -> None:
    built = dom(chromium, demo_page)
    assert built.section_ids[0] == "summary" and built.section_ids[-1] == "methods"
    assert len([t for t, _ in built.tags if t == "svg"]) >= 5
    assert built.tables["table-epoch_time"][0][0] == "Strategy"
    colours, inked = screenshot_stats(chromium, demo_page, tmp_path / "demo.png")
    assert colours > 50 and inked > 0.05  # text, tables and coloured plot lines, not a blank page


def test_demo_page_prints_on_a4(chromium: str, demo_page: Path, tmp_path: Path) -> None:
    pdf = tmp_path / "demo.pdf"
    browse(chromium, demo_page, f"--print-to-pdf={pdf}", "--no-pdf-header-footer")
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF")
    boxes = re.findall(rb"/MediaBox\s*\[\s*0 0 ([\d.]+) ([\d.]+)\s*\]", data)
    assert boxes and all(round(float(w)) == 595 and round(float(h)) == 842 for w, h in boxes)


@pytest.mark.parametrize("which", ["with CSP", "without CSP"])
def test_hostile_names_stay_text(
    chromium: str, hostile_pages: tuple[Path, Path], which: str, tmp_path: Path
) -> None:
    # without the CSP, escaping alone must keep every payload inert
    page = hostile_pages[0] if which == "with CSP" else hostile_pages[1]
    built = dom(chromium, page)
    tags = [t for t, _ in built.tags]
    assert not {"script", "img", "b", "i", "a", "iframe"} & set(tags)
    body = next(attrs for tag, attrs in built.tags if tag == "body")
    assert "pwned" not in str(body.get("class"))  # no handler ran
    assert built.title == f"Scalability report: {HOSTILE_EXPERIMENT}"  # the script did not run
    cells = [c for rows in built.tables.values() for row in rows for c in row]
    for name in HOSTILE:
        assert name in cells
    colours, inked = screenshot_stats(chromium, page, tmp_path / "hostile.png")
    assert colours > 10 and inked > 0.02


PROBE = (
    "<script>addEventListener('load', () => { document.title = 'scroll-width=' + "
    "document.documentElement.scrollWidth; });</script>"
)


@pytest.mark.parametrize("which", ["demo", "hostile"])
def test_no_horizontal_scrolling_at_1280px(
    chromium: str, demo_page: Path, hostile_pages: tuple[Path, Path], which: str, tmp_path: Path
) -> None:
    # a copy of the page with a probe script (and so without the CSP) reports its width
    source = (demo_page if which == "demo" else hostile_pages[1]).read_text(encoding="utf-8")
    source = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", source)
    probe = tmp_path / "probe.html"
    probe.write_text(source.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    built = Page(
        browse(
            chromium, probe, "--window-size=1280,900", "--virtual-time-budget=5000", "--dump-dom"
        ).stdout
    )
    assert built.title.startswith("scroll-width=")
    assert int(built.title.split("=")[1]) <= 1280
