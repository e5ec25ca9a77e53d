"""Signed authority grants: the model, canonical JSON, Ed25519 signatures, approvers and verification.

A grant is bound to one run, one action, one artifact (step + digest), one destination and a deadline. The
signature covers the canonical JSON of the grant object exactly as sent (sorted keys, no whitespace), so
verification never depends on how a model re-serializes a timestamp.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import secrets
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rlcleanup.models.vocab import Visibility as Visibility  # re-exported: grants name one, callers import it here
from rlcleanup.ports import collections
from rlcleanup.ports.collections import Documents
from rlcleanup.ports.hub import is_hub, repo_of
from rlcleanup.ports.records import RunRecords
from rlcleanup.settings import GrantLimits, read
from rlcleanup.uris import LOCAL_SCHEME, scheme, strip_file_scheme, within

# Every revoked public key, by its fingerprint, outside `approvers/`: re-adding an approver (or another id) with a
# revoked key never brings it back (authority/approvers.py writes it; P37).
_ID = r"^[A-Za-z0-9._=-]{1,200}$"


class Action(StrEnum):
    publish = "publish"
    handoff = "handoff"
    register = "register"
    reclaim = "reclaim"
    cancel = "cancel"
    purge = "purge"  # delete what a reclaim quarantined before its expiry (authority/quarantine.py)
    export = "export"  # run an owed HF export on the run's controller (authority/export.py); rlcleanup converts nothing
    preserve = (
        "preserve"  # copy a checkpoint server-side to durable storage (authority/preserve.py), e.g. before export
    )


class GrantState(StrEnum):
    pending = "pending"  # verified, waiting for its record (or capture) to be ready
    applying = "applying"  # claimed by a worker; a crash leaves it here and redelivery resumes it
    used = "used"
    refused = "refused"
    expired = "expired"


class Refusal(StrEnum):
    """Why a grant was refused; the wire spelling is the value."""

    malformed = "malformed"
    unsigned = "unsigned"
    bad_signature = "bad_signature"
    unknown_approver = "unknown_approver"
    expired = "expired"
    wrong_run = "wrong_run"
    wrong_digest = "wrong_digest"
    wrong_action = "wrong_action"
    out_of_prefix = "out_of_prefix"
    replayed = "replayed"
    # Gates checked after the grant itself is valid.
    no_candidate = "no_candidate"
    candidate_invalid = "candidate_invalid"
    selection_unresolved = "selection_unresolved"
    secret_found = "secret_found"
    visibility_broader = "visibility_broader"
    visibility_unknown = "visibility_unknown"
    destination_conflict = "destination_conflict"
    destination_unverified = "destination_unverified"
    destination_altered = "destination_altered"
    not_applicable = "not_applicable"
    record_not_eligible = "record_not_eligible"
    source_changed = "source_changed"  # an object is not the version the grant pinned (edited since validation)
    manifest_mismatch = "manifest_mismatch"  # the copied bytes are not what the export's model manifest lists
    unscannable = "unscannable"  # bytes that would be published could not be scanned (binary, not parsed tensors)
    apply_failed = "apply_failed"  # carrying the grant out raised something no retry fixes; nothing left behind
    plan_rejected = "plan_rejected"  # a reclaim plan names an object outside the granted export, or evidence
    not_yet_valid = "not_yet_valid"  # before not_before (beyond the clock-skew allowance)
    lifetime_too_long = "lifetime_too_long"  # expires_at - granted_at over the deployment's maximum
    evidence_tampered = "evidence_tampered"  # a preserved object no longer matches the sealed manifest's hashes
    run_ended = "run_ended"  # a cancel for a run whose end was already observed: there is no live job to cancel
    approver_revoked = "approver_revoked"  # signed by an approver (or a key) revoked since: never applied (P37)
    # Export grants (authority/export.py).
    request_invalid = "request_invalid"  # hf_export_request.json is not upstream's schema, or names another step
    not_allowed = "not_allowed"  # a path, host or command outside the allowed set, or no converter configured
    expires_too_soon = "expires_too_soon"  # the checkpoint expires before the export could finish
    no_controller = "no_controller"  # the run's controller is not configured in this deployment
    # Preserve grants (authority/preserve.py).
    destination_expires = "destination_expires"  # a lifecycle rule would delete the copy: not durable storage


class Grant(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str = Field(pattern=_ID)
    action: Action
    step: int | None = Field(default=None, ge=0)
    digest: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    destination: str | None = Field(default=None, max_length=2048)
    visibility: Visibility = Visibility.private
    granted_by: str = Field(pattern=_ID)
    granted_at: datetime
    expires_at: datetime
    not_before: datetime | None = None  # defaults to granted_at
    reason: str = Field(default="", max_length=2000)
    grant_id: str = Field(default_factory=lambda: uuid.uuid4().hex, pattern=_ID)
    nonce: str = Field(default_factory=lambda: secrets.token_hex(16), min_length=16, max_length=128)

    @field_validator("destination")
    @classmethod
    def _no_traversal(cls, value: str | None) -> str | None:
        if value is not None and ("\x00" in value or any(seg == ".." for seg in value.split("/"))):
            raise ValueError("destination must not contain '..' segments or NUL")
        return value


def canonical_json(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sign(grant: Grant, key: Ed25519PrivateKey) -> dict[str, Any]:
    """The wire message: {"grant": {...}, "signature": base64}."""
    body = grant.model_dump(mode="json")
    return {"grant": body, "signature": base64.b64encode(key.sign(canonical_json(body))).decode()}


# ---------------------------------------------------------------- keys and approvers


def new_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def private_pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def load_private_key(pem: bytes) -> Ed25519PrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("not an Ed25519 private key")
    return key


def public_b64(key: Ed25519PrivateKey) -> str:
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


class Approver(BaseModel):
    model_config = ConfigDict(extra="ignore")

    approver_id: str = Field(pattern=_ID)
    public_key: str  # base64 of the 32 raw Ed25519 bytes
    allowed_prefixes: list[str] = Field(default_factory=list)
    # Set once by `approver revoke` (authority/approvers.py): who revoked it, when and why. A revoked approver's
    # grants that were not used yet are refused as `approver_revoked`; its used grants stay on their records.
    revoked_at: datetime | None = None
    revoked_by: str | None = None
    revoked_reason: str = ""

    def verify_key(self) -> Ed25519PublicKey:
        raw = base64.b64decode(self.public_key, validate=True)
        return Ed25519PublicKey.from_public_bytes(raw)

    def covers(self, destination: str) -> bool:
        """Prefix match on a path-segment boundary: gs://b/team does not cover gs://b/team-other. Local paths are
        compared as real paths (symlinks resolved on both sides), so a link under a prefix cannot lead out of it."""
        target = real_location(destination)
        for prefix in self.allowed_prefixes:
            if prefix_too_broad(prefix):  # stored before the rule existed: covers nothing, never everything
                continue
            p = real_location(prefix).rstrip("/")
            if target == p or target.startswith(p + "/"):
                return True
        return False


def real_location(uri: str) -> str:
    """A local path with every existing symlink resolved (what the kernel will actually write to); other
    schemes as given (object stores have no links)."""
    if scheme(uri) != LOCAL_SCHEME:
        return uri
    return os.path.realpath(strip_file_scheme(uri))


def prefix_too_broad(prefix: str) -> str | None:
    """Why an approver prefix would grant too much (None: it is narrow enough). A prefix must name at least a
    bucket, or an absolute local directory below the root: "", "/", "gs://", "s3://" would cover everything."""
    p = prefix.strip()
    if not p:
        return "an empty prefix would cover every destination"
    if "://" in p and scheme(p) != LOCAL_SCHEME:
        rest = p.split("://", 1)[1].strip("/")
        if not rest:
            return f"{prefix!r} names no bucket: it would cover every bucket"
        return None
    path = strip_file_scheme(p)
    if not path.startswith("/"):
        return f"{prefix!r} is not an absolute path"
    if not [seg for seg in path.split("/") if seg and seg != "."] or ".." in path.split("/"):
        return f"{prefix!r} covers the whole filesystem"
    return None


def key_fingerprint(public_key: str) -> str:
    """A public key's document id in `revoked_keys/`: SHA-256 of its raw bytes (base64 spellings cannot differ)."""
    return hashlib.sha256(base64.b64decode(public_key, validate=True)).hexdigest()


