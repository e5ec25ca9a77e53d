"""The files a Hub hand-off generates from the record: the model card (every value from a run escaped, the front
matter typed) and the stitched metrics as CSV. Split from authority/hub_publish.py, which plans and uploads them."""

from __future__ import annotations

import csv
import io
import json
import re

from rlcleanup.authority.grants import Grant
from rlcleanup.models.record import Candidate, CompletionRecord
from rlcleanup.ports.storage import Storage
from rlcleanup.steps.evidence_check import manifest_objects, verified_bytes

PROVENANCE = "provenance.json"
LOGS = "training_logs"


def metrics_csv(storage: Storage, record: CompletionRecord) -> bytes | None:
    """The stitched metrics (metrics.jsonl) as one CSV: step, kind, attempt, then every metric name. The preserved
    file is read back verified against the sealed manifest (TamperedEvidence when it changed)."""
    if not record.metrics_uri:
        return None
    try:
        data = verified_bytes(storage, record.metrics_uri, manifest_objects(storage, record))
    except FileNotFoundError:
        return None
    lines = data.decode("utf-8", errors="replace").splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    rows = [r for r in rows if r.get("kind") in ("train", "eval")]
    names = sorted({k for r in rows for k in (r.get("metrics") or {})})
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["step", "kind", "attempt", *names])
    for r in rows:
        m = r.get("metrics") or {}
        writer.writerow(
            [r["step"], r["kind"], r.get("attempt", ""), *("" if m.get(n) is None else m[n] for n in names)]
        )
    return out.getvalue().encode()


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_MARKDOWN_SPECIAL = {"\\": "\\\\", "|": "\\|", "`": "\\`", "<": "&lt;", ">": "&gt;", "&": "&amp;"}


def card_text(value: object) -> str:
    """A value from a run as inert Markdown inline text: control characters (newlines included) escaped as
    `\\n`/`\\xNN`, and the characters that could end a table cell, open code or HTML escaped. A config value
    can then never add a row, a heading or front matter to the card."""
    text = _CONTROL.sub(lambda m: json.dumps(m.group(0))[1:-1], str(value))
    return "".join(_MARKDOWN_SPECIAL.get(ch, ch) for ch in text)


def card_front_matter(base_model: str | None) -> list[str]:
    """The card's YAML front matter from typed values: `base_model` only when it is a valid Hub repo id (what
    the Hub's metadata means by it), written as a JSON string (a YAML double-quoted scalar); anything else a run
    names as its base model (a path, a URL, text with newlines) stays out of the YAML and is shown in the table."""
    lines = ["---", "library_name: transformers"]
    if base_model and _is_repo_id(base_model):
        lines.append(f"base_model: {json.dumps(base_model)}")
    return [*lines, "tags:", "- rlcleanup", "- reinforcement-learning", "---"]


def _is_repo_id(value: str) -> bool:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(value)
    except HFValidationError:
        return False
    return True


def model_card(record: CompletionRecord, candidate: Candidate, grant: Grant, repo_id: str) -> bytes:
    """The model card: every value from the run or the grant is escaped (`card_text`), the front matter holds
    only typed, validated values (`card_front_matter`)."""
    sel = record.selection
    chosen = sel is not None and sel.step == candidate.step
    rev = record.source_revision
    facts = [
        ("run id", record.run_id),
        ("run", record.run_uri),
        ("step", str(candidate.step)),
        ("digest", candidate.digest or "-"),
        ("parameters", f"{candidate.parameter_count:,}" if candidate.parameter_count else "-"),
        ("base model", record.base_model or "-"),
        ("source revision", ", ".join(f"{k} {v}" for k, v in sorted(rev.items()) if v) or "-"),
        ("selection policy", (json.dumps(sel.policy, sort_keys=True) if sel.policy else sel.status) if sel else "-"),
        (
            "metric window",
            json.dumps(sel.metric_window, sort_keys=True) if chosen and sel and sel.metric_window else "-",
        ),
        ("grant", f"{grant.grant_id} ({grant.action.value}) by {grant.granted_by}"),
    ]
    lines = [*card_front_matter(record.base_model), ""]
    lines += [
        f"# {card_text(repo_id.split('/')[-1])}",
        "",
        f"Published by rlcleanup from run {card_text(record.run_id)}.",
        "",
    ]
    lines += ["| | |", "|---|---|", *(f"| {k} | {card_text(v)} |" for k, v in facts), ""]
    lines += [
        f"Training logs, stitched metrics and the cleanup report are in `{LOGS}/`; `{PROVENANCE}` lists every file."
    ]
    return ("\n".join(lines) + "\n").encode()
