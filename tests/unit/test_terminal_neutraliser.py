"""Every string from a run is data (issue 37 item 2): one neutraliser (`rlcleanup.textsafe`) on every text surface.

A corpus of control sequences (OSC retitle/hyperlink/clipboard, CSI clear screen and colour, C1 8-bit forms, bidi
overrides and isolates, BEL, backspace, CR, NUL, DEL, Unicode line separators) goes into a run's log and into the
record's free-text fields; `show`, `status`, `grants`, `report` (md, html, json) and the stored record must carry
none of them raw, and every JSON output must still parse back to the same data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from rlcleanup.adapters.sqlite_records import SqliteRunRecords
from rlcleanup.cli.main import app
from rlcleanup.models.record import Selection
from rlcleanup.report.document import Block, Bullets, Code, Document, Figure, Para, Section, Table, Verdict, VerdictPart
from rlcleanup.report.html import render_html
from rlcleanup.report.markdown import render_markdown
from rlcleanup.runtime.embedded import run_embedded
from rlcleanup.samples.generator import write_sample_run
from rlcleanup.textsafe import is_neutral, neutralise


@pytest.fixture(autouse=True)
def _sqlite_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI picks Firestore when an emulator variable is set (another test's stack in this worker): these
    tests read the SQLite file they name."""
    for var in ("FIRESTORE_EMULATOR_HOST", "PUBSUB_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT", "RLCLEANUP_DB"):
        monkeypatch.delenv(var, raising=False)


CORPUS = {
    "osc_retitle": "\x1b]0;pwned\x07",
    "osc_hyperlink": "\x1b]8;;https://evil.example/\x1b\\click me\x1b]8;;\x1b\\",
    "osc_clipboard": "\x1b]52;c;cm0gLXJmIH4=\x07",
    "csi_clear_screen": "\x1b[2J\x1b[H",
    "csi_fake_ok": "\x1b[1A\x1b[2K\x1b[32mall checks passed\x1b[0m",
    "c1_csi": "\x9b2J\x9b32m",
    "c1_osc": "\x9d0;retitled\x9c",
    "bidi_override": "grant \u202edesrever\u202c ok",
    "bidi_isolate": "\u2066\u2067hidden\u2069\u2069",
    "bel": "ding\x07\x07",
    "backspace": "secret\x08\x08\x08\x08\x08\x08public",
    "carriage_return": "FAILED\rPASSED",
    "nul_del": "a\x00b\x7fc",
    "line_separator": "one\u2028two\u2029three",
}
PAYLOAD = "".join(CORPUS.values())
RAW = {c for text in CORPUS.values() for c in text if not is_neutral(c, keep_newlines=False)}


def _assert_clean(text: str) -> None:
    leaked = sorted({hex(ord(c)) for c in text if c in RAW})
    assert not leaked, f"raw control code points reached the surface: {leaked}"


# ------------------------------------------------------------------ the function itself


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_every_sequence_of_the_corpus_is_escaped_visibly(name: str) -> None:
    text = CORPUS[name]
    out = neutralise(text)
    assert is_neutral(out) and is_neutral(neutralise(text, keep_newlines=False), keep_newlines=False)
    assert "\\u" in out  # visible: the operator sees that something was there


@given(st.text())
def test_any_text_comes_out_neutral_and_one_line_when_asked(text: str) -> None:
    assert is_neutral(neutralise(text))
    one = neutralise(text, keep_newlines=False)
    assert is_neutral(one, keep_newlines=False) and "\n" not in one and "\r" not in one


@given(st.recursive(st.text() | st.integers(), lambda kids: st.lists(kids) | st.dictionaries(st.text(), kids)))
def test_json_output_stays_valid_and_lossless(value: object) -> None:
    """pydantic writes non-ASCII raw (C1, bidi): the neutralised JSON text parses back to the very same data."""
    text = json.dumps(value, ensure_ascii=False)
    assert json.loads(neutralise(text)) == value


def test_plain_text_is_left_alone() -> None:
    text = "step 30 · reward 0.41\tok\n✗ missing shard — café"
    assert neutralise(text) == text


