"""A format-neutral report: a verdict line, then sections of blocks. Markdown and HTML render the same document,
so the two can never disagree about what the evidence is."""

from __future__ import annotations

from dataclasses import dataclass, field

# Tones colour the HTML and pick the verdict's banner; Markdown ignores them.
GOOD, WARN, BAD, NEUTRAL = "good", "warn", "bad", "neutral"


@dataclass(frozen=True)
class VerdictPart:
    key: str  # terminal | cause | selection | resume | person | errors
    text: str
    tone: str = NEUTRAL


@dataclass(frozen=True)
class Verdict:
    run_id: str
    parts: list[VerdictPart]

    @property
    def line(self) -> str:
        return f"{self.run_id}: " + " · ".join(p.text for p in self.parts)

    @property
    def tone(self) -> str:
        tones = {p.tone for p in self.parts}
        return BAD if BAD in tones else WARN if WARN in tones else GOOD


@dataclass(frozen=True)
class Para:
    text: str
    tone: str = NEUTRAL


@dataclass(frozen=True)
class Bullets:
    items: list[str]
    tone: str = NEUTRAL
    # set: items are one-line headlines and details[i] the full text behind item i (HTML <details>), shown only
    # where it says more than its headline
    details: list[str] | None = None

    def folded(self) -> list[tuple[str, str | None]]:
        """(headline, the full text when the headline cut it short, else None) per item."""
        full = self.details or self.items
        return [
            (item, text if " ".join(text.split()) != item else None)
            for item, text in zip(self.items, full, strict=True)
        ]


@dataclass(frozen=True)
class Code:
    text: str
    summary: str | None = None  # set: collapsed under this one-line summary (HTML <details>)


@dataclass(frozen=True)
class Table:
    headers: list[str]
    rows: list[list[str]]
    root: str | None = None  # URIs under it print relative to it (the full URI stays on hover and copy)
    highlight: int | None = None  # the row a reader looks for first (the chosen candidate): highlighted in HTML


@dataclass(frozen=True)
class Figure:
    """Where the chain timeline goes; each renderer inserts its own form (PNG link / inline SVG)."""

    caption: str


Block = Para | Bullets | Code | Table | Figure


@dataclass
class Section:
    title: str
    anchor: str
    blocks: list[Block] = field(default_factory=list)


@dataclass
class Document:
    verdict: Verdict
    sections: list[Section]
    title: str
    # Under the verdict: the cause's own message, when the run ended and how long it ran (what is known).
    facts: list[str] = field(default_factory=list)
