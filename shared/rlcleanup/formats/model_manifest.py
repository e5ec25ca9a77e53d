"""The model manifest MarinSkyRL writes beside an HF export (run-layout-v3.md §3 [MM]).

Upstream: MarinSkyRL `marinskyrl/model_manifest.py` @0da067315f3b (also read @c3a37025403c, same wire format):
`.marinskyrl-model-manifest.json` = `{format_version 1, model_id, revision, tokenizer_mode embedded|policy,
identity "sha256:<64 hex>", files [{path, size, sha256}]}`. `identity` is sha256 over the canonical JSON
(`sort_keys`, separators `,` `:`) of `{files, format_version, model_id, revision}`, plus `tokenizer_mode` only when it
is not the default `embedded` (identities written before draft manifests stay valid). The file list is every file of
the export except the manifest itself (`write_local_model_manifest` unlinks it before the snapshot) and `.cache/`;
it must name `model.safetensors.index.json`. `.marinskyrl-source.json` (`cloud/iris/artifacts.py`) marks a
materialized copy and is not the manifest.

What rlcleanup checks against the export's one listing: the identity recomputes; every listed file exists with its
size (always: a listing gives sizes for free); sha256 of the small non-weight files (config, index, tokenizer) read
here; the shards' sha256 is what a grant pins when it copies the bytes. The identity goes into the candidate.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from rlcleanup.ports.storage import ObjectInfo

MANIFEST_NAME = ".marinskyrl-model-manifest.json"
SOURCE_NAME = ".marinskyrl-source.json"
INDEX_NAME = "model.safetensors.index.json"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_IDENTITY = re.compile(r"^sha256:[0-9a-f]{64}$")
TOKENIZER_MODES = ("embedded", "policy")


@dataclass(frozen=True)
class ManifestFile:
    path: str
    size: int
    sha256: str


@dataclass
class ModelManifest:
    model_id: str | None
    revision: str | None
    tokenizer_mode: str
    identity: str
    files: list[ManifestFile]


@dataclass
class ManifestCheck:
    """What the manifest says against the export: `(code, detail)` problems, warnings, and the identity when the
    manifest itself is well formed (it names the bytes a grant would pin, whether or not they still match)."""

    identity: str | None = None
    problems: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def manifest_identity(
    model_id: str | None, revision: str | None, files: list[ManifestFile], tokenizer_mode: str = "embedded"
) -> str:
    """`_manifest_identity` of model_manifest.py, byte for byte."""
    value: dict[str, Any] = {
        "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in files],
        "format_version": 1,
        "model_id": model_id,
        "revision": revision,
    }
    if tokenizer_mode != "embedded":
        value["tokenizer_mode"] = tokenizer_mode
    encoded = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    return f"sha256:{hashlib.sha256(encoded).hexdigest()}"


def _contained(path: str) -> bool:
    pure = PurePosixPath(path)
    return path not in ("", ".") and not pure.is_absolute() and ".." not in pure.parts and "\\" not in path


def parse_manifest(value: Any) -> tuple[ModelManifest | None, str | None]:
    """(the manifest, None) or (None, why it is not one), by upstream's validators (`extra="forbid"`)."""
    if not isinstance(value, dict):
        return None, "not a JSON object"
    allowed = {"format_version", "model_id", "revision", "tokenizer_mode", "identity", "files"}
    extra = sorted(set(value) - allowed)
    if extra:
        return None, f"unknown keys {extra}"
    if value.get("format_version", 1) != 1:
        return None, f"format_version {value.get('format_version')!r} (only 1 exists)"
    model_id, revision = value.get("model_id"), value.get("revision")
    if not all(v is None or isinstance(v, str) for v in (model_id, revision)) or not {"model_id", "revision"} <= set(
        value
    ):
        return None, "model_id and revision must be present, each a string or null"
    mode = value.get("tokenizer_mode", "embedded")
    if mode not in TOKENIZER_MODES:
        return None, f"tokenizer_mode {mode!r} is not embedded or policy"
    identity = value.get("identity")
    if not isinstance(identity, str) or not _IDENTITY.match(identity):
        return None, "identity is not sha256:<64 lowercase hex>"
    raw_files = value.get("files")
    if not isinstance(raw_files, list) or not raw_files:
        return None, "files is missing or empty"
    files: list[ManifestFile] = []
    for entry in raw_files:
        if not isinstance(entry, dict) or set(entry) != {"path", "size", "sha256"}:
            return None, f"file entry {str(entry)[:120]} is not {{path, size, sha256}}"
        path, size, digest = entry["path"], entry["size"], entry["sha256"]
        if not isinstance(path, str) or not _contained(path):
            return None, f"file path {str(path)[:120]!r} is not relative and contained"
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            return None, f"{path}: size {size!r} is not a non-negative integer"
        if not isinstance(digest, str) or not _SHA256.match(digest):
            return None, f"{path}: sha256 is not 64 lowercase hex"
        files.append(ManifestFile(path, size, digest))
    paths = [f.path for f in files]
    if len(paths) != len(set(paths)):
        return None, "duplicate file paths"
    if INDEX_NAME not in paths:
        return None, f"files do not name {INDEX_NAME} (upstream requires it)"
    return ModelManifest(model_id, revision, str(mode), identity, files), None


def check_manifest(
    manifest: ModelManifest, objects: dict[str, ObjectInfo], small_digests: dict[str, str]
) -> ManifestCheck:
    """The manifest against the export's listing (`objects` by relative name) and the sha256 of the small files
    that were read (`small_digests`, by name). Problem codes are models/vocab.py's `manifest_*`."""
    check = ManifestCheck()
    expected = manifest_identity(manifest.model_id, manifest.revision, manifest.files, manifest.tokenizer_mode)
    if manifest.identity != expected:
        check.problems.append(
            ("manifest_identity_mismatch", f"{MANIFEST_NAME} says {manifest.identity}; its file list gives {expected}")
        )
    else:
        check.identity = manifest.identity
    listed = {f.path for f in manifest.files}
    for entry in manifest.files:
        info = objects.get(entry.path)
        if info is None:
            check.problems.append(
                ("manifest_file_missing", f"{entry.path} is in {MANIFEST_NAME} but not in the export")
            )
        elif info.size != entry.size:
            check.problems.append(
                ("manifest_size_mismatch", f"{entry.path} is {info.size} bytes; {MANIFEST_NAME} says {entry.size}")
            )
        elif entry.path in small_digests and small_digests[entry.path] != entry.sha256:
            check.problems.append(
                ("manifest_sha256_mismatch", f"{entry.path} hashes to {small_digests[entry.path]}, not {entry.sha256}")
            )
    unlisted = sorted(n for n in objects if n not in listed and n != MANIFEST_NAME and not n.startswith(".cache/"))
    if unlisted:
        check.warnings.append(
            f"{len(unlisted)} file(s) not in {MANIFEST_NAME} (not covered by its identity): {unlisted[:5]}"
        )
    return check