class RevokedKey(BaseModel):
    """revoked_keys/{key fingerprint}: a key that signs nothing any more, whoever presents it."""

    model_config = ConfigDict(extra="forbid")
    approver_id: str
    revoked_at: str
    revoked_by: str
    reason: str = ""


def revoked_keys(records: RunRecords) -> Documents[RevokedKey]:
    return collections.REVOKED_KEYS.bind(records, RevokedKey)


def approvers(records: RunRecords) -> Documents[Approver]:
    """Approvers by id; the id is the document's, never a field stored in it."""
    return collections.APPROVERS.bind(records, Approver, id_field="approver_id")


def key_revocation(records: RunRecords, public_key: str) -> RevokedKey | None:
    """The revocation of this key (who, when, which approver), or None."""
    try:
        return revoked_keys(records).get(key_fingerprint(public_key))
    except (binascii.Error, ValueError):
        return None  # a key that does not decode verifies nothing anyway


def register_approver(records: RunRecords, approver: Approver) -> None:
    approver.verify_key()  # refuse to store a key that could never verify anything
    for prefix in approver.allowed_prefixes:
        if why := prefix_too_broad(prefix):
            raise ValueError(f"refusing prefix {prefix!r}: {why}")
    revoked = key_revocation(records, approver.public_key)
    if revoked is not None:
        raise ValueError(
            f"this public key was revoked at {revoked.revoked_at} by {revoked.revoked_by} "
            f"(approver {revoked.approver_id}): a revoked key is never registered again; `rlcleanup keygen` "
            "makes a new one"
        )
    fresh = approver.model_copy(update={"revoked_at": None, "revoked_by": None, "revoked_reason": ""})
    approvers(records).put(approver.approver_id, fresh)


