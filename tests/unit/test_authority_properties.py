"""Adversarial tests of the authority properties (docs/authority.md §Threat model): each tries to break one.

P1 a grant authorizes exactly the validated object versions; P2 reclaim deletes only what the record-store plan
names, each object right after its twin is re-verified; P4 every published byte is scanned as published;
P5 a refused or failed publish leaves nothing behind; P6 scope edges (prefixes, symlinks, lifetimes).
"""

from __future__ import annotations

import json
import os
import struct
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from authority_support import World, files_under, make_world
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.adapters.storage_router import RoutingStorage
from rlcleanup.authority import pinning
from rlcleanup.authority.grants import Approver, prefix_too_broad, public_b64, register_approver
from rlcleanup.authority.pinning import pinned_copy
from rlcleanup.authority.secrets import scan_objects, scan_string
from rlcleanup.authority.staging import STAGING
from rlcleanup.ports.storage import SourceChangedError, StorageError

TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345"

# ---------------------------------------------------------------- P1: pinned versions (unit level, fast)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.binary(min_size=1, max_size=4096),
    at=st.integers(min_value=0, max_value=4095),
    new=st.binary(min_size=0, max_size=8),
    restore_mtime=st.booleans(),
)
def test_any_edit_after_validation_fails_the_pinned_copy(
    tmp_path: Path, data: bytes, at: int, new: bytes, restore_mtime: bool
) -> None:
    """Any write after the listing (even of identical bytes, even with mtime set back) moves the pin."""
    storage = RoutingStorage()
    src = tmp_path / f"src-{os.urandom(4).hex()}"
    src.write_bytes(data)
    pinned = storage.stat(str(src))
    assert pinned is not None and pinned.fingerprint
    before = src.stat()
    time.sleep(0.01)  # past the kernel's timestamp tick (see the residual risks in docs/authority.md)
    at = at % len(data)
    edited = data[:at] + new + data[at + len(new) :]
    src.write_bytes(edited[: len(data)] if len(edited) >= len(data) else edited)
    if restore_mtime:
        os.utime(src, ns=(before.st_atime_ns, before.st_mtime_ns))
    dst = tmp_path / f"dst-{os.urandom(4).hex()}"
    with pytest.raises(SourceChangedError):
        pinned_copy(storage, pinned, str(dst))
    assert not dst.exists()


def test_a_write_while_copying_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = RoutingStorage()
    src = tmp_path / "shard"
    src.write_bytes(os.urandom(20 * 1024 * 1024))
    pinned = storage.stat(str(src))
    assert pinned is not None
    real_update = pinning._Hashes.update
    calls = {"n": 0}

    def tampering(self: pinning._Hashes, chunk: bytes) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            time.sleep(0.01)
            with src.open("r+b") as fh:  # the attacker rewrites a later block mid-copy, same size
                fh.seek(15 * 1024 * 1024)
                fh.write(b"\x00" * 16)
        real_update(self, chunk)

    monkeypatch.setattr(pinning._Hashes, "update", tampering)
    with pytest.raises(SourceChangedError, match="while it was being copied"):
        pinned_copy(storage, pinned, str(tmp_path / "dst"))
    assert not (tmp_path / "dst").exists()


def test_pinned_copy_records_the_sha256_of_every_byte(tmp_path: Path) -> None:
    import hashlib

    storage = RoutingStorage()
    data = os.urandom(9 * 1024 * 1024 + 7)  # over one chunk, not a multiple of it
    (tmp_path / "a").write_bytes(data)
    src = storage.stat(str(tmp_path / "a"))
    assert src is not None
    proof = pinned_copy(storage, src, str(tmp_path / "out" / "a"))
    assert proof.outcome == "created" and proof.sha256 == hashlib.sha256(data).hexdigest()
    assert (tmp_path / "out" / "a").read_bytes() == data
    assert pinning.twin_mismatch(storage, proof) is None
    (tmp_path / "out" / "a").write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert pinning.twin_mismatch(storage, proof) is not None  # one flipped bit at the destination


def test_a_source_without_a_version_cannot_be_pinned(tmp_path: Path) -> None:
    from rlcleanup.ports.storage import ObjectInfo

    (tmp_path / "a").write_bytes(b"x")
    with pytest.raises(SourceChangedError, match="cannot be pinned"):
        pinned_copy(RoutingStorage(), ObjectInfo(uri=str(tmp_path / "a"), size=1), str(tmp_path / "b"))


