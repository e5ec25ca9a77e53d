"""Issue 47 item 5: a reclaim after a byte-exact restore is accepted. A restore cannot bring a version back (a
local file gets a new inode and ctime), so the grant's digest, which pins the validated versions, no longer matched
and the reclaim was refused `wrong_digest: ... changed since it was validated` although the bytes were the
validated ones. The restore verified the bytes; while each object is still the restored version it counts as the
validated one. An object edited after the restore is still refused."""

from __future__ import annotations

from pathlib import Path

from authority_support import make_world, published_then_reclaimed

from rlcleanup.authority.quarantine import restore
from rlcleanup.settings import QuarantineSettings, read


def _reclaim_then_restore(tmp_path: Path):  # type: ignore[no-untyped-def]
    w = make_world(tmp_path)
    export = published_then_reclaimed(w)
    back = restore(
        w.stack.ports.storage, w.stack.ports.records, w.record, w.stack.ports.clock.now(), read(QuarantineSettings)
    )
    assert sorted(back.restored) == sorted(export) and not back.refused
    assert {p: Path(p).read_bytes() for p in export} == export  # byte-exact
    return w, export


def test_a_reclaim_after_a_byte_exact_restore_is_accepted(tmp_path: Path) -> None:
    w, export = _reclaim_then_restore(tmp_path)
    again = w.grant("reclaim")
    w.deliver(w.message(again))
    assert w.action(again.grant_id)["state"] == "reclaimed", w.action(again.grant_id)
    assert [p for p in export if Path(p).exists()] == [], str(w.action(again.grant_id))[:3000]


def test_an_object_edited_after_the_restore_is_still_refused(tmp_path: Path) -> None:
    w, export = _reclaim_then_restore(tmp_path)
    edited = Path(sorted(export)[0])
    edited.write_bytes(export[str(edited)])  # the same bytes, written again: another version nobody verified
    again = w.grant("reclaim")
    w.deliver(w.message(again))
    action = w.action(again.grant_id)
    assert action["state"] == "refused" and action["refusal"] == "wrong_digest", action
    assert edited.exists()
