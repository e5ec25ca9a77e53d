"""Write docs/img/report.png: the report of the `failed-first-link` sample run as headless Chromium draws it at
1280 px (the screenshot docs/operator.md shows). Needs `chromium` (`make chromium`).

    PYTHONPATH=shared .venv/bin/python scripts/report_screenshot.py [OUT.png]
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from rlcleanup.runtime.embedded import run_embedded
from rlcleanup.samples.generator import write_sample_run

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "docs" / "img" / "report.png"
    chromium = shutil.which("chromium")
    if chromium is None:
        sys.exit("chromium is not installed (`make chromium`)")
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        root = write_sample_run(base / "src", "failed-first-link")
        record = run_embedded(str(root), db_path=base / "r.db", preserve_root=str(base / "p"))
        if record is None or not record.preserved_locations:
            sys.exit("the sample run left no record")
        html = Path(record.preserved_locations[0]) / "derived" / "report.html"
        out.parent.mkdir(parents=True, exist_ok=True)
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars"]
        where = [f"--user-data-dir={base / 'profile'}", f"--screenshot={out.resolve()}", "--window-size=1280,1500"]
        subprocess.run(
            [chromium, *flags, *where, html.as_uri()],
            check=True,
            capture_output=True,
            timeout=120,
        )
    print(out)


if __name__ == "__main__":
    main()
