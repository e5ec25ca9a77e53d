"""A grant's dry run in words (`grant --dry-run`): what, how much, where, who could read it, and for a reclaim
where removed objects go and what is kept. Split from cli/authority.py; the preview itself is
authority/preview.py's, the same checks the grant runs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def _retention_lines(preview: dict[str, Any]) -> list[str]:
    """The reclaim plan's retention (issue 40): where removed objects go, what is refused and why, what is kept."""
    lines = []
    if preview.get("quarantine"):
        lines.append(f"  moved to quarantine {preview['quarantine']} ({preview.get('protection')})")
    lines += [f"  refused {r['uri']}: {r['reason']}" for r in preview.get("refused") or []]
    lines += [f"  retention: {reason}" for reason in preview.get("retention") or []]
    lines += [f"  keeps {n}: {reason}" for reason, n in (preview.get("keep_reasons") or {}).items()]
    uploads = preview.get("incomplete_uploads") or []
    if uploads:
        lines.append(f"  incomplete uploads: {len(uploads)}, {sum(u['bytes'] for u in uploads)} B in their parts")
    for u in uploads:
        verb = "aborts" if u.get("abort") else "lists"
        lines.append(
            f"  {verb} incomplete upload {u['key_uri']} ({u['parts']} parts, {u['bytes']} B, {_age(u['initiated'])})"
        )
    return lines


def _age(initiated: str | None) -> str:
    """An upload's age as a person reads it (the S3 Initiated time; unknown where the server gave none)."""
    if not initiated:
        return "started at an unknown time"
    started = datetime.fromisoformat(initiated)
    hours = max(0.0, (datetime.now(UTC) - started).total_seconds() / 3600)
    return f"started {initiated}, {hours:.1f} h ago"


def render_preview(preview: dict[str, Any]) -> str:
    """The dry-run in words: what, how much, where, and who could read it."""
    action, dest = preview["action"], preview.get("destination")
    if preview["would"] == "refuse":
        return f"dry run: {action} to {dest} would be REFUSED ({preview['refusal']}): {preview['detail']}"
    if action == "reclaim":
        lines = [
            f"dry run: reclaim step {preview['step']} would delete {preview['delete_count']} object(s), "
            f"{preview['delete_bytes']} bytes (keeps {preview['keep_count']}); destination {dest} verified"
        ]
        lines += [f"  delete {d['uri']}  {_object_facts(d)}" for d in preview["delete"]]
        lines += _retention_lines(preview)
        return "\n".join(lines)
    if action == "purge":
        lines = [
            f"dry run: purge step {preview['step']} would delete {preview['delete_count']} quarantined object(s), "
            f"{preview['delete_bytes']} bytes, before their expiry (no restore after this)"
        ]
        lines += [f"  delete {d['uri']}  {_object_facts(d)}" for d in preview["delete"]]
        return "\n".join(lines)
    if action == "preserve":
        lines = [
            f"dry run: preserve step {preview['step']}'s checkpoint {preview['checkpoint']} → {dest}",
            f"  {preview['object_count']} object(s), {preview['total_bytes']} bytes, pinned as manifest digest "
            f"{preview['digest']}; visibility {preview['visibility']}; no lifecycle rule expires the destination",
        ]
        return "\n".join(lines + _copy_lines(preview))
    if action == "export" and "argv" in preview:
        rate = preview["throughput"]
        return "\n".join(
            [
                f"dry run: export step {preview['step']} would submit job {preview['job_id']} to "
                f"{preview['controller']}: {' '.join(preview['argv'])}",
                f"  checkpoint {preview['checkpoint']} ({preview['checkpoint_bytes']} B) expires "
                f"{preview['checkpoint_expires_at'] or 'never'}; the export needs about {preview['needs_seconds']} s "
                f"at {rate['bytes_per_second']} B/s ({rate['said']})",
                *(f"  note: {n}" for n in preview["notes"]),
            ]
        )
    if "objects" not in preview:
        return f"dry run: {action}: {preview.get('detail', '')}"
    lines = [
        f"dry run: {action} step {preview['step']} ({preview['digest']}) → {dest}",
        f"  {preview['object_count']} object(s), {preview['total_bytes']} bytes; visibility "
        f"{preview['visibility']} ({preview['visibility_evidence']}); secret scan {preview['secret_scan']}",
    ]
    return "\n".join(lines + _copy_lines(preview))


def _copy_lines(preview: dict[str, Any]) -> list[str]:
    """What a copying grant (publish, handoff, preserve) creates at its destination, then each object it copies."""
    creates = [f"  creates {c}" + ("" if "://" in c else " (mode 0700)") for c in preview["creates"]]
    return creates + [f"  {o['name']}  {_object_facts(o)}" for o in preview["objects"]]


def _object_facts(row: dict[str, Any]) -> str:
    """An object's size and the checksums its backend gave (a reclaim row has none, a generated Hub file none,
    an S3 object no CRC32C): only what is there, never a KeyError or "crc32c None"."""
    facts = [f"{row['size']} B" if row.get("size") is not None else "size unknown"]
    facts += [f"{name} {row[name]}" for name in ("crc32c", "md5") if row.get(name)]
    return "  ".join(facts)
