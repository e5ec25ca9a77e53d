"""A grant's destination as `grant` takes it (issue 47 item 3): a local path made absolute, a URI typo refused
before it could become a local folder (`hf:/org/repo`), and a `gs://` destination without Google credentials
refused in one line naming the fix, in the preview as in the grant (both read the bucket's IAM back)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rlcleanup.settings import platform
from rlcleanup.uris import is_local, strip_file_scheme


def absolute_if_local(uri: str) -> str:
    """A local path as grants name it (its real path; `~/x` and `./x` alike: the approver named it, so a symlinked
    mount above it is resolved here once, while below it the local backend follows no link); any `<scheme>://` URI
    (gs, s3, hf, ...) as given: which schemes exist is the storage registry's business, not the CLI's."""
    return str(Path(strip_file_scheme(uri)).expanduser().resolve()) if is_local(uri) else uri


def scheme_typo(destination: str) -> str | None:
    """A destination that meant a URI but is not one (`hf:/org/repo`, `gs:bucket/x`, `s3:/b`): refused, never
    read as a local folder named `hf:`."""
    found = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*):(?!//)", destination)
    if found is None or len(found.group(1)) == 1:  # `C:` on Windows-style paths stays a path
        return None
    wanted = found.group(1).lower()
    rest = destination[found.end() :].lstrip("/")
    return (
        f"destination {destination!r} is not a URI (a scheme takes `://`): did you mean {wanted}://{rest}? "
        "A local directory is given as a path (./models, /data/models)"
    )


def gcs_credentials_problem(destination: str | None) -> str | None:
    """A gs:// destination needs credentials (or the storage emulator) to read its IAM back: say so up front."""
    from rlcleanup.runtime.backends import StorageUnreachable, check_storage_reachable

    if not destination or not destination.startswith("gs://"):
        return None
    if platform().storage_emulator_host:
        try:
            check_storage_reachable(destination)
        except StorageUnreachable as exc:
            return str(exc)
        return None
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        google.auth.default()
    except DefaultCredentialsError:
        return (
            f"no Google Cloud credentials to publish to {destination} (its IAM is read back before any byte moves): "
            "set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file or run `gcloud auth "
            'application-default login`; on the local stack `eval "$(rlcleanup stack up)"` sets '
            "STORAGE_EMULATOR_HOST; or grant a local destination directory"
        )
    return None


def export_target_or_exit(
    record: Any, step: int | None, digest: str | None, destination: str | None
) -> tuple[int, str, str]:
    """An export grant's step, the request's digest read now and where it exports (authority/export.py
    `export_target`), or the command's exit with the reason; nothing is signed then."""
    from rlcleanup.authority.export import ExportTargetError, export_target
    from rlcleanup.cli.stores import fail
    from rlcleanup.runtime.backends import open_storage

    try:
        step, digest, dest = export_target(open_storage(), record, step, digest, destination)
    except ExportTargetError as exc:
        fail(str(exc), exc.exit_code)
        raise
    return step, digest, absolute_if_local(dest)


def preserve_target_or_exit(record: Any, step: int | None, digest: str | None) -> tuple[int, str]:
    """A preserve grant's step and the checkpoint's manifest digest listed now (authority/preserve.py
    `preserve_target`), or the command's exit with the reason; nothing is signed then."""
    from rlcleanup.authority.preserve import PreserveTargetError, preserve_target
    from rlcleanup.cli.stores import fail
    from rlcleanup.runtime.backends import open_storage

    try:
        return preserve_target(open_storage(), record, step, digest)
    except PreserveTargetError as exc:
        fail(str(exc), exc.exit_code)
        raise
