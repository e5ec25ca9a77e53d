"""The staging area of a publish or hand-off: inside the run's preserved location (private to rlcleanup), never
under the destination, so bytes that fail a check are never readable by the destination's audience; emptied on
every refusal and before every attempt."""

from __future__ import annotations

import logging

from rlcleanup.authority.grants import Grant
from rlcleanup.models.record import CompletionRecord
from rlcleanup.ports.storage import Storage
from rlcleanup.uris import join

log = logging.getLogger(__name__)

STAGING = "authority/staging"


def staging_root(record: CompletionRecord, grant: Grant) -> str:
    """Where a publish is assembled before anything reaches the destination: inside the run's preserved location
    (the deployment's evidence store, private to rlcleanup), never under the destination, so bytes that fail a
    check are never readable by the destination's audience."""
    return join(record.preserved_locations[0], STAGING, grant.grant_id)


def clean_prefix(storage: Storage, prefix: str) -> None:
    for info in list(storage.list(prefix)):
        storage.delete(info.uri)


def discard_staging(storage: Storage, record: CompletionRecord, grant: Grant) -> None:
    """After an attempt failed: remove what this grant staged. Best effort (logged, never raised): the failure
    being filed matters more, and a later attempt empties the staging area before it stages anything."""
    if not record.preserved_locations:
        return
    try:
        clean_prefix(storage, staging_root(record, grant))
    except Exception:
        log.warning("could not empty the staging area of grant %s", grant.grant_id, exc_info=True)
