"""Long text cut for a reader (issue 38 item 11): at a word boundary with "…", never mid-word, and a run's
reasoning folded to one headline line per finding, the full text kept behind it (HTML <details>, `show --json`).

One function for every surface, so the report and the CLI cut the same way."""

from __future__ import annotations

import re

ELLIPSIS = "…"
# A reasoning bullet's headline: one line of the report's card at 390 px is ~45 characters, at 1280 px ~130; a
# terminal line is 80. The headline fits one terminal line beside its "  - " bullet.
HEADLINE_CHARS = 110


def clip(text: str, width: int) -> str:
    """`text` on one line, at most `width` characters: whole when it fits, else cut at the last space before the
    limit with "…" (a single word longer than the limit is cut inside it, still marked)."""
    one_line = " ".join(text.split())
    if len(one_line) <= width:
        return one_line
    room = max(width - len(ELLIPSIS), 1)
    cut = one_line[: room + 1].rfind(" ")
    head = one_line[:cut] if cut > 0 else one_line[:room]
    return head.rstrip(" ,;:.-(") + ELLIPSIS


def shorten_paths(text: str, run_uri: str) -> str:
    """Paths inside a reason: under the run root relative to it; beside it (the temp root shares the run's base,
    `<base>/durable/...` and `<base>/tmp/...`) from that base, marked `…/`."""
    root = run_uri.rstrip("/")
    text = text.replace(root + "/", "")
    if "/durable/" in root:
        base = root.rsplit("/durable/", 1)[0]
        text = text.replace(base + "/", "…/")
    return text


# A path or URI in a sentence (after shortening to the run, `…/` marks a dropped base).
_PATH = re.compile(r"(?:…/|/|[a-z][a-z0-9+.-]*://)[^\s;,()']+")
_PATH_CHARS = 40


def _last_segments(match: re.Match[str]) -> str:
    path = match.group()
    if len(path) <= _PATH_CHARS:
        return path
    tail = path.rstrip("/").rsplit("/", 2)[-2:]
    return "…/" + "/".join(tail)


def headline(reason: str, run_uri: str, width: int = HEADLINE_CHARS) -> str:
    """A finding's one line: its paths shortened to the run, a path still long cut to its last two segments (the
    full one is behind the headline), then clipped at a word boundary."""
    return clip(_PATH.sub(_last_segments, shorten_paths(reason, run_uri)), width)
