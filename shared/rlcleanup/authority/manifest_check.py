"""A publish's staged copy checked against the export's model manifest (run-layout-v3.md §3 [MM]).

Validation checks what a listing can show without reading the weights: every file the manifest lists, with its
size, and the sha256 of the small non-weight files (`steps/validate.check_model_manifest`). The shards' sha256 is
checked here, where a grant copies the bytes anyway: every pinned copy that streams (local files, S3, across
backends) hashes every byte while copying (`authority/pinning.py`), so each file the manifest lists is held to its
sha256 at no extra read. A mismatch refuses the grant (`manifest_mismatch`) before anything reaches the destination.

A GCS same-backend publish copies by generation-pinned server-side rewrite, an S3 one (both ends behind one
endpoint) by ETag-pinned CopyObject / UploadPartCopy (P36): no byte passes through rlcleanup, so no sha256 exists.
That publish is *not* slowed down to stream the export (gigabytes through a function) just for the manifest: the
outcome says explicitly which files' sha256 was not checked, and that their size matched the manifest and the
server copied exactly the pinned source version (GCS: its generation, and the CRC32C matched; S3: its ETag, and
the MD5 matched where the ETag is one). A Hub hand-off streams every byte on upload anyway, so
there (`stream_unhashed=True`) a staged copy without a sha256 is hashed from staging before the repo is touched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlcleanup.authority.pinning import CopyProof, sha256_of
from rlcleanup.formats.checkpoints.base import read_listed_json
from rlcleanup.formats.model_manifest import MANIFEST_NAME, manifest_identity, parse_manifest
from rlcleanup.ports.storage import Storage
from rlcleanup.uris import join

SHOWN = 5  # file names an outcome's statement lists before "(+N more)"


@dataclass
class ManifestVerdict:
    """What the staged copy showed against the manifest: `mismatch` (the refusal's detail) or the files whose
    sha256 was verified and those whose sha256 no copy computed."""

    identity: str | None
    verified: list[str] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)
    mismatch: str | None = None

    def statement(self) -> str:
        said = f"model manifest {self.identity}: {len(self.verified)} file(s) sha256 verified"
        if not self.not_checked:
            return said
        return (
            f"{said}; sha256 not checked for {len(self.not_checked)} file(s) {_shown(self.not_checked)}: "
            "copied server-side (no byte seen), their sizes matched the manifest and the server copied exactly "
            "the pinned source version (GCS generation and CRC32C; S3 ETag) (validation hashed the small "
            "non-weight files)"
        )

    def as_doc(self) -> dict[str, Any]:
        return {
            "identity": self.identity,
            "sha256_verified": self.verified,
            "sha256_not_checked": self.not_checked,
            "statement": self.statement(),
        }


def _shown(names: list[str]) -> str:
    more = len(names) - SHOWN
    return str(names[:SHOWN]) + (f" (+{more} more)" if more > 0 else "")


def verify_staged_manifest(
    storage: Storage,
    staging: str,
    proofs: dict[str, CopyProof],
    expected_identity: str | None,
    *,
    stream_unhashed: bool,
) -> ManifestVerdict | None:
    """The staged export (`proofs` by name relative to `staging`) against its staged manifest, or None when the
    export ships no manifest. The manifest is read from the staged copy: exactly the pinned bytes."""
    manifest_proof = proofs.get(MANIFEST_NAME)
    if manifest_proof is None:
        return None
    raw, why = read_listed_json(storage, join(staging, MANIFEST_NAME), manifest_proof.size)
    manifest, invalid = parse_manifest(raw) if raw is not None else (None, why)
    if manifest is None:
        return ManifestVerdict(None, mismatch=f"{MANIFEST_NAME} is not a model manifest: {invalid}")
    recomputed = manifest_identity(manifest.model_id, manifest.revision, manifest.files, manifest.tokenizer_mode)
    if manifest.identity != recomputed or manifest.identity != expected_identity:
        why = f"{MANIFEST_NAME} names {manifest.identity} (its files give {recomputed}); validated {expected_identity}"
        return ManifestVerdict(None, mismatch=why)
    verdict = ManifestVerdict(manifest.identity)
    for entry in manifest.files:
        proof = proofs.get(entry.path)
        if proof is None:
            verdict.mismatch = f"{entry.path} is in {MANIFEST_NAME} but not in the pinned export"
            return verdict
        if proof.size != entry.size:
            verdict.mismatch = f"{entry.path} is {proof.size} bytes; {MANIFEST_NAME} says {entry.size}"
            return verdict
        digest = proof.sha256
        if digest is None and stream_unhashed:
            staged = storage.stat(proof.destination)
            if staged is None:
                verdict.mismatch = f"{entry.path}: its staged copy is gone"
                return verdict
            digest = sha256_of(storage, staged)
        if digest is None:
            verdict.not_checked.append(entry.path)
        elif digest != entry.sha256:
            verdict.mismatch = f"{entry.path} hashes to {digest} as copied; {MANIFEST_NAME} says {entry.sha256}"
            return verdict
        else:
            verdict.verified.append(entry.path)
    return verdict
