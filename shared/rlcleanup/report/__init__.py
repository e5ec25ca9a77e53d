"""Completion-record reports: a one-line verdict, then the evidence, as Markdown and self-contained HTML, with a
chain timeline picture (PNG + inline SVG). `publish_report` is the pipeline's hook after selection."""

from rlcleanup.report.inputs import ReportInputs, load_inputs
from rlcleanup.report.publish import RenderedReport, publish_report, render_report, write_report

__all__ = ["RenderedReport", "ReportInputs", "load_inputs", "publish_report", "render_report", "write_report"]
