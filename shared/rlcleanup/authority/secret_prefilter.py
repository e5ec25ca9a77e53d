"""The secret scan's pre-filter: every rule's own regex, relaxed into an RE2 regex that matches a superset.

detect-secrets reports a secret on a line only when one of its plugins' regexes matches that line (filters and
allowlists only remove findings). So a line that no plugin regex can match needs no detect-secrets call. The
regexes are Python `re` patterns (lookarounds, backreferences, Unicode classes) that RE2 cannot run as they are;
each is rewritten from its parse tree into a pattern whose language contains the original's:

- lookarounds and word boundaries become empty (they only restrict);
- a backreference becomes a copy of the group it refers to (the captured text matches the group);
- a character class keeps its exact ASCII members (case variants added under IGNORECASE, including the few
  non-ASCII characters Python's IGNORECASE folds onto ASCII letters); a class that can match other non-ASCII
  characters gets all of them;
- non-greedy, possessive and atomic forms become plain ones (same strings matched).

`block_regex()` never matches a newline, so over a whole block every match lies on one line and a line is a
candidate exactly when some relaxed rule matches inside it; `view_regex()` is for the decoded views of one line,
which may hold newlines (JSON `\\n` undone). tests/unit/test_secret_prefilter.py checks the superset property on
generated inputs and the case-folding table exhaustively.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache
from importlib import import_module
from typing import Any

# The parse tree of a pattern and its opcodes: no public API exposes them (sre_parse is the deprecated alias).
P: Any = import_module("re._parser")
C: Any = import_module("re._constants")

# Non-ASCII characters that Python's IGNORECASE matches to an ASCII letter, and that letter (checked over every
# code point by the unit test). A relaxed class under IGNORECASE adds these, so `(?i)key` still sees 'Key' (Kelvin).
CASE_SPECIALS = {"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"}
_ASCII = [chr(i) for i in range(128)]
_ASCII_SPACE = {"\t", "\n", "\x0b", "\x0c", "\r", "\x1c", "\x1d", "\x1e", "\x1f", " "}
_CATEGORY_ASCII = {
    C.CATEGORY_DIGIT: set("0123456789"),
    C.CATEGORY_WORD: {c for c in _ASCII if c.isalnum() or c == "_"},
    C.CATEGORY_SPACE: _ASCII_SPACE,
}
_NOT_CATEGORY = {C.CATEGORY_NOT_DIGIT: C.CATEGORY_DIGIT, C.CATEGORY_NOT_WORD: C.CATEGORY_WORD}
_NOT_CATEGORY[C.CATEGORY_NOT_SPACE] = C.CATEGORY_SPACE


class _Printer:
    """RE2 source for one parsed Python pattern; `block` mode excludes newlines and anchors at line edges."""

    def __init__(self, parsed: Any, block: bool) -> None:
        self.block = block
        self.groups: dict[int, tuple[Any, int]] = {}
        self._collect(parsed, parsed.state.flags)

    def _collect(self, seq: Iterable[Any], flags: int) -> None:
        for op, av in seq:
            if op is C.SUBPATTERN:
                group, add, dele, sub = av
                inner = (flags | add) & ~dele
                if group is not None:
                    self.groups[group] = (sub, inner)
                self._collect(sub, inner)
            elif op is C.BRANCH:
                for alt in av[1]:
                    self._collect(alt, flags)
            elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
                self._collect(av[2], flags)
            elif op is C.ATOMIC_GROUP:
                self._collect(av, flags)
            elif op is C.GROUPREF_EXISTS:
                self._collect(av[1], flags)
                if av[2] is not None:
                    self._collect(av[2], flags)

    def seq(self, items: Iterable[Any], flags: int, depth: int = 0) -> str:
        return "".join(self.node(op, av, flags, depth) for op, av in items)

    def node(self, op: Any, av: Any, flags: int, depth: int) -> str:  # noqa: C901 -- one branch per regex parser opcode (sre_parse), as the parser's own table
        if op is C.LITERAL:
            return self.cls([(C.LITERAL, av)], flags)
        if op is C.NOT_LITERAL:
            return self.cls([(C.NEGATE, None), (C.LITERAL, av)], 0)  # no case variants removed: a superset
        if op is C.ANY:
            return self.cls([(C.NEGATE, None)] if flags & re.DOTALL else [(C.NEGATE, None), (C.LITERAL, 10)], 0)
        if op is C.IN:
            return self.cls(av, flags)
        if op is C.BRANCH:
            return "(?:" + "|".join(self.seq(alt, flags, depth) for alt in av[1]) + ")"
        if op is C.SUBPATTERN:
            _, add, dele, sub = av
            return "(?:" + self.seq(sub, (flags | add) & ~dele, depth) + ")"
        if op is C.ATOMIC_GROUP:
            return "(?:" + self.seq(av, flags, depth) + ")"
        if op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            lo, hi, sub = av
            lo = min(lo, 1000)  # RE2's repeat limit; fewer required repeats only widens the language
            top = "" if hi == C.MAXREPEAT or hi > 1000 else str(hi)
            return "(?:" + self.seq(sub, flags, depth) + "){" + f"{lo},{top}" + "}"
        if op in (C.ASSERT, C.ASSERT_NOT):
            return ""
        if op is C.AT:
            if av in (C.AT_BEGINNING, C.AT_BEGINNING_STRING):
                return "^" if self.block else ""
            if av in (C.AT_END, C.AT_END_STRING):
                return "$" if self.block else ""
            return ""  # \b, \B
        if op is C.GROUPREF:
            sub, gflags = self.groups[av]
            if depth > 4:
                return self.cls([(C.NEGATE, None), (C.LITERAL, 10)], 0) + "*"
            return "(?:" + self.seq(sub, gflags, depth + 1) + ")"
        if op is C.GROUPREF_EXISTS:
            _, yes, no = av
            return "(?:" + self.seq(yes, flags, depth) + "|" + (self.seq(no, flags, depth) if no else "") + ")"
        if op is C.CATEGORY:
            return self.cls([(C.CATEGORY, av)], flags)
        raise ValueError(f"secret prefilter: unhandled regex node {op}")  # a new construct: extend, never guess

    def cls(self, items: list[Any], flags: int) -> str:
        return _class_source(tuple(items), bool(flags & re.IGNORECASE), self.block)


@cache
def _class_source(items: tuple[Any, ...], ignorecase: bool, block: bool) -> str:
    """RE2 source of one character class. Cached: the rules spell the same few classes thousands of times (every
    literal is one), and building them was most of the pre-filter's one-time cost per process."""
    members, other_non_ascii = _class_members(list(items), ignorecase)
    if block:
        members.discard("\n")
    body = "".join(f"\\x{{{ord(c):x}}}" for c in sorted(members))
    if other_non_ascii:
        body += "\\x{80}-\\x{d7ff}\\x{e000}-\\x{10ffff}"
    return f"[{body}]" if body else "[^\\x{0}-\\x{10ffff}]"  # matches nothing


