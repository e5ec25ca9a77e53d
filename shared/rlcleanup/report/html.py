"""Document -> one self-contained HTML page: inline CSS, the timeline as inline SVG, no external requests.

The Content-Security-Policy forbids every fetch, so a report opened from a bucket or a chat attachment renders
the same offline and cannot phone home.
"""

from __future__ import annotations

import re
from html import escape

from rlcleanup.report.document import Block, Bullets, Code, Document, Figure, Para, Table
from rlcleanup.textsafe import neutralise

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
.facts { margin: 6px 0 0; font-size: 14px; overflow-wrap: anywhere; }
nav { margin: 14px auto; font-size: 13px; } nav a { margin-right: 14px; color: #1a5fb4; }
section { background: #fff; border: 1px solid var(--rule); border-radius: 8px; padding: 4px 20px 14px;
  margin: 16px 0; }
h2 { font-size: 17px; margin: 14px 0 10px; }
p.good { color: var(--good); } p.warn { color: var(--warn); } p.bad { color: var(--bad); font-weight: 600; }
ul.bad li { color: var(--bad); } ul.warn li { color: var(--warn); }
/* A table wider than its card scrolls inside the card, never past it; `position: relative` makes the wrapper the
   containing block of the hidden URI roots below (absolutely placed, they escaped the scroller and widened the page). */
.table { overflow-x: auto; margin: 6px 0; position: relative; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--rule); vertical-align: top;
  overflow-wrap: normal; word-break: normal; hyphens: none; }
