"""How `--help` reads at any terminal width: prose reflowed to the terminal, no `<bool>` beside a flag.

typer 0.29's rich help keeps the docstring's own line breaks after the first paragraph (typer/rich_utils.py
`_fix_linebreaks` joins paragraphs and leaves their single newlines), so a docstring wrapped at 120 columns
printed at 80 came out ragged: every source line broken again by the terminal. And its option table shows each
option's type, `<bool>` for a flag that takes no value, which reads as if it wanted one (gh, gcloud and click
itself show nothing there). Both are fixed here once for every command instead of in each docstring and option.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import typer

# A line that starts a list item or is indented keeps its own line: only running prose is joined.
_KEEPS_ITS_LINE = re.compile(r"^(\s+|[-*•] |\d+[.)] )")


def reflow(doc: str) -> str:
    """`doc` with each paragraph's single line breaks turned into spaces (the terminal wraps it), list items and
    indented lines kept on their own lines, paragraphs (blank lines) and click's `\\b` no-rewrap marker kept."""
    paragraphs = []
    for paragraph in inspect.cleandoc(doc).split("\n\n"):
        if paragraph.startswith("\b"):
            paragraphs.append(paragraph)
            continue
        lines: list[str] = []
        for line in paragraph.split("\n"):
            if lines and not _KEEPS_ITS_LINE.match(line):
                lines[-1] = f"{lines[-1]} {line.strip()}"
            else:
                lines.append(line)
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def reflow_commands(app: typer.Typer) -> None:
    """Every command's help (its `help=` or docstring), in `app` and its sub-apps, reflowed."""
    for info in app.registered_commands:
        doc = info.help if isinstance(info.help, str) else inspect.getdoc(info.callback)
        if doc:
            info.help = reflow(doc)
    for group in app.registered_groups:
        if group.typer_instance is not None:
            reflow_commands(group.typer_instance)


def hide_flag_types() -> None:
    """No type column for an option that takes no value (`--json`, `--rerun`, `--help`): typer's TyperOption
    renders `<bool>` there; options with a value keep theirs (`<path>`, `<str>`, a choice list)."""
    from typer.core import TyperOption

    if getattr(TyperOption.display_type_rich, "_rlcleanup_flags_hidden", False):
        return
    shown = TyperOption.display_type_rich

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        return None if self.is_flag and self.metavar is None else shown(self, ctx)

    display_type_rich._rlcleanup_flags_hidden = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]
