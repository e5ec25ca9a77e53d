"""Document -> Markdown (CommonMark/GFM tables), readable raw in a terminal and rendered in chat or GitHub."""

from __future__ import annotations

import re

from rlcleanup.report.document import Block, Bullets, Code, Document, Figure, Para, Table
from rlcleanup.textsafe import neutralise

# Escape only what would change the rendering: emphasis at word edges, code spans, HTML, inline links, quotes.
# With Markdown's own backslash escapes, never HTML entities: the file is read raw too, where `&gt;` is noise
# (`a -> b` stays `a -> b`). A `<` is escaped only where it could open a tag or an autolink, a `>` only where it
# would start a block quote.
_EDGE_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_TAG_OPEN = re.compile(r"<(?=[A-Za-z/!?])")
_QUOTE_START = re.compile(r"^(\s*)>", re.M)


def escape(text: str) -> str:
    text = text.replace("\\", "\\\\").replace("`", "\\`").replace("*", "\\*").replace("](", "]\\(")
    text = _QUOTE_START.sub(r"\1\\>", _TAG_OPEN.sub(r"\\<", text))
    return _EDGE_UNDERSCORE.sub(r"\\_", text)


def _cell(text: str) -> str:
    return escape(" ".join(text.split())).replace("|", "\\|")


def _fence(text: str) -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text.rstrip()}\n{fence}"


def _block(block: Block, image: str | None) -> str:
    if isinstance(block, Para):
        return escape(block.text)
    if isinstance(block, Bullets):
        return "\n".join(
            f"- <details><summary>{escape(item)}</summary>{escape(' '.join(full.split()))}</details>"
            if full
            else f"- {escape(' '.join(item.split()))}"
            for item, full in block.folded()
        )
    if isinstance(block, Code):
        if block.summary:  # collapsed where Markdown renders HTML (GitHub, most viewers); a plain fence elsewhere
            return f"<details><summary>{escape(block.summary)}</summary>\n\n{_fence(block.text)}\n\n</details>"
        return _fence(block.text)
    if isinstance(block, Table):
        head = "| " + " | ".join(_cell(h) for h in block.headers) + " |"
        rule = "|" + "|".join("---" for _ in block.headers) + "|"
        rows = ["| " + " | ".join(_cell(c) for c in row) + " |" for row in block.rows]
        return "\n".join([head, rule, *rows])
    if isinstance(block, Figure):
        if image is None:
            return f"_Chain timeline: see report.html (inline SVG) or `rlcleanup report --out DIR`._ {escape(block.caption)}"
        return f"![chain timeline]({image})\n\n_{escape(block.caption)}_"
    raise TypeError(f"unknown block {type(block).__name__}")


def render_markdown(doc: Document, *, image: str | None = None) -> str:
    """`image` is the timeline PNG's path relative to where the Markdown is written (None: not written)."""
    out = [f"# {escape(doc.title)}", "", f"**Verdict:** {escape(doc.verdict.line)}", ""]
    if doc.facts:
        out += [" · ".join(escape(f) for f in doc.facts), ""]
    out += [" · ".join(f"[{s.title}](#{s.anchor})" for s in doc.sections), ""]
    for section in doc.sections:
        out += [f'<a id="{section.anchor}"></a>', f"## {escape(section.title)}", ""]
        for block in section.blocks:
            out += [_block(block, image), ""]
    return neutralise("\n".join(out).rstrip() + "\n")  # every string in it may be a run's: data, never control
