"""Audit what a run published itself: the Hub repo its own export job pushed to, read back read-only.

Upstream, as read (marin-community/MarinSkyRL, mirror snapshot a559688; run-layout-v3.md §2 for the deferred
export job): `skyrl-train/skyrl_train/callbacks/builtin.py` `HFHubUploadCallback._process_pending_uploads` runs
`api.upload_folder(folder_path=<export_path>/global_step_<N>/policy, repo_id, path_in_repo="", revision)`: each
step's export goes to the repo ROOT ("keeping the repo from_pretrained-able"), the last one uploaded wins the root;
with `hf_upload_mode: all` it is also archived under `checkpoints/step_<N>/`. The repo is created with
`create_repo(private=hf_hub_private, exist_ok=True)` (`hf_hub_private` defaults to False there). The keys are
`trainer.hf_hub_repo_id`, `hf_hub_private`, `hf_hub_revision` (default main) and `hf_upload_mode` (default latest),
read by `build_callbacks` only when `hf_save_interval > 0`; the deferred export job (`cloud/iris/
export_hf_checkpoint.py`, cited in formats/export_request.py) carries the same fields in `hf_export_request.json`
and publishes only once its request is `complete`.

What is audited: a repo an export request names whose request is `complete` (the export job reported success), and
a repo `trainer.hf_hub_repo_id` names when the run has a valid export. Per repo, against the newest such step:
visibility vs `hf_hub_private`; the root's files vs the export's `.marinskyrl-model-manifest.json` (sha256 per file:
the Hub's LFS oid, or the bytes of a small regular file); a secret scan (authority/secrets.py) of every small text
file published; and whether the root loads with `from_pretrained` (config.json and tokenizer parse, weights at the
root, not nested under a step directory: formats/checkpoints/hf_safetensors.py's names and checks).

Never a write: the `HubReader` port has no write call. The repo id is data, validated by huggingface_hub's own
validator (ports/hub.repo_of) before any request; the endpoint is the deployment's (HF_ENDPOINT), never one a
run's file names. A Hub that does not answer is retried, then recorded `unreachable` (never a silent pass).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlcleanup.authority.secrets import ScanBoundExceeded, scan_string
from rlcleanup.formats.checkpoints.base import read_json
from rlcleanup.formats.checkpoints.hf_safetensors import (
    CONFIG_NAME,
    INDEX_NAME,
    SINGLE_NAME,
    has_tokenizer_files,
    is_vlm,
)
from rlcleanup.formats.config import get
from rlcleanup.formats.export_request import COMPLETE
from rlcleanup.formats.model_manifest import MANIFEST_NAME, parse_manifest
from rlcleanup.formats.weight_files import has_weight_suffix
from rlcleanup.models.record import Candidate, HubAudit
from rlcleanup.models.vocab import HubAuditProblem as HP
from rlcleanup.models.vocab import Visibility, problem
from rlcleanup.ports.hub import SCHEME, HubReader, RemoteFile, repo_of
from rlcleanup.ports.storage import Storage, StorageAccessError, StorageError
from rlcleanup.steps.layout_model import RunLayout
from rlcleanup.steps.remaining import NEEDS_PERSON_PREFIX
from rlcleanup.uris import join

CONFIG_KEY = "trainer.hf_hub_repo_id"
SMALL_FILE_BYTES = 1 << 20  # a published text file larger than this is not read (weights are never read)
READ_ATTEMPTS = 3  # a transient Hub failure is retried this many times in all, then recorded as unreachable
_ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


@dataclass(frozen=True)
class HubTarget:
    repo_id: str
    named_by: str
    step: int | None
    export_uri: str | None
    expected_private: bool | None
    revision: str


def targets(layout: RunLayout, candidates: list[Candidate]) -> list[HubTarget]:
    """One target per repo the run's export job published to, at the newest step it published."""
    found: dict[str, HubTarget] = {}

    def add(target: HubTarget) -> None:
        held = found.get(target.repo_id)
        if held is None or (target.step or -1) > (held.step or -1):
            found[target.repo_id] = target

    for c in candidates:
        request = c.export_request
        if request is not None and request.hub_repo_id and request.status == COMPLETE:
            add(
                HubTarget(
                    request.hub_repo_id,
                    request.uri,
                    c.step,
                    c.uri,
                    request.hub_private,
                    request.hub_revision or "main",
                )
            )
    configured = get(layout.skyrl, CONFIG_KEY)
    interval = get(layout.skyrl, "trainer.hf_save_interval")
    valid = [c for c in candidates if c.valid]
    if isinstance(configured, str) and configured.strip() and isinstance(interval, int) and interval > 0 and valid:
        newest = max(valid, key=lambda c: c.step)
        private = get(layout.skyrl, "trainer.hf_hub_private")
        revision = get(layout.skyrl, "trainer.hf_hub_revision")
        add(
            HubTarget(
                configured.strip(),
                CONFIG_KEY,
                newest.step,
                newest.uri,
                private if isinstance(private, bool) else False,  # upstream's default
                revision if isinstance(revision, str) and revision else "main",
            )
        )
    return [found[k] for k in sorted(found)]