def _class_members(items: list[Any], ignorecase: bool) -> tuple[set[str], bool]:
    """(ASCII and case-special members, whether other non-ASCII characters can match)."""
    negate = any(op is C.NEGATE for op, _ in items)
    ascii_in: set[str] = set()
    non_ascii = False
    for op, av in items:
        if op is C.LITERAL:
            if av < 128:
                ascii_in.add(chr(av))
            else:
                non_ascii = True
        elif op is C.RANGE:
            lo, hi = av
            ascii_in |= {chr(i) for i in range(lo, min(hi, 127) + 1)}
            non_ascii |= hi >= 128
        elif op is C.CATEGORY:
            if av in _CATEGORY_ASCII:
                ascii_in |= _CATEGORY_ASCII[av]
            elif av in _NOT_CATEGORY:
                ascii_in |= set(_ASCII) - _CATEGORY_ASCII[_NOT_CATEGORY[av]]
            else:
                ascii_in |= set(_ASCII)  # LINEBREAK and the like: relax to every ASCII character
            non_ascii = True
        elif op is not C.NEGATE:
            raise ValueError(f"secret prefilter: unhandled class item {op}")
    if negate:  # excluding only the listed characters (no case variants) keeps it a superset
        return set(_ASCII) - ascii_in, True
    if ignorecase:
        ascii_in |= {c.swapcase() for c in ascii_in if c.isalpha()}
    specials = {s for s, letter in CASE_SPECIALS.items() if ignorecase and letter in ascii_in}
    return ascii_in | specials, non_ascii


@cache
def relaxed(pattern: re.Pattern[str], block: bool) -> str:
    parsed = _parsed(pattern)
    return _Printer(parsed, block).seq(parsed, parsed.state.flags)


@cache
def _parsed(pattern: re.Pattern[str]) -> Any:
    """A rule's parse tree, once for both spellings (block and view): only read, never changed."""
    return P.parse(pattern.pattern, pattern.flags)


# ---------------------------------------------------------------- the rules in force


