"""Rendering finished compare results: a report model, then HTML and Markdown renderers."""

from msprobe.compare.report.html import render_html
from msprobe.compare.report.markdown import render_markdown
from msprobe.compare.report.model import Report, build_report

__all__ = ["Report", "build_report", "render_html", "render_markdown"]
