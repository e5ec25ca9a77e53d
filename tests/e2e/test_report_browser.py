"""The report the pipeline leaves in the preserved location, opened in headless Chromium (Debian's `chromium`,
installed by `make test`): the page renders, the verdict banner and the inline SVG timeline are visible."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from rlcleanup.report.timeline import STATE_COLOURS
from rlcleanup.runtime.embedded import run_embedded
from rlcleanup.samples.generator import write_sample_run

pytestmark = pytest.mark.e2e

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
BAD_BANNER = (0xFD, 0xEC, 0xEE)  # header.bad background in report/html.py


def _screenshot(html: Path, png: Path, profile: Path) -> None:
    assert CHROMIUM is not None
    subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={profile}",
            f"--screenshot={png}",
            "--window-size=1200,2000",
            html.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )


def _count(image: Image.Image, colour: tuple[int, int, int], tol: int = 10) -> int:
    return sum(
        n
        for n, pixel in image.getcolors(maxcolors=1 << 24) or []
        if all(abs(a - b) <= tol for a, b in zip(pixel[:3], colour, strict=True))
    )


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (`make test` installs Debian's chromium)")
def test_report_html_renders_in_chromium(tmp_path: Path) -> None:
    root = write_sample_run(tmp_path / "src", "failed-first-link")
    record = run_embedded(str(root), db_path=tmp_path / "r.db", preserve_root=str(tmp_path / "p"))
    assert record is not None
    html = Path(record.preserved_locations[0]) / "derived" / "report.html"
    shot = tmp_path / "shot.png"
    _screenshot(html, shot, tmp_path / "profile")
    image = Image.open(shot).convert("RGB")
    assert image.size == (1200, 2000)
    colours = image.getcolors(maxcolors=1 << 24) or []
    assert len(colours) > 50  # text, tables and a picture: far from a blank page
    top = image.crop((0, 0, 1200, 200))
    assert _count(top, BAD_BANNER) > 20_000  # the red verdict banner of a failed run, at the top
    # The failed attempts' orange bars of the inline SVG timeline were drawn by the browser.
    assert _count(image, tuple(int(STATE_COLOURS["failed"][i : i + 2], 16) for i in (1, 3, 5))) > 2_000  # type: ignore[arg-type]
