"""Render a record into every report form, and write them beside the evidence (`<preserved>/derived/`).

Reports are derived and write-once like everything in the preserved location: a replay writes identical bytes
(`identical`), and a record that changed since gets a content-addressed name (`report-<sha>.md`) instead of
overwriting the earlier report or failing.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import asdict, dataclass
from typing import Any

from rlcleanup.errors import RunErrorCode
from rlcleanup.models.record import CompletionRecord, RunError
from rlcleanup.ports.records import RunRecords
from rlcleanup.ports.storage import Storage, WriteOutcome
from rlcleanup.report.build import build_document
from rlcleanup.report.document import Document
from rlcleanup.report.html import render_html
from rlcleanup.report.inputs import ReportInputs, load_inputs
from rlcleanup.report.markdown import render_markdown
from rlcleanup.report.timeline import TimelineImage, render_timeline
from rlcleanup.uris import join

log = logging.getLogger(__name__)
TIMELINE_PNG = "timeline.png"


@dataclass
class RenderedReport:
    document: Document
    timeline: TimelineImage | None
    record: CompletionRecord

    def markdown(self, image: str | None = None) -> str:
        return render_markdown(self.document, image=image if self.timeline else None)

    def html(self) -> str:
        footer = f"Rendered by rlcleanup from the completion record of {self.record.run_uri}."
        return render_html(self.document, svg=self.timeline.svg if self.timeline else None, footer=footer)

    def as_json(self) -> dict[str, Any]:
        return {
            "run_id": self.record.run_id,
            "verdict": self.document.verdict.line,
            "verdict_parts": [asdict(p) for p in self.document.verdict.parts],
            "verdict_tone": self.document.verdict.tone,
            "sections": [
                {
                    "title": s.title,
                    "anchor": s.anchor,
                    "blocks": [{"type": type(b).__name__.lower(), **asdict(b)} for b in s.blocks],
                }
                for s in self.document.sections
            ],
            "timeline_metric": self.timeline.metric if self.timeline else None,
        }


def render_report(inputs: ReportInputs, *, with_timeline: bool = True, every_row: bool = False) -> RenderedReport:
    timeline = render_timeline(inputs) if with_timeline else None
    document = build_document(inputs, with_figure=timeline is not None, every_row=every_row)
    return RenderedReport(document, timeline, inputs.record)


def _write(storage: Storage, dest: str, stem: str, ext: str, data: bytes, content_type: str) -> str:
    """Write `stem.ext`, or `stem-<sha12>.ext` when a different one is already there. Returns the name used."""
    name = f"{stem}{ext}"
    if storage.write_if_absent(join(dest, name), data, content_type) is not WriteOutcome.conflict:
        return name
    name = f"{stem}-{hashlib.sha256(data).hexdigest()[:12]}{ext}"
    if storage.write_if_absent(join(dest, name), data, content_type) is WriteOutcome.conflict:
        raise RuntimeError(f"{join(dest, name)} exists with different content despite its content-addressed name")
    return name


def write_report(storage: Storage, record: CompletionRecord, *, record_console: str | None = None) -> dict[str, str]:
    """Write report.md, report.html and timeline.png into the preserved location; returns kind -> URI.
    `record_console`: the record's page in the Firestore console, linked from the banner."""
    if not record.preserved_locations:
        return {}
    dest = join(record.preserved_locations[0], "derived")
    inputs = load_inputs(storage, record)
    inputs.record_console = record_console
    rendered = render_report(inputs)
    written: dict[str, str] = {}
    image = None
    if rendered.timeline is not None:
        image = _write(storage, dest, "timeline", ".png", rendered.timeline.png, "image/png")
        written["png"] = join(dest, image)
    md = _write(storage, dest, "report", ".md", rendered.markdown(image).encode(), "text/markdown; charset=utf-8")
    html = _write(storage, dest, "report", ".html", rendered.html().encode(), "text/html; charset=utf-8")
    written["md"], written["html"] = join(dest, md), join(dest, html)
    return written


def publish_report(
    storage: Storage, records: RunRecords, run_id: str, *, manifest_uri: str | None = None
) -> dict[str, str]:
    """The pipeline's hook after selection. Never raises: the record is the truth and a report can be re-made
    with `rlcleanup report RUN_ID --out DIR`; a failure is logged and recorded on the run instead.
    `manifest_uri`: the manifest the report will be listed in (sealed after it), named in the report."""
    try:
        record = records.get(run_id)
        if record is not None and manifest_uri is not None:
            record = record.model_copy(update={"manifest_uri": manifest_uri})
        console = records.console_url(run_id) if record is not None else None
        written = write_report(storage, record, record_console=console) if record is not None else {}
    except Exception as exc:
        log.warning("report for %s not written: %s: %s", run_id, type(exc).__name__, exc, extra={"run_id": run_id})
        message = (
            f"report not written ({type(exc).__name__}: {exc}); re-make it with `rlcleanup report {run_id} --out DIR`"
        )
        try:
            records.add_errors(
                run_id, [RunError(step="report", code=RunErrorCode.report_failed, message=message[:2000])]
            )
        except Exception:  # the store itself is failing: the warning above is all we can leave
            log.exception("could not record the report failure for %s", run_id, extra={"run_id": run_id})
        return {}
    if written:
        log.info("report for %s written to %s", run_id, written.get("html"), extra={"run_id": run_id})
        records.update(run_id, {"report_uri": written["html"]})  # the newest report, for `show` and the console
    return written