def rule_patterns() -> list[re.Pattern[str]]:
    """Every regex a plugin in the current detect-secrets session runs on a line (call inside a session)."""
    from detect_secrets.plugins import keyword
    from detect_secrets.plugins.base import BasePlugin, RegexBasedDetector
    from detect_secrets.plugins.jwt import JwtTokenDetector
    from detect_secrets.settings import get_plugins

    # Matches come only from these regexes when a plugin keeps these methods (JWT's only filters the matches).
    known_line = {BasePlugin.analyze_line, keyword.KeywordDetector.analyze_line}
    known_string: set[Any] = {RegexBasedDetector.analyze_string, JwtTokenDetector.analyze_string}
    known_string.add(keyword.KeywordDetector.analyze_string)
    out: list[re.Pattern[str]] = []
    for plugin in get_plugins():
        cls = type(plugin)
        if cls.analyze_line not in known_line or cls.analyze_string not in known_string:
            raise ValueError(f"secret prefilter: {cls.__name__} finds secrets by its own code, not only regexes")
        if isinstance(plugin, keyword.KeywordDetector):
            for table in (*keyword.REGEX_BY_FILETYPE.values(), keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP):
                out.extend(p for p in table if p not in out)
        elif isinstance(plugin, RegexBasedDetector):
            out.extend(plugin.denylist)
        else:  # a plugin whose matches come from elsewhere: the pre-filter cannot vouch for it
            raise ValueError(f"secret prefilter: no regexes known for plugin {type(plugin).__name__}")
    return out


@cache
def _compiled(block: bool, sources: tuple[str, ...]) -> Any:
    import re2

    options = re2.Options()
    options.max_mem = 256 << 20  # the union's DFA; RE2 falls back to a slower NFA when it runs out
    return re2.compile(("(?m)" if block else "") + "|".join(f"(?:{s})" for s in sources), options)


# What makes a line's decoded views differ from the line itself (secret_views.line_views): a backslash (JSON escapes,
# continuations), a string concatenation on the line, or a quote left open at its end (a join with the next line).
# `[ws]` is Python's \s on one line, widened to every non-ASCII character.
_WS = r"[\t\x{b}\x{c}\r\x{1c}-\x{20}\x{80}-\x{d7ff}\x{e000}-\x{10ffff}]"
DECODER_TRIGGERS = (
    r"\\",
    rf'"{_WS}*(?:\+|\.\.)?{_WS}*"',
    rf"'{_WS}*(?:\+|\.\.)?{_WS}*'",
    rf"[\"']{_WS}*(?:\+|\.\.)?{_WS}*$",
)
# A line ending in a token prefix's fragment (secret_views._split_token_views joins it with the next line's half).
SPLIT_TOKEN_TRIGGER = r"(?:hf_|api_org_|github_pat_|gh[pousr]_)[A-Za-z0-9_]*[ \t'\"`,;).]*$"
_B64 = "[A-Za-z0-9+/_-]"


def block_regex() -> Any:
    """RE2 regex (over UTF-8 bytes) of every rule and decoder trigger, for whole blocks: no match spans a newline,
    so a line is a candidate exactly when a match starts in it."""
    triggers = (*DECODER_TRIGGERS, SPLIT_TOKEN_TRIGGER)
    return _compiled(True, (*(relaxed(p, True) for p in rule_patterns()), *triggers))


@cache
def b64_run_regex() -> Any:
    """Maximal base64 runs of 24 or more characters with an uppercase letter: a superset of the runs
    secret_views.b64_decoded decodes (those also hold a lowercase one). The run starts at a line start or after a
    character outside the alphabet (group 1 is the run), and is spelt by where its first uppercase letter is:
    `[^A-Z]{i}[A-Z]` then at least 23-i more characters. The DFA then tracks one count, not which of the last 24
    characters were uppercase: "24 windows, an uppercase letter somewhere" ran RE2's DFA out of memory on random
    base64 (2^24 states) and its NFA fallback took two minutes per MiB."""
    import re2

    options = re2.Options()
    options.max_mem = 64 << 20
    lower = "[a-z0-9+/_-]"
    by_first_upper = [f"{lower}{{{i}}}[A-Z]{_B64}{{{23 - i},}}" for i in range(24)]
    run = "|".join([*by_first_upper, f"{lower}{{24,}}[A-Z]{_B64}*"])
    return re2.compile(f"(?m)(?:^|[^A-Za-z0-9+/_-])({run})", options)


def view_regex() -> Any:
    """RE2 regex of every rule, for one decoded view (which may hold newlines)."""
    return _compiled(False, tuple(relaxed(p, False) for p in rule_patterns()))
