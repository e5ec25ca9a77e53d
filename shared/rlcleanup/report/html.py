"""Document -> one self-contained HTML page: inline CSS, the timeline as inline SVG, no external requests.

The Content-Security-Policy forbids every fetch, so a report opened from a bucket or a chat attachment renders
the same offline and cannot phone home.
"""

from __future__ import annotations

from html import escape

from rlcleanup.report.document import Block, Bullets, Code, Document, Figure, Para, Table

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

CSS = """
:root { --good: #1b5e20; --good-bg: #e8f5e9; --warn: #8a5300; --warn-bg: #fff4e0; --bad: #b00020;
  --bad-bg: #fdecee; --ink: #1d1d1f; --muted: #5f6368; --rule: #e0e0e0; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
  background: #fafafa; }
main, header, nav, footer { max-width: 1100px; margin: 0 auto; padding: 0 24px; }
header.verdict { margin-top: 24px; padding: 18px 24px; border-radius: 10px; border-left: 8px solid; }
header.good { background: var(--good-bg); border-color: var(--good); }
header.warn { background: var(--warn-bg); border-color: var(--warn); }
header.bad { background: var(--bad-bg); border-color: var(--bad); }
header h1 { margin: 0 0 6px; font-size: 15px; font-weight: 600; color: var(--muted); }
.line { margin: 0; font-size: 19px; font-weight: 600; }
.part.good { color: var(--good); } .part.warn { color: var(--warn); } .part.bad { color: var(--bad); }
.sep { color: var(--muted); padding: 0 4px; }
nav { margin: 14px auto; font-size: 13px; } nav a { margin-right: 14px; color: #1a5fb4; }
section { background: #fff; border: 1px solid var(--rule); border-radius: 8px; padding: 4px 20px 14px;
  margin: 16px 0; }
h2 { font-size: 17px; margin: 14px 0 10px; }
p.good { color: var(--good); } p.warn { color: var(--warn); } p.bad { color: var(--bad); font-weight: 600; }
ul.bad li { color: var(--bad); } ul.warn li { color: var(--warn); }
table { border-collapse: collapse; width: 100%; font-size: 13px; margin: 6px 0; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--rule); vertical-align: top;
  overflow-wrap: anywhere; }
th { background: #f3f3f3; font-weight: 600; }
pre { background: #f6f8fa; border: 1px solid var(--rule); border-radius: 6px; padding: 10px; overflow-x: auto;
  font-size: 12px; white-space: pre-wrap; overflow-wrap: anywhere; }
figure { margin: 8px 0; } figure svg { width: 100%; height: auto; display: block; }
figcaption { font-size: 12px; color: var(--muted); }
footer { color: var(--muted); font-size: 12px; padding-bottom: 32px; }
"""


def _block(block: Block, svg: str | None) -> str:
    if isinstance(block, Para):
        return f'<p class="{block.tone}">{escape(block.text)}</p>'
    if isinstance(block, Bullets):
        items = "".join(f"<li>{escape(item)}</li>" for item in block.items)
        return f'<ul class="{block.tone}">{items}</ul>'
    if isinstance(block, Code):
        return f"<pre><code>{escape(block.text)}</code></pre>"
    if isinstance(block, Table):
        head = "".join(f"<th>{escape(h)}</th>" for h in block.headers)
        rows = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in block.rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
    if isinstance(block, Figure):
        if svg is None:
            return f"<p>No timeline picture was rendered. {escape(block.caption)}</p>"
        return f'<figure class="timeline">{svg}<figcaption>{escape(block.caption)}</figcaption></figure>'
    raise TypeError(f"unknown block {type(block).__name__}")


def render_html(doc: Document, *, svg: str | None = None, footer: str = "") -> str:
    v = doc.verdict
    sep = '<span class="sep">·</span>'
    parts = sep.join(f'<span class="part {p.tone}" data-key="{p.key}">{escape(p.text)}</span>' for p in v.parts)
    nav = "".join(f'<a href="#{s.anchor}">{escape(s.title)}</a>' for s in doc.sections)
    sections = "".join(
        f'<section id="{s.anchor}"><h2>{escape(s.title)}</h2>'
        + "".join(_block(b, svg) for b in s.blocks)
        + "</section>"
        for s in doc.sections
    )
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f"<title>{escape(doc.title)}</title><style>{CSS}</style></head>\n"
        f'<body><header class="verdict {v.tone}"><h1>{escape(doc.title)}</h1>'
        f'<p class="line" id="verdict">{escape(v.run_id)}: {parts}</p></header>\n'
        f"<nav>{nav}</nav>\n<main>{sections}</main>\n<footer>{escape(footer)}</footer></body></html>\n"
    )
