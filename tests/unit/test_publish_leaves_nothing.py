"""A refused publish leaves nothing behind (issue 37 item 8): every precondition is checked before the first
byte reaches the destination, locally and on the Hub; an export shipping a file named like what a publish writes
itself (the `_PUBLISHED.json` marker, `provenance.json`, `training_logs/`) is invalid at validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from authority_support import World, files_under, make_world
from hub_fake import FakeHub

from rlcleanup.authority.artifact import Pinned, pin
from rlcleanup.authority.grants import Approver, Grant, new_key, public_b64, register_approver
from rlcleanup.authority.hub_publish import MARKER, publish_to_hub
from rlcleanup.authority.outcome import Outcome
from rlcleanup.authority.publish import publish
from rlcleanup.authority.staging import STAGING
from rlcleanup.runtime.embedded import manual_event
from rlcleanup.steps.validate import reserved_names


def _staging_empty(w: World) -> bool:
    return files_under(Path(w.record.preserved_locations[0]) / STAGING) == []


# ---------------------------------------------------------------- validation: reserved names are invalid


@pytest.mark.parametrize(
    "name",
    ["_PUBLISHED.json", "_published.JSON", "sub/_PUBLISHED.json", "provenance.json", "PROVENANCE.json",
     "training_logs/attempt-0/train.log", "Training_Logs/x"],
)  # fmt: skip
def test_names_a_publish_writes_itself_are_reserved(name: str) -> None:
    assert reserved_names(["model.safetensors", name]) == [name]


def test_ordinary_export_names_are_not_reserved() -> None:
    names = ["config.json", "model-00001-of-00002.safetensors", "README.md", "logs/provenance.json.bak", "x/README"]
    assert reserved_names(names) == []


@pytest.mark.parametrize("forged", ["_PUBLISHED.json", "provenance.json", "training_logs/train.log"])
def test_an_export_that_ships_a_marker_or_provenance_is_invalid_and_never_published(
    tmp_path: Path, forged: str
) -> None:
    w = make_world(tmp_path, run=False)
    export = sorted(Path(w.run_uri).glob("exports/global_step_*/policy"))[-1]
    (export / forged).parent.mkdir(parents=True, exist_ok=True)
    (export / forged).write_text(json.dumps({"run_id": "x", "grant_id": "forged", "digest": "0" * 64}))
    w.stack.emit(manual_event(w.run_uri))
    step = int(export.parent.name.removeprefix("global_step_"))
    cand = w.candidate(step)
    assert not cand.valid and any(p.startswith("reserved_name") for p in cand.problems), cand.problems
    grant = w.grant(step=step)
    w.deliver(w.message(grant))
    assert w.action(grant.grant_id)["refusal"] == "candidate_invalid"
    assert files_under(w.dest_root) == [] and _staging_empty(w)


# ---------------------------------------------------------------- local destinations


def test_a_conflict_anywhere_at_the_destination_is_refused_before_any_byte_is_promoted(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    grant = w.grant()
    dest = w.dest_root / "model"
    dest.mkdir(mode=0o700)
    (dest / "provenance.json").write_text('{"planted": true}')  # our own name, other bytes: sorted last but one
    w.deliver(w.message(grant))
    assert w.action(grant.grant_id)["refusal"] == "destination_conflict"
    assert [p.name for p in files_under(dest)] == ["provenance.json"] and _staging_empty(w)


def test_a_forged_marker_at_the_destination_is_refused_and_nothing_is_copied(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    grant = w.grant()
    dest = w.dest_root / "model"
    dest.mkdir(mode=0o700)
    (dest / "_PUBLISHED.json").write_text(json.dumps({"grant_id": "forged", "digest": grant.digest}))
    w.deliver(w.message(grant))
    assert w.action(grant.grant_id)["refusal"] == "destination_conflict"
    assert [p.name for p in files_under(dest)] == ["_PUBLISHED.json"]


def test_directories_created_for_a_refused_publish_are_removed(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    grant = w.grant(destination=str(w.dest_root / "new" / "model"))
    export = Path(w.candidate().uri)
    first = sorted(p for p in export.iterdir() if p.is_file())[0]
    first.write_bytes(first.read_bytes())  # same bytes, new version: the pinned copy fails (source_changed)
    w.deliver(w.message(grant))
    assert w.action(grant.grant_id)["refusal"] in {"wrong_digest", "source_changed"}
    assert not (w.dest_root / "new").exists()


def test_a_redelivery_over_identical_bytes_still_publishes(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    grant = w.grant()
    storage = w.stack.ports.storage
    pinned = pin(storage, w.record, grant)
    assert isinstance(pinned, Pinned)
    assert publish(storage, w.record, grant, pinned).refusal is None
    dest = Path(grant.destination or "")
    (dest / "_PUBLISHED.json").unlink()  # an attempt that died before its marker: every other file is ours
    again = publish(storage, w.record, grant, pinned)
    assert again.refusal is None, again.detail
    assert (dest / "_PUBLISHED.json").exists()


# ---------------------------------------------------------------- the Hub


@pytest.fixture
def hub_world(tmp_path: Path) -> tuple[World, FakeHub, object]:
    w = make_world(tmp_path)
    key = new_key()
    register_approver(
        w.stack.ports.records,
        Approver(approver_id="bob", public_key=public_b64(key), allowed_prefixes=["hf://rl-team"]),
    )
    hub = FakeHub()
    w.stack.ports.model_hub = lambda: hub
    return w, hub, key


def _hand_off(w: World, hub: FakeHub, repo: str, batch_files: int = 1, grant: Grant | None = None) -> Outcome:
    grant = grant or w.grant(action="handoff", destination=f"hf://{repo}", granted_by="bob")
    pinned = pin(w.stack.ports.storage, w.record, grant)
    assert isinstance(pinned, Pinned)
    return publish_to_hub(w.stack.ports.storage, w.record, grant, hub, pinned, batch_files=batch_files)


@pytest.mark.parametrize("planted", ["provenance.json", "README.md", "training_logs/metrics.csv", "config.json"])
def test_a_hub_conflict_visible_in_the_first_paths_info_leaves_zero_files(
    hub_world: tuple[World, FakeHub, object], planted: str
) -> None:
    w, hub, _ = hub_world
    hub.seed("rl-team/clash", {planted: b"theirs\n"})
    out = _hand_off(w, hub, "rl-team/clash", batch_files=1)  # one commit per file: any early upload would show
    assert out.refusal is not None and out.refusal.value == "destination_conflict" and planted in out.detail
    assert hub.commits == [] and hub.repos["rl-team/clash"] == {planted: b"theirs\n"} and _staging_empty(w)


def test_a_hub_marker_over_a_repo_without_our_files_is_refused_before_any_commit(
    hub_world: tuple[World, FakeHub, object],
) -> None:
    w, hub, _ = hub_world
    hub.seed("rl-team/marked", {MARKER: b'{"grant_id": "forged"}'})
    out = _hand_off(w, hub, "rl-team/marked")
    assert out.refusal is not None and out.refusal.value == "destination_conflict"
    assert hub.commits == []


def test_a_hub_resume_over_our_own_files_completes(hub_world: tuple[World, FakeHub, object]) -> None:
    w, hub, _ = hub_world
    grant = w.grant(action="handoff", destination="hf://rl-team/resume", granted_by="bob")
    first = _hand_off(w, hub, "rl-team/resume", grant=grant)
    assert first.refusal is None
    files = dict(hub.repos["rl-team/resume"])
    del files[MARKER]
    hub.seed("rl-team/resume", files)  # as if the marker's commit never happened
    commits = len(hub.commits)
    again = _hand_off(w, hub, "rl-team/resume", grant=grant)
    assert again.refusal is None, again.detail
    assert [names for _, names in hub.commits[commits:]] == [[MARKER]]


def test_an_export_with_its_own_readme_is_refused_for_the_hub_before_anything(
    hub_world: tuple[World, FakeHub, object],
) -> None:
    w, hub, _ = hub_world
    grant = w.grant(action="handoff", destination="hf://rl-team/readme", granted_by="bob")
    pinned = pin(w.stack.ports.storage, w.record, grant)
    assert isinstance(pinned, Pinned)
    some = next(iter(pinned.objects.values()))
    pinned = Pinned(pinned.candidate, {**pinned.objects, "readme.MD": some})  # a listing as validated before
    out = publish_to_hub(w.stack.ports.storage, w.record, grant, hub, pinned)
    assert out.refusal is not None and out.refusal.value == "candidate_invalid" and "readme.MD" in out.detail
    assert hub.repos == {} and hub.requests <= 1
