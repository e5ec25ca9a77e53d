"""Decode the Pub/Sub message inside a CloudEvent (raw push converted by functions-framework, or Eventarc), its
payload as a message model (`decode`), and which run a payload names as far as it can be read (`identify`)."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from rlcleanup.errors import InvalidMessage, PermanentError
from rlcleanup.steps.facts import safe_run_id
from rlcleanup.uris import basename, parent

M = TypeVar("M", bound=BaseModel)

MAX_MESSAGE_BYTES = 10 * 1024 * 1024  # Pub/Sub's own limit


@dataclass(frozen=True)
class PubSubMessage:
    data: bytes
    attributes: dict[str, str]
    message_id: str | None
    topic: str | None


def decode_cloud_event(event_data: Any, source: str | None = None) -> PubSubMessage:
    """Only `data.message` is read; `subscription` is optional (the emulator conversion drops it)."""
    if isinstance(event_data, bytes | str):
        try:
            event_data = json.loads(event_data)
        except ValueError as exc:
            raise PermanentError("undecodable", f"CloudEvent data is not JSON: {exc}") from exc
    message = event_data.get("message") if isinstance(event_data, dict) else None
    if not isinstance(message, dict):
        raise PermanentError("undecodable", "CloudEvent data has no Pub/Sub `message`")
    raw = message.get("data") or ""
    if not isinstance(raw, str) or len(raw) > MAX_MESSAGE_BYTES * 4 // 3 + 4:
        raise PermanentError("undecodable", "Pub/Sub message data is not a base64 string of allowed size")
    try:
        data = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise PermanentError("undecodable", f"Pub/Sub message data is not base64: {exc}") from exc
    attributes = message.get("attributes") or {}
    if not isinstance(attributes, dict):
        attributes = {}
    topic = source.rsplit("/topics/", 1)[1] if source and "/topics/" in source else None
    return PubSubMessage(
        data=data,
        attributes={str(k): str(v) for k, v in attributes.items()},
        message_id=message.get("messageId") or message.get("message_id"),
        topic=topic,
    )


def identify(data: bytes) -> tuple[str | None, str | None]:
    """(run_id, run_uri) named by a payload, as far as it can be read at all."""
    try:
        payload = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):  # `[[[[...` nests past the recursion limit
        return None, None
    if not isinstance(payload, dict):
        return None, None
    run_uri = payload.get("run_uri") if isinstance(payload.get("run_uri"), str) else None
    origin = payload.get("origin")
    if run_uri is None and isinstance(origin, dict) and isinstance(origin.get("run_uri"), str):
        run_uri = origin["run_uri"]  # a stage message naming no location carries its run's origin (recovery.py)
    run_id = payload.get("run_id") if isinstance(payload.get("run_id"), str) else None
    if run_id is None and run_uri:
        run_id = f"{basename(parent(run_uri))}-{basename(run_uri)}"
    return (safe_run_id(run_id) if run_id else None), run_uri


def decode(model: type[M], data: bytes) -> M:
    """A message payload as its model; a payload that does not match is bad input (InvalidMessage)."""
    try:
        return model.model_validate_json(data)
    except ValidationError as exc:
        raise InvalidMessage.from_validation(exc) from exc
