"""Bus on Google Cloud Pub/Sub (honours PUBSUB_EMULATOR_HOST). The client is created on first publish."""

from __future__ import annotations

import threading
from typing import Any

from rlcleanup.ports import usage

PUBLISH_TIMEOUT_SECONDS = 30.0


class PubSubBus:
    def __init__(self, project: str, client: Any | None = None) -> None:
        self.project = project
        self._client = client
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        with self._lock:  # handlers run in gunicorn threads: build the client once
            if self._client is None:
                import google.cloud.pubsub_v1 as pubsub_v1

                self._client = pubsub_v1.PublisherClient()
            return self._client

    def publish(self, topic: str, data: bytes, attributes: dict[str, str] | None = None) -> str:
        path = self.client.topic_path(self.project, topic)
        # Non-empty data always: an attributes-only push is rejected by the CloudEvent conversion.
        future = self.client.publish(path, data or b"{}", **(attributes or {}))
        usage.pubsub_message(data or b"{}", attributes)  # one request each: every publish waits for its id
        message_id: str = future.result(timeout=PUBLISH_TIMEOUT_SECONDS)
        return message_id