th { background: #f3f3f3; font-weight: 600; }
td.num, th.num { white-space: nowrap; text-align: right; font-variant-numeric: tabular-nums; }
code.uri { font-size: 12px; }
tr.chosen td { background: #fff8d6; font-weight: 600; } tr.chosen td:first-child { color: #8a6d00; white-space: nowrap; }
/* The root a shortened URI dropped: not drawn, but laid out, so selecting and copying the cell copies the full URI
   (the CSP forbids scripts, so no copy handler). */
code.uri .root { position: absolute; width: 1px; height: 1px; overflow: hidden; clip-path: inset(50%);
  white-space: nowrap; }
details { margin: 6px 0; } summary { cursor: pointer; color: var(--muted); font-size: 13px; }
pre { background: #f6f8fa; border: 1px solid var(--rule); border-radius: 6px; padding: 10px; overflow-x: auto;
  font-size: 12px; white-space: pre-wrap; overflow-wrap: anywhere; }
/* The chart keeps a legible size on a phone (720 px: its labels at 3/4 of their size) and scrolls in its card. */
figure { margin: 8px 0; overflow-x: auto; } figure svg { width: 100%; min-width: 720px; height: auto; display: block; }
/* Prose (a cause, a reason, a log path) breaks a long token rather than push past its card; table cells do not. */
p, li, summary { overflow-wrap: anywhere; }
@media (max-width: 600px) {
  main, header, nav, footer { padding: 0 8px; }
  header.verdict { margin-top: 8px; padding: 10px 12px; border-left-width: 5px; }
  .line { font-size: 16px; } .sep { display: none; } .part { display: block; } .facts span { display: block; }
  section { padding: 2px 10px 10px; }
}
figcaption { font-size: 12px; color: var(--muted); }
footer { color: var(--muted); font-size: 12px; padding-bottom: 32px; }
"""


# A numeric column never wraps: counts, steps and step ranges, sizes ("133K"), "—" for none.
_NUMBER = re.compile(r"[—\d][\d.,:KMGTB%—]*(\.\.[—\d][\d.,]*)?( \([\d,]+ bytes\))?")
_URI = re.compile(r"(?:[a-z][a-z0-9+.-]*://|/)\S+")


def _num(numeric: bool) -> str:
    return ' class="num"' if numeric else ""


def _cell(text: str, root: str | None) -> str:
    """A URI or path: shortened relative to the table's root, full on hover (title) and on copy (the dropped root
    is in the page, laid out but not drawn), and breakable only after a `/` (<wbr>), never inside a name. Any other
    text wraps between words only."""
    if not _URI.fullmatch(text):
        return _inline(text)
    shown, dropped = text, ""
    if root and text.startswith(root.rstrip("/") + "/"):
        dropped = root.rstrip("/") + "/"
        shown = text[len(dropped) :]
    hidden = f'<span class="root">{escape(dropped)}</span>' if dropped else ""
    parts = "/<wbr>".join(escape(part) for part in shown.split("/"))
    return f'<code class="uri" title="{escape(text)}">{hidden}{parts}</code>'


_BACKTICKED = re.compile(r"`([^`\n]+)`")


def _inline(text: str) -> str:
    """Prose with its Markdown code spans (`rlcleanup grant ...`, the text Markdown shows as code) as <code>: the
    HTML shows no raw backticks (issue 47). Escaped first, so a span is data, never markup."""
    return _BACKTICKED.sub(r"<code>\1</code>", escape(text))


_WEB_LINK = re.compile(r"https://[^\s<>\"']+")


def _linked(text: str) -> str:
    """A banner fact with its https:// links clickable (a navigation, which the CSP does not forbid)."""
    out, at = [], 0
    for match in _WEB_LINK.finditer(text):
        url = match.group()
        out += [escape(text[at : match.start()]), f'<a href="{escape(url)}" rel="noreferrer">{escape(url)}</a>']
        at = match.end()
    return "".join(out) + escape(text[at:])


def _block(block: Block, svg: str | None) -> str:
    if isinstance(block, Para):
        return f'<p class="{block.tone}">{_inline(block.text)}</p>'
    if isinstance(block, Bullets):
        items = "".join(
            f"<li><details><summary>{_inline(item)}</summary><p>{_inline(full)}</p></details></li>"
            if full
            else f"<li>{_inline(item)}</li>"
            for item, full in block.folded()
        )
        return f'<ul class="{block.tone}">{items}</ul>'
    if isinstance(block, Code):
        pre = f"<pre><code>{escape(block.text)}</code></pre>"
        return f"<details><summary>{escape(block.summary)}</summary>{pre}</details>" if block.summary else pre
    if isinstance(block, Table):
        numeric = [all(_NUMBER.fullmatch(row[i]) for row in block.rows) for i in range(len(block.headers))]
        head = "".join(f"<th{_num(numeric[i])}>{escape(h)}</th>" for i, h in enumerate(block.headers))
        rows = "".join(
            ('<tr class="chosen">' if n == block.highlight else "<tr>")
            + "".join(f"<td{_num(numeric[i])}>{_cell(c, block.root)}</td>" for i, c in enumerate(row))
            + "</tr>"
            for n, row in enumerate(block.rows)
        )
        return f'<div class="table"><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>'
    if isinstance(block, Figure):
        if svg is None:
            return f"<p>No timeline picture was rendered. {escape(block.caption)}</p>"
        return f'<figure class="timeline">{svg}<figcaption>{escape(block.caption)}</figcaption></figure>'
    raise TypeError(f"unknown block {type(block).__name__}")


def render_html(doc: Document, *, svg: str | None = None, footer: str = "") -> str:
    v = doc.verdict
    sep = '<span class="sep">·</span>'
    parts = sep.join(f'<span class="part {p.tone}" data-key="{p.key}">{escape(p.text)}</span>' for p in v.parts)
    facts = (
        '<p class="facts" id="facts">' + sep.join(f"<span>{_linked(f)}</span>" for f in doc.facts) + "</p>"
        if doc.facts
        else ""
    )
    nav = "".join(f'<a href="#{s.anchor}">{escape(s.title)}</a>' for s in doc.sections)
    sections = "".join(
        f'<section id="{s.anchor}"><h2>{escape(s.title)}</h2>'
        + "".join(_block(b, svg) for b in s.blocks)
        + "</section>"
        for s in doc.sections
    )
    return neutralise(  # every string in it may be a run's: data, never control (nor a bidi reordering)
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f"<title>{escape(doc.title)}</title><style>{CSS}</style></head>\n"
        f'<body><header class="verdict {v.tone}"><h1>{escape(doc.title)}</h1>'
        f'<p class="line" id="verdict">{escape(v.run_id)}: {parts}</p>{facts}</header>\n'
        f"<nav>{nav}</nav>\n<main>{sections}</main>\n<footer>{escape(footer)}</footer></body></html>\n"
    )