# ------------------------------------------------------------------ every surface


@pytest.fixture(scope="module")
def hostile_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A failed run whose causal error line carries the whole corpus, processed by the pipeline; plus grant and
    record fields written with the corpus as an upstream error or a tampered store would write them."""
    base = tmp_path_factory.mktemp("hostile")
    root = write_sample_run(base / "src", "failed-first-link")
    logs = sorted(f for f in (base / "src").rglob("*") if f.is_file() and "logs" in f.parts)
    planted = 0
    for log in logs:
        text = log.read_text()
        if "Error: " in text:
            log.write_text(text.replace("Error: ", f"Error: {PAYLOAD} ", 1))
            planted += 1
    assert planted
    db = base / "r.db"
    record = run_embedded(str(root), db_path=db, preserve_root=str(base / "p"))
    assert record is not None
    store = SqliteRunRecords(db)
    store.update(
        record.run_id,
        {
            "remaining_work": [f"diagnose {PAYLOAD}"],
            "terminal_reasoning": [*record.terminal_reasoning, f"reason {PAYLOAD}"],
            "selection": Selection(status="unresolved", reason=f"because {PAYLOAD}").model_dump(mode="json"),
        },
    )
    store.put_doc(
        f"runs/{record.run_id}/grants",
        "g1",
        {
            "grant": {"action": "publish", "destination": f"/tmp/x{PAYLOAD}", "step": 3},
            "state": "refused",
            "refusal": "apply_failed",
            "detail": f"upstream said {PAYLOAD}",
        },
    )
    return db, record.run_id


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_the_causal_line_reaches_the_record_as_data(hostile_db: tuple[Path, str]) -> None:
    db, run_id = hostile_db
    record = SqliteRunRecords(db).get(run_id)
    assert record is not None and record.first_failure_cause is not None
    _assert_clean(record.model_dump_json())  # what Firestore (and its console) would be given
    message = record.first_failure_cause.message  # the log reader drops ANSI colour sequences; the rest stays
    assert "pwned\\u0007" in message and "\\u202e" in message and "\\u009b2J" in message  # visible, inert


TEXT_SURFACES = [
    ("show", "{run}"),
    ("status",),
    ("status", "{run}"),
    ("grants", "{run}"),
    ("report", "{run}", "--format", "md"),
    ("report", "{run}", "--format", "html"),
]
JSON_SURFACES = [
    ("show", "{run}", "--json"),
    ("status", "--json"),
    ("grants", "{run}", "--json"),
    ("report", "{run}", "--json"),
]


@pytest.mark.parametrize("args", TEXT_SURFACES + JSON_SURFACES, ids=lambda a: "-".join(a).replace("{run}", "run"))
def test_every_surface_prints_no_control_sequence_and_json_stays_json(
    hostile_db: tuple[Path, str], args: tuple[str, ...]
) -> None:
    db, run_id = hostile_db
    code, out = _cli(*(a.format(run=run_id) for a in args), "--db", str(db))
    assert code == 0, out
    _assert_clean(out)
    if "--json" in args:
        json.loads(out)  # escaped, still valid JSON


def test_report_renderers_neutralise_whatever_the_document_holds() -> None:
    """Markdown and HTML from a document built in memory (no store, no validator on the way): the renderers
    themselves neutralise, whichever block a run's string lands in."""
    blocks: list[Block] = [
        Para(PAYLOAD),
        Bullets([PAYLOAD]),
        Code(PAYLOAD, summary=PAYLOAD),
        Table([PAYLOAD], [[PAYLOAD]]),
    ]
    doc = Document(
        verdict=Verdict(run_id=PAYLOAD, parts=[VerdictPart("cause", PAYLOAD)]),
        sections=[Section(PAYLOAD, "evidence", [*blocks, Figure(PAYLOAD)])],
        title=PAYLOAD,
    )
    _assert_clean(render_markdown(doc, image=None))
    _assert_clean(render_html(doc, svg=None, footer=PAYLOAD))