# ---------------------------------------------------------------- P1 end to end: edits after approval


def _shard(w: World, n: int = 2) -> Path:
    return Path(w.candidate().uri) / f"model-0000{n}-of-00003.safetensors"


def _nothing_left(w: World) -> None:
    assert files_under(w.dest_root) == []
    assert files_under(Path(w.record.preserved_locations[0]) / STAGING) == []


def test_weights_edited_after_approval_with_checksum_and_mtime_kept_are_not_published(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    grant = w.grant()  # signed over the validated digest
    shard = _shard(w)
    before = shard.stat()
    data = bytearray(shard.read_bytes())
    data[-8:] = b"\x13" * 8  # tensor bytes swapped after approval, same size
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))  # and the mtime put back
    w.deliver(w.message(grant))
    action = w.action(grant.grant_id)
    assert action["refusal"] == "wrong_digest" and "changed since it was validated" in action["detail"]
    _nothing_left(w)


def test_edit_between_digest_check_and_copy_is_refused_as_source_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlcleanup.authority import artifact

    w = make_world(tmp_path)
    grant = w.grant()
    real = artifact.resolve_pinned

    def resolve_then_edit(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        result = real(*args, **kwargs)  # type: ignore[arg-type]
        _shard(w, 3).write_bytes(_shard(w, 3).read_bytes())  # the race: rewritten after the check
        return result

    monkeypatch.setattr(artifact, "resolve_pinned", resolve_then_edit)
    w.deliver(w.message(grant))
    action = w.action(grant.grant_id)
    assert action["refusal"] == "source_changed" and "model-00003" in action["detail"], action
    _nothing_left(w)


# ---------------------------------------------------------------- P4/P5: scan what is published; leave nothing


def test_token_in_provenance_we_write_ourselves_is_found(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    w.stack.ports.records.update(w.run_id, {"base_model": f"https://user:{TOKEN}@huggingface.co/org/base"})
    grant = w.grant()
    w.deliver(w.message(grant))
    action = w.action(grant.grant_id)
    assert action["refusal"] == "secret_found" and "provenance.json" in action["detail"], action
    assert TOKEN not in json.dumps(w.grant_doc(grant.grant_id))
    _nothing_left(w)


def test_bytes_written_into_staging_after_the_scan_never_reach_the_destination(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlcleanup.authority import publish as publish_mod

    w = make_world(tmp_path)
    grant = w.grant()
    real = publish_mod.scan_objects

    def scan_then_plant(storage, objects):  # type: ignore[no-untyped-def]
        objects = list(objects)
        report = real(storage, objects)
        log = next(o for o in objects if o.uri.endswith("finelog.log"))
        with open(log.uri, "a") as fh:
            fh.write(f"HF_TOKEN={TOKEN}\n")
        return report

    monkeypatch.setattr(publish_mod, "scan_objects", scan_then_plant)
    w.deliver(w.message(grant))
    action = w.action(grant.grant_id)
    assert action["refusal"] == "source_changed" and "after the scan" in action["detail"], action
    assert not any(TOKEN in p.read_text(errors="replace") for p in files_under(w.dest_root))
    assert not (w.dest_root / "model" / "_PUBLISHED.json").exists()
    _nothing_left(w)


def test_a_refusal_half_way_through_promotion_removes_what_was_promoted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = make_world(tmp_path)
    grant = w.grant()
    dest = w.dest_root / "model"
    dest.mkdir()
    (dest / "tokenizer.json").write_text('{"planted": true}')  # a conflicting object sorted after the shards
    w.deliver(w.message(grant))
    action = w.action(grant.grant_id)
    assert action["refusal"] == "destination_conflict", action
    assert [p.name for p in files_under(dest)] == ["tokenizer.json"]  # ours removed, theirs untouched
    assert files_under(Path(w.record.preserved_locations[0]) / STAGING) == []


def test_a_symlink_error_mid_apply_is_a_recorded_refusal_and_redelivery_does_not_publish(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    grant = w.grant()
    secret = tmp_path / "outside-key.pem"
    secret.write_text("-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n")
    (Path(w.candidate().uri) / "extra.json").symlink_to(secret)
    w.deliver(w.message(grant))
    doc = w.grant_doc(grant.grant_id)
    assert doc["state"] == "refused" and doc["refusal"] in {"apply_failed", "wrong_digest"}, doc
    assert "symlink" in doc["detail"]
    w.deliver(w.message(grant))  # redelivery: never applied after a refusal
    assert w.grant_doc(grant.grant_id)["state"] == "refused"
    _nothing_left(w)


def _safetensors(payload: bytes, metadata: dict[str, str] | None = None) -> bytes:
    header: dict[str, object] = {"w": {"dtype": "U8", "shape": [len(payload)], "data_offsets": [0, len(payload)]}}
    if metadata:
        header["__metadata__"] = metadata
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + payload


def test_file_kinds_come_from_parsing_not_names(tmp_path: Path) -> None:
    storage = LocalStorage()
    cases = {
        "weights.bin": f"export HF_TOKEN={TOKEN}\n".encode(),  # text under a binary name: scanned
        "run.sh": f"wandb login {'0123456789abcdef' * 2}01234567\n".encode(),
        "creds.pem": b"-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----\n",
        "tensor-name.safetensors": _safetensors(b"\x01" * 8, {"note": f"token {TOKEN}"}),
    }
    for name, raw in cases.items():
        (tmp_path / name).write_bytes(raw)
    (tmp_path / "blob.dat").write_bytes(b"\x00\x01\x02binary")
    # Named like weights, but its tensors do not fill it (text appended): not exempt, and binary, so refused.
    (tmp_path / "fake.safetensors").write_bytes(_safetensors(b"\x00" * 8) + f"\nHF_TOKEN={TOKEN}\n".encode())
    (tmp_path / "clean.safetensors").write_bytes(_safetensors(os.urandom(64)))
    infos = [storage.stat(str(p)) for p in sorted(tmp_path.iterdir())]
    report = scan_objects(storage, [i for i in infos if i is not None])
    flagged = {f.uri.rsplit("/", 1)[-1].split("#")[0] for f in report.findings}
    assert flagged == set(cases), report.findings
    assert sorted(r.rsplit("/", 1)[-1] for r in report.refused) == [
        "blob.dat: binary and not a parsed tensor file",
        "fake.safetensors: binary and not a parsed tensor file",
    ]
    assert any("clean.safetensors: 64 tensor bytes" in s for s in report.skipped)
    assert not report.clean


_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


@settings(max_examples=60, deadline=None)
@given(
    body=st.text(alphabet=_ALPHABET, min_size=30, max_size=40),
    form=st.sampled_from(["plain", "base64", "json_escaped", "concat", "continuation", "concat_newline", "long"]),
    cut=st.integers(min_value=1, max_value=29),
)
def test_hidden_forms_of_a_token_are_found(body: str, form: str, cut: int) -> None:
    import base64

    token = "hf_" + body
    head, tail = token[:cut], token[cut:]
    text = {
        "plain": f"HF_TOKEN={token}",
        "base64": "blob " + base64.b64encode(f"export HF_TOKEN={token}".encode()).decode(),
        "json_escaped": json.dumps({"t": token}).replace("h", "\\u0068", 1),
        "concat": f'tok = "{head}" + "{tail}"',
        "continuation": f'tok = "{head}\\\n{tail}"',
        "concat_newline": f'tok = ("{head}"\n    "{tail}")',
        "long": "x" * (1024 * 1024 + 17) + f" {token}",
    }[form]
    found = scan_string("step 1\n" + text + "\nstep 2\n", "u")
    assert any(f.rule == "Hugging Face token" and f.line == 2 for f in found), (form, found)
    assert all(token not in str(f) for f in found)


# The pre-filtered scan against the slow path (every rule on every view of every line): test_secret_prefilter.py


# ---------------------------------------------------------------- P6: scope edges


@pytest.mark.parametrize("prefix", ["", " ", "/", "//", "/.", "gs://", "gs:///", "s3://", "file:///", "relative/dir"])
def test_prefixes_broader_than_a_bucket_or_top_level_directory_are_refused(tmp_path: Path, prefix: str) -> None:
    assert prefix_too_broad(prefix)
    w = make_world(tmp_path, run=False)
    with pytest.raises(ValueError, match="refusing prefix"):
        register_approver(
            w.stack.ports.records, Approver(approver_id="bob", public_key=public_b64(w.key), allowed_prefixes=[prefix])
        )


@pytest.mark.parametrize("prefix", ["gs://bucket", "gs://bucket/team", "s3://b", "/data", "/tmp/x/y"])
def test_narrow_prefixes_are_accepted(prefix: str) -> None:
    assert prefix_too_broad(prefix) is None


def test_a_symlink_under_an_allowed_prefix_does_not_lead_out_of_it(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir(mode=0o700)
    (w.dest_root / "link").symlink_to(outside)
    grant = w.grant(destination=str(w.dest_root / "link" / "model"))
    w.deliver(w.message(grant))
    assert w.grant_doc(grant.grant_id)["refusal"] == "out_of_prefix"
    assert files_under(outside) == []


@pytest.mark.parametrize(
    ("fields", "refusal"),
    [
        ({"expires_at": timedelta(days=8)}, "lifetime_too_long"),
        ({"not_before": timedelta(hours=1), "expires_at": timedelta(hours=2)}, "not_yet_valid"),
        ({"granted_at": timedelta(hours=1), "expires_at": timedelta(hours=2)}, "not_yet_valid"),
        ({"naive": True}, "malformed"),
    ],
)
def test_grant_lifetimes_are_bounded(tmp_path: Path, fields: dict[str, object], refusal: str) -> None:
    w = make_world(tmp_path)
    now = datetime.now(UTC)
    overrides: dict[str, object] = {}
    if fields.get("naive"):
        overrides = {
            "granted_at": now.replace(tzinfo=None),
            "expires_at": (now + timedelta(hours=1)).replace(tzinfo=None),
        }
    else:
        overrides = {k: now + v for k, v in fields.items() if isinstance(v, timedelta)}
    grant = w.grant(**overrides)
    w.deliver(w.message(grant))
    doc = w.grant_doc(grant.grant_id)
    assert doc["state"] in {"refused", "expired"} and doc["refusal"] == refusal, doc
    assert files_under(w.dest_root) == []


def test_retryable_storage_errors_during_apply_are_retried_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = make_world(tmp_path)
    grant = w.grant()
    storage = w.stack.ports.storage
    real = storage.upload_file_if_absent
    monkeypatch.setattr(storage, "upload_file_if_absent", lambda *a: (_ for _ in ()).throw(StorageError("503")))
    w.deliver(w.message(grant))
    assert w.grant_doc(grant.grant_id)["state"] == "applying"  # released for a redelivery, every check re-run
    monkeypatch.setattr(storage, "upload_file_if_absent", real)
    w.deliver(w.message(grant))
    assert w.grant_doc(grant.grant_id)["state"] == "used"
    assert files_under(Path(w.record.preserved_locations[0]) / STAGING) == []


# ---------------------------------------------------------------- P8: local state files are owner-only


def test_record_store_and_keys_are_created_owner_only(tmp_path: Path) -> None:
    import stat as stat_mod

    from typer.testing import CliRunner

    from rlcleanup.adapters.sqlite_records import SqliteRunRecords
    from rlcleanup.cli.main import app

    old = os.umask(0o022)  # a permissive umask: the modes must not depend on it
    try:
        store = SqliteRunRecords(tmp_path / "state" / "records.db")
        store.put_doc("approvers", "x", {"public_key": "k"})
        result = CliRunner().invoke(app, ["keygen", "--out", str(tmp_path / "keys" / "alice.pem")])
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    for path in [tmp_path / "state" / "records.db", tmp_path / "keys" / "alice.pem"]:
        assert stat_mod.S_IMODE(path.stat().st_mode) == 0o600, path
    for side in (tmp_path / "state").glob("records.db-*"):
        assert stat_mod.S_IMODE(side.stat().st_mode) == 0o600, side


# ---------------------------------------------------------------- P7: cancel clearance and controllers


def test_a_second_pre_cancel_event_with_an_unreadable_run_uri_clears_nothing(tmp_path: Path) -> None:
    from authority_support import cancel_grant, cleared
    from test_authority_precancel import TRACEBACK, _event

    from rlcleanup.models.events import JobEvent

    w = make_world(tmp_path, "completed-resumed", run=False)
    for row, log in enumerate(sorted((w.tmp / "runs").rglob("attempts/*/logs/finelog.log"))[:2]):
        log.write_text(log.read_text() + TRACEBACK.format(row=1000 + row))
    w.stack.emit(_event(w, "manual", "job-1"))
    grant = cancel_grant(w)
    w.deliver(w.message(grant))
    assert w.action(grant.grant_id)["state"] == "withheld"
    decoy = JobEvent(
        source="manual", job_id="job-2", run_uri=str(tmp_path / "gone" / "run"), run_id=w.run_id,
        state="RUNNING", observed_at=datetime.now(UTC), intent="pre_cancel",
    )  # fmt: skip
    w.stack.emit(decoy)  # captures nothing of the run, and is the newest capture
    assert cleared(w) == []
    assert w.action(grant.grant_id)["state"] == "withheld"


def test_an_event_preserve_root_outside_the_deployment_root_is_refused(tmp_path: Path) -> None:
    from test_authority_precancel import _event

    w = make_world(tmp_path, run=False)
    elsewhere = tmp_path / "attacker-chosen"
    event = _event(w, "manual", "job-1").model_copy(update={"preserve_root": str(elsewhere)})
    w.stack.emit(event)
    assert files_under(elsewhere) == []


@pytest.mark.parametrize("job_id", ["--config=/tmp/evil.yaml", "-x", "../../api/jobs", "a/../../b", "id?x=1", "a b"])
def test_hostile_job_ids_never_reach_a_controller(job_id: str) -> None:
    from rlcleanup.adapters.controllers.iris import IrisController, IrisStatusCli
    from rlcleanup.adapters.controllers.ray import RayController
    from rlcleanup.ports.controllers import ControllerError

    ray = RayController("http://127.0.0.1:9")  # nothing listens: a request would fail differently
    with pytest.raises(ControllerError, match="not a ray job id"):
        ray.snapshot(job_id)
    with pytest.raises(ControllerError, match="not a iris job id"):
        IrisController(cli=IrisStatusCli("/bin/false {job_id}")).snapshot(job_id)


def test_iris_job_id_is_one_argv_element_and_never_spliced_into_an_option(tmp_path: Path) -> None:
    from rlcleanup.adapters.controllers.iris import IrisController, IrisStatusCli

    script = tmp_path / "iris"
    script.write_text('#!/bin/sh\nprintf \'{"job_id": "%s", "state": "RUNNING", "argc": "%s"}\' "$2" "$#"\n')
    script.chmod(0o755)
    snap = IrisController(cli=IrisStatusCli(f"{script} --flag={{job_id}} {{job_id}}")).snapshot("/marin/run-1")
    assert snap.raw["job_id"] == "/marin/run-1" and snap.raw["argc"] == "2"


# ---------------------------------------------------------------- P3: run ids are never truncated into collisions


@settings(max_examples=200, deadline=None)
@given(a=st.text(max_size=300), b=st.text(max_size=300))
def test_distinct_run_names_never_share_an_id(a: str, b: str) -> None:
    import re

    from rlcleanup.steps.facts import safe_run_id

    ia, ib = safe_run_id(a), safe_run_id(b)
    for value in (ia, ib):
        assert re.fullmatch(r"[A-Za-z0-9._=-]{1,200}", value), value
    if a != b and a.strip("-.") and b.strip("-."):
        assert ia != ib, (a, b)


def test_two_ids_equal_in_their_first_200_characters_stay_two_runs() -> None:
    from rlcleanup.steps.facts import safe_run_id

    base = "rl-" + "x" * 197
    assert safe_run_id(base + "-attempt-1") != safe_run_id(base + "-attempt-2")


def test_a_second_run_claiming_a_run_id_is_a_recorded_conflict_not_a_merge(tmp_path: Path) -> None:
    from rlcleanup.runtime.embedded import manual_event
    from rlcleanup.samples.generator import write_sample_run

    w = make_world(tmp_path)
    before = w.record
    impostor = write_sample_run(tmp_path / "other-team", "selection-policy")  # its records name the same run id
    w.stack.emit(manual_event(str(impostor)))
    after = w.record
    assert after.run_uri == before.run_uri == w.run_uri  # never merged into the real run's record
    assert after.candidates == before.candidates and after.preserved_locations == before.preserved_locations
    # The impostor is processed under its own location's id; the conflict is an error on both records (issue 45).
    [other] = [r for r in w.stack.ports.records.list_runs(1000) if r.run_uri == str(impostor)]
    assert other.run_id != after.run_id
    for record in (after, other):
        [conflict] = [e for e in record.errors if e.code == "run_id_conflict"]
        assert str(impostor) in conflict.message and w.run_uri in conflict.message


def test_png_text_chunks_are_scanned_and_a_broken_png_is_refused(tmp_path: Path) -> None:
    from PIL import Image, PngImagePlugin

    meta = PngImagePlugin.PngInfo()
    meta.add_text("Comment", f"HF_TOKEN={TOKEN}", zip=True)  # compressed: only a parser sees it
    Image.new("RGB", (4, 4)).save(tmp_path / "chart.png", pnginfo=meta)
    Image.new("RGB", (4, 4)).save(tmp_path / "clean.png")
    (tmp_path / "cut.png").write_bytes((tmp_path / "clean.png").read_bytes()[:-20])  # no IEND
    storage = LocalStorage()
    infos = [storage.stat(str(tmp_path / n)) for n in ("chart.png", "clean.png", "cut.png")]
    report = scan_objects(storage, [i for i in infos if i is not None])
    assert [f.uri.rsplit("/", 1)[-1] for f in report.findings] == ["chart.png#text"]
    assert [r.rsplit("/", 1)[-1] for r in report.refused] == ["cut.png: a PNG whose chunks do not parse"]


@pytest.mark.parametrize(
    ("roots", "refused"),
    [
        ({"checkpoints_root": "gs://other-team/private/ckpts"}, True),  # trainer.ckpt_path into someone else's
        ({"temp_root": "gs://runs-bucket-evil/t"}, True),  # a bucket whose name only starts like ours
        ({"exports_root": "s3://runs-bucket/exports"}, True),  # same name, another scheme
        ({}, False),
    ],
)
def test_config_named_roots_must_lie_in_the_run_buckets(roots: dict[str, str], refused: bool) -> None:
    from types import SimpleNamespace

    from rlcleanup.errors import PermanentError
    from rlcleanup.runtime.admission import check_run_roots

    layout = SimpleNamespace(
        run_uri="gs://runs-bucket/marin/run",
        temp_root="gs://runs-bucket/tmp/run",
        checkpoints_root="gs://runs-bucket/tmp/run/checkpoints",
        exports_root="gs://runs-bucket/marin/run/exports",
        attempts_root=None,
    )
    for name, value in roots.items():
        setattr(layout, name, value)
    if refused:
        with pytest.raises(PermanentError, match="outside this deployment's run buckets"):
            check_run_roots(layout, ("runs-bucket",))  # type: ignore[arg-type]
    else:
        check_run_roots(layout, ("runs-bucket",))  # type: ignore[arg-type]
    check_run_roots(layout, None)  # type: ignore[arg-type]  # not restricted: the embedded default


# ---------------------------------------------------------------- P6: who can read a local destination (own cases)

_MODES = st.sampled_from([0o700, 0o710, 0o711, 0o750, 0o751, 0o755, 0o705, 0o701])


def _read_level(mode: int) -> str:
    return "public" if mode & 0o004 else "internal" if mode & 0o040 else "private"


def _search_level(mode: int) -> str:
    return "public" if mode & 0o001 else "internal" if mode & 0o010 else "private"


_RANK = {"private": 0, "internal": 1, "public": 2}


@settings(max_examples=40, deadline=None)
@given(chain=st.lists(_MODES, min_size=1, max_size=4), link_dir_mode=_MODES)
def test_a_destination_reads_as_its_real_directory_capped_by_every_ancestor(
    chain: list[int], link_dir_mode: int
) -> None:
    """Any chain of directory modes: the reading is the destination's read bits capped by every ancestor's search
    bits; a symlink to it reads the same wherever the link sits (a link inside an owner-only directory does not
    make a world-readable directory private), and a missing leaf reads as its nearest existing ancestor."""
    import shutil
    import tempfile

    from rlcleanup.adapters.local_visibility import path_visibility

    root = Path(tempfile.mkdtemp(dir="/tmp"))  # /tmp and / let everyone through; root is opened to 0755 below
    try:
        root.chmod(0o755)
        dirs = [root.joinpath(*[f"d{i}" for i in range(depth + 1)]) for depth in range(len(chain))]
        dirs[-1].mkdir(parents=True)
        for d, mode in zip(dirs, chain, strict=True):  # modes set after creation (root may not search 0700)
            d.chmod(mode)
        expected = min([_read_level(chain[-1]), *(_search_level(m) for m in chain[:-1])], key=_RANK.__getitem__)
        assert path_visibility(str(dirs[-1])).visibility.value == expected, (chain, path_visibility(str(dirs[-1])))
        assert path_visibility(str(dirs[-1] / "not" / "yet")).visibility.value == expected
        hideout = root / "hideout"
        hideout.mkdir()
        (hideout / "link").symlink_to(dirs[-1], target_is_directory=True)
        hideout.chmod(link_dir_mode)
        assert path_visibility(str(hideout / "link")).visibility.value == expected
    finally:
        for d in [root, *root.rglob("*")]:
            if d.is_dir() and not d.is_symlink():
                d.chmod(0o700)
        shutil.rmtree(root)


@pytest.mark.parametrize("destination", ["releases-evil/m", "releases/../elsewhere/m", "releases/link/m"])
def test_deployment_prefixes_bound_a_grant_however_its_destination_is_spelt(tmp_path: Path, destination: str) -> None:
    """Own cases: inside the approver's prefix but outside the deployment's, by a sibling name sharing the
    deployment prefix's characters, a `..` walk out of it (no grant can even be made), or a symlink under it
    leading out. Refused out_of_prefix with nothing copied anywhere; a destination under it is carried out."""
    import dataclasses

    w = make_world(tmp_path)
    allowed = w.dest_root / "releases"
    allowed.mkdir(parents=True, exist_ok=True)
    (w.dest_root / "outside").mkdir()
    (allowed / "link").symlink_to(w.dest_root / "outside", target_is_directory=True)
    settings = w.stack.ports.settings.model_copy(update={"allowed_destination_prefixes": (str(allowed),)})
    w.stack.ports = dataclasses.replace(w.stack.ports, settings=settings)
    if ".." in destination:
        with pytest.raises(ValueError, match=r"'\.\.' segments"):
            w.grant(destination=str(w.dest_root / destination))
    else:
        grant = w.grant(destination=str(w.dest_root / destination))
        w.deliver(w.message(grant))
        assert w.grant_doc(grant.grant_id)["refusal"] == "out_of_prefix"
    assert [p for p in w.dest_root.rglob("*") if p.is_file()] == []
    ok = w.grant(destination=str(allowed / "model"))
    w.deliver(w.message(ok))
    assert w.grant_doc(ok.grant_id)["state"] == "used"


# ---------------------------------------------------------------- P7: job ids are data (own cases, hypothesis)


@settings(max_examples=300, deadline=None)
@given(job_id=st.one_of(st.text(max_size=40), st.from_regex(r"[-/.a-z0-9_ \n%?#=]{1,30}", fullmatch=True)))
def test_whatever_id_an_event_carries_an_accepted_one_is_inert(job_id: str) -> None:
    """Any string: refused, or an id that cannot be an option, a path walk, a query or a second argument."""
    import urllib.parse

    from rlcleanup.adapters.controllers.iris import JOB_ID as IRIS_JOB_ID
    from rlcleanup.adapters.controllers.ray import JOB_ID as RAY_JOB_ID
    from rlcleanup.ports.controllers import ControllerError, checked_job_id

    for grammar, name in ((RAY_JOB_ID, "ray"), (IRIS_JOB_ID, "iris")):
        try:
            accepted = checked_job_id(grammar, name, job_id)
        except ControllerError:
            continue
        assert accepted == job_id and not accepted.startswith("-")
        assert not any(c.isspace() or not c.isprintable() for c in accepted)
        assert ".." not in accepted.split("/") and not set(accepted) & set("?#%=&\\")
        if name == "ray":
            assert "/" not in urllib.parse.quote(accepted, safe="")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    job_id=st.from_regex(r"/?[A-Za-z0-9][A-Za-z0-9._-]{0,20}(?:/[A-Za-z0-9][A-Za-z0-9._-]{0,20}){0,3}", fullmatch=True)
)
def test_an_accepted_iris_id_reaches_the_cli_as_exactly_one_argument(tmp_path: Path, job_id: str) -> None:
    from rlcleanup.adapters.controllers.iris import IrisController, IrisStatusCli
    from rlcleanup.ports.controllers import ControllerError

    script = tmp_path / "iris"
    script.write_text('#!/bin/sh\nprintf \'{"job_id": "%s", "state": "RUNNING", "argc": "%s"}\' "$2" "$#"\n')
    script.chmod(0o755)
    try:
        snap = IrisController(cli=IrisStatusCli(f"{script} job {{job_id}}")).snapshot(job_id)
    except ControllerError:
        assert ".." in job_id.split("/")  # the only valid-looking ids the grammar still refuses
        return
    assert snap.raw["job_id"] == job_id and snap.raw["argc"] == "2"
