"""Decode the Pub/Sub message inside a CloudEvent (raw push converted by functions-framework, or Eventarc)."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from rlcleanup.errors import PermanentError

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