def not_configured(target: HubTarget) -> HubAudit:
    return HubAudit(
        repo_id=target.repo_id,
        named_by=target.named_by,
        step=target.step,
        revision=target.revision,
        status="not_configured",
        expected_private=target.expected_private,
    )


def audit(storage: Storage, hub: HubReader, target: HubTarget) -> HubAudit:
    """Read the repo back; retried on transient Hub errors, then `unreachable`."""
    base = {
        "repo_id": target.repo_id,
        "named_by": target.named_by,
        "step": target.step,
        "revision": target.revision,
        "endpoint": hub.endpoint,
        "expected_private": target.expected_private,
    }
    try:
        repo_of(f"{SCHEME}{target.repo_id}")
    except ValueError as exc:
        return _finished(HubAudit(**base, status="problems"), [problem(HP.hub_repo_invalid, str(exc))])
    last, rejected = "", False
    for attempt in range(1, READ_ATTEMPTS + 1):
        result = HubAudit(**base, status="checked", attempts=attempt)
        try:
            return _finished(result, _read_back(storage, hub, target, result))
        except StorageAccessError as exc:
            return _finished(result, [problem(HP.hub_repo_not_found, f"the Hub refused the audit's read: {exc}")])
        except StorageError as exc:
            last, rejected = str(exc)[:300], False
        except ValueError as exc:
            # A 4xx after the listing (the adapter's mapping): a file listed, then 404 when read (removed or hidden
            # between the two requests). Read back again from the listing; refused every time, recorded, not passed.
            last, rejected = str(exc)[:300], True
    if rejected:
        failed = HubAudit(**base, status="problems", attempts=READ_ATTEMPTS)
        why = f"a file the repo lists could not be read ({READ_ATTEMPTS} attempts): {last}"
        return _finished(failed, [problem(HP.hub_file_unreadable, why)])
    failed = HubAudit(**base, status="unreachable", attempts=READ_ATTEMPTS)
    return _finished(failed, [problem(HP.hub_unreachable, f"{READ_ATTEMPTS} attempts; last: {last}")], "unreachable")


def audit_failed(target: HubTarget, endpoint: str, error: BaseException) -> HubAudit:
    """An audit that failed on something no retry or mapping covers (a defect, logged by the caller): recorded as
    not passed, so the run still gets its record and a person its item."""
    base = HubAudit(
        repo_id=target.repo_id,
        named_by=target.named_by,
        step=target.step,
        revision=target.revision,
        endpoint=endpoint,
        expected_private=target.expected_private,
        status="problems",
    )
    why = f"the audit failed: internal error {type(error).__name__} (see the function's log); nothing was checked"
    return _finished(base, [problem(HP.hub_audit_failed, why)])


def _finished(audit: HubAudit, problems: list[str], status: str | None = None) -> HubAudit:
    codes = sorted({p.split(":", 1)[0] for p in problems})
    return audit.model_copy(
        update={
            "problems": problems,
            "problem_codes": codes,
            "status": status or ("problems" if problems else "checked"),
        }
    )


def _read_back(storage: Storage, hub: HubReader, target: HubTarget, result: HubAudit) -> list[str]:
    repo, rev = target.repo_id, target.revision
    reading = hub.visibility(repo)
    if reading is None:
        return [problem(HP.hub_repo_not_found, f"{repo} is not on {hub.endpoint} (or the audit's token cannot see it)")]
    result.visibility = reading.visibility.value if reading.visibility else None
    problems: list[str] = []
    if target.expected_private is not None and reading.visibility is not None:
        wanted = Visibility.private if target.expected_private else Visibility.public
        if reading.visibility is not wanted:
            problems.append(
                problem(
                    HP.hub_visibility_mismatch,
                    f"{repo} is {reading.visibility.value} but {target.named_by} asked for {wanted.value}",
                )
            )
    names = hub.file_names(repo, rev)
    remote = hub.remote_files(repo, names, rev)
    small: dict[str, bytes] = {}

    def read(name: str) -> bytes | None:
        if name not in small:
            data = hub.read_small(repo, name, rev, SMALL_FILE_BYTES)
            if data is None:
                return None
            small[name] = data
        return small[name]

    problems += _against_manifest(storage, target, remote, read, result)
    problems += _secrets(repo, remote, read, result)
    problems += _loads(repo, remote, read)
    return problems