def get_approver(records: RunRecords, approver_id: str) -> Approver | None:
    return approvers(records).get(approver_id)


def revocation(records: RunRecords, approver: Approver) -> str | None:
    """Why the approver's grants no longer count (revoked id or revoked key), or None."""
    if approver.revoked_at is not None:
        return (
            f"approver {approver.approver_id} was revoked at {approver.revoked_at.isoformat()} by "
            f"{approver.revoked_by}" + (f" ({approver.revoked_reason})" if approver.revoked_reason else "")
        )
    key = key_revocation(records, approver.public_key)
    if key is not None:
        return f"{approver.approver_id}'s key was revoked at {key.revoked_at} by {key.revoked_by}"
    return None


# ---------------------------------------------------------------- verification


@dataclass(frozen=True)
class LifetimeLimits:
    max_lifetime: timedelta
    clock_skew: timedelta


def lifetime_limits(limits: GrantLimits | None = None) -> LifetimeLimits:
    """RLCLEANUP_GRANT_MAX_LIFETIME_SECONDS (default 7 days) and RLCLEANUP_GRANT_CLOCK_SKEW_SECONDS (default
    120), settings.GrantLimits: how long one grant may be valid at most, and how far an approver's clock may run
    ahead of ours. The deployment's, read once at cold start (`DeploymentSettings.grant_limits`), when given; else
    read now (a command's own process); a bad value names the variable."""
    limits = limits or read(GrantLimits)
    return LifetimeLimits(timedelta(seconds=limits.max_lifetime_seconds), timedelta(seconds=limits.clock_skew_seconds))


@dataclass(frozen=True)
class Verdict:
    grant: Grant | None
    refusal: Refusal | None = None
    detail: str = ""
    authentic: bool = False  # signature verified: only then may the grant's own id be trusted as a document key
    raw: dict[str, Any] | None = None  # the grant object exactly as sent (what the signature covers)
    signature: str | None = None

    @property
    def ok(self) -> bool:
        return self.refusal is None


def decode_message(data: bytes) -> tuple[dict[str, Any], dict[str, Any] | None, str | None]:
    """(envelope, raw grant object, signature) without trusting any of it yet."""
    envelope = json.loads(data)
    if not isinstance(envelope, dict):
        raise ValueError("a grant message is a JSON object")
    raw = envelope.get("grant")
    signature = envelope.get("signature")
    return envelope, raw if isinstance(raw, dict) else None, signature if isinstance(signature, str) else None