def _against_manifest(
    storage: Storage,
    target: HubTarget,
    remote: dict[str, RemoteFile],
    read: Callable[[str], bytes | None],
    result: HubAudit,
) -> list[str]:
    if target.export_uri is None:
        return []
    value, _why = read_json(storage, join(target.export_uri, MANIFEST_NAME))
    manifest, _bad = parse_manifest(value) if value is not None else (None, None)
    if manifest is None:
        return []  # no manifest (or an invalid one, which validation records): nothing to compare the files with
    problems: list[str] = []
    for entry in manifest.files:
        result.files_checked += 1
        found = remote.get(entry.path)
        if found is None:
            problems.append(problem(HP.hub_file_missing, f"{entry.path} (in {MANIFEST_NAME}) is not in the repo"))
            continue
        sha = found.sha256
        if sha is None and found.size <= SMALL_FILE_BYTES:
            data = read(entry.path)
            sha = hashlib.sha256(data).hexdigest() if data is not None else None
        if found.size != entry.size or (sha is not None and sha != entry.sha256):
            problems.append(
                problem(
                    HP.hub_sha256_mismatch,
                    f"{entry.path}: the Hub has {found.size} bytes, sha256 {sha}; {MANIFEST_NAME} says "
                    f"{entry.size} bytes, sha256 {entry.sha256}",
                )
            )
    return problems


def _is_text(name: str, info: RemoteFile) -> bool:
    return info.sha256 is None and info.size <= SMALL_FILE_BYTES and not has_weight_suffix(name.lower())


def _secrets(
    repo: str, remote: dict[str, RemoteFile], read: Callable[[str], bytes | None], result: HubAudit
) -> list[str]:
    """Every small regular file as published (the bytes the Hub serves), scanned; only rule and line recorded."""
    problems: list[str] = []
    for name in sorted(n for n, info in remote.items() if _is_text(n, info)):
        data = read(name)
        if data is None:
            continue
        result.text_files_scanned += 1
        try:
            findings = scan_string(data.decode("utf-8", errors="replace"), f"{SCHEME}{repo}/{name}")
        except ScanBoundExceeded as exc:
            problems.append(problem(HP.hub_secret_found, f"{name} could not be scanned, treated as unsafe: {exc}"))
            continue
        for finding in findings:
            problems.append(problem(HP.hub_secret_found, f"{name}:{finding.line}: {finding.rule}"))
    return problems


def _json(read: Callable[[str], bytes | None], name: str) -> Any:
    data = read(name)
    try:
        return json.loads(data) if data is not None else None
    except ValueError:
        return None


def _loads(repo: str, remote: dict[str, RemoteFile], read: Callable[[str], bytes | None]) -> list[str]:
    """`from_pretrained(repo)` shape at the root: config.json parses, weights and tokenizer at the root."""
    root = {n for n in remote if "/" not in n}
    why: list[str] = []
    config = _json(read, CONFIG_NAME) if CONFIG_NAME in root else None
    if not isinstance(config, dict):
        why.append("config.json is missing at the root" if CONFIG_NAME not in root else "config.json does not parse")
    weights = {SINGLE_NAME, INDEX_NAME, *_ADAPTER_WEIGHTS} & root
    if not weights:
        nested = sorted(n for n in remote if "/" in n and n.rsplit("/", 1)[1] in (SINGLE_NAME, INDEX_NAME))
        where = f": weights nested under a directory ({nested[0]})" if nested else ""
        why.append(f"no weights at the root{where}")
    if INDEX_NAME in root and not isinstance(_json(read, INDEX_NAME), dict):
        why.append(f"{INDEX_NAME} does not parse")
    if not (weights & set(_ADAPTER_WEIGHTS)) and not has_tokenizer_files(root) and not is_vlm(config):
        why.append("no tokenizer files at the root")
    for name in sorted(n for n in root if n.startswith("tokenizer") and n.endswith(".json")):
        if not isinstance(_json(read, name), dict):
            why.append(f"{name} does not parse")
    return [problem(HP.hub_layout_unloadable, f"{repo}: {'; '.join(why)}")] if why else []


def remaining_items(audits: list[HubAudit]) -> list[str]:
    """The record's person items: a repo with problems or unread is needs_person; an unaudited one is a note."""
    items: list[str] = []
    for a in audits:
        if a.status == "not_configured":
            items.append(
                f"Hub repo {a.repo_id} (named by {a.named_by}) was published by the run's export job outside any "
                "grant and not audited: the deployment does not enable the Hub audit (RLCLEANUP_HUB_AUDIT)"
            )
        elif a.status != "checked":
            items.append(
                f"{NEEDS_PERSON_PREFIX}Hub repo {a.repo_id} published by the run's export job: "
                f"{', '.join(a.problem_codes)} (hub_audits on the record)"
            )
    return items