def verify(
    records: RunRecords,
    data: bytes,
    now: datetime,
    *,
    expected_run: str | None = None,
    intended_action: str | None = None,
    deployment_prefixes: tuple[str, ...] | None = None,
    limits: GrantLimits | None = None,
) -> Verdict:
    """Authenticity, then scope. Artifact (digest) and replay checks need the record and happen later.
    `deployment_prefixes` (RLCLEANUP_ALLOWED_DESTINATION_PREFIXES; None = not restricted) bound every approver;
    `limits`: the deployment's grant lifetime limits (None: read from the environment now)."""
    try:
        envelope, raw, signature = decode_message(data)
    except (ValueError, UnicodeDecodeError) as exc:
        return Verdict(None, Refusal.malformed, f"not a JSON grant message: {exc}")
    if raw is None:
        return Verdict(None, Refusal.malformed, "no 'grant' object in the message")
    try:
        grant = Grant.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        return Verdict(None, Refusal.malformed, f"{first['msg']} at {'.'.join(map(str, first['loc']))}")
    if not signature:
        return Verdict(grant, Refusal.unsigned, "the message carries no signature", raw=raw)
    approver = get_approver(records, grant.granted_by)
    if approver is None:
        return Verdict(grant, Refusal.unknown_approver, f"no approver {grant.granted_by!r} is registered", raw=raw)
    try:
        approver.verify_key().verify(base64.b64decode(signature, validate=True), canonical_json(raw))
    except (InvalidSignature, binascii.Error, ValueError):
        detail = f"signature does not verify with {grant.granted_by}'s key"
        return Verdict(grant, Refusal.bad_signature, detail, raw=raw, signature=signature)
    revoked = revocation(records, approver)
    if revoked is not None:  # authentic (filed under its own id), and never applied: P37
        return Verdict(grant, Refusal.approver_revoked, revoked, authentic=True, raw=raw, signature=signature)
    verdict = check_scope(
        grant,
        approver,
        now,
        envelope,
        expected_run=expected_run,
        intended_action=intended_action,
        deployment_prefixes=deployment_prefixes,
        limits=limits,
    )
    return replace(verdict, raw=raw, signature=signature)


def check_scope(  # noqa: C901 -- one refusal per scope rule of the grant, read in the order they apply
    grant: Grant,
    approver: Approver,
    now: datetime,
    envelope: dict[str, Any],
    *,
    expected_run: str | None,
    intended_action: str | None,
    deployment_prefixes: tuple[str, ...] | None = None,
    limits: GrantLimits | None = None,
) -> Verdict:
    def refuse(reason: Refusal, detail: str) -> Verdict:
        return Verdict(grant, reason, detail, authentic=True)

    run = expected_run or envelope.get("run_id")
    if run is not None and run != grant.run_id:
        return refuse(Refusal.wrong_run, f"grant is for run {grant.run_id!r}, delivered for {run!r}")
    wanted = intended_action or envelope.get("intent")
    if wanted is not None and wanted != grant.action.value:
        return refuse(Refusal.wrong_action, f"a {grant.action.value} grant does not authorize {wanted}")
    naive = [
        n for n in ("granted_at", "expires_at", "not_before") if (t := getattr(grant, n)) and t.utcoffset() is None
    ]
    if naive:  # a timestamp without a zone means something else on every machine: never guessed
        return refuse(Refusal.malformed, f"timestamps without a time zone: {naive}")
    lifetime = lifetime_limits(limits)
    if now >= grant.expires_at:
        return refuse(Refusal.expired, f"expired at {grant.expires_at.isoformat()}")
    if grant.expires_at <= grant.granted_at:
        return refuse(Refusal.expired, "expires_at is not after granted_at")
    start = grant.not_before or grant.granted_at
    if now + lifetime.clock_skew < start:
        return refuse(Refusal.not_yet_valid, f"valid from {start.isoformat()} (now {now.isoformat()})")
    if grant.expires_at - min(grant.granted_at, start) > lifetime.max_lifetime:
        return refuse(
            Refusal.lifetime_too_long,
            f"valid for {grant.expires_at - min(grant.granted_at, start)}, the maximum is {lifetime.max_lifetime}",
        )
    if grant.action is not Action.cancel:
        if not grant.destination:
            return refuse(Refusal.malformed, f"a {grant.action.value} grant must name a destination")
        if is_hub(grant.destination):
            try:
                repo_of(grant.destination)
            except ValueError as exc:  # huggingface_hub's own validator: the grant ends here, never `applying`
                return refuse(Refusal.malformed, str(exc))
        if not approver.covers(grant.destination):
            return refuse(
                Refusal.out_of_prefix,
                f"{grant.destination} is outside {grant.granted_by}'s allowed prefixes {approver.allowed_prefixes}",
            )
        real_prefixes = None if deployment_prefixes is None else tuple(map(real_location, deployment_prefixes))
        if not within(real_location(grant.destination), real_prefixes):
            # The deployment can write only there (IAM on those buckets): refuse with the reason, before any byte.
            # Real paths on both sides, as for an approver's prefixes: a link under the prefix cannot lead out.
            return refuse(
                Refusal.out_of_prefix,
                f"{grant.destination} is outside this deployment's allowed destination prefixes "
                f"{list(deployment_prefixes or ())} (RLCLEANUP_ALLOWED_DESTINATION_PREFIXES)",
            )
        if grant.digest is None:
            return refuse(Refusal.malformed, f"a {grant.action.value} grant must name the artifact digest")
    return Verdict(grant, authentic=True)
