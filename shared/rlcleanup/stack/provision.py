"""Provisioning a started stack from the topology (topics, push, dead-letter and sink subscriptions, buckets)
through the emulators' own clients, and the environment each function process is deployed with."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from typing import Any

from rlcleanup.runtime.topology import FunctionSpec, Topology
from rlcleanup.stack import s3_server
from rlcleanup.stack.state import StackState


@contextlib.contextmanager
def client_env(env: dict[str, str]) -> Iterator[None]:
    """Temporarily point the Google client libraries at the stack (they read the env at construction)."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _duration(text: str) -> dict[str, int]:
    match = re.fullmatch(r"(\d+)(?:\.(\d{1,9}))?s", text.strip())
    if not match:
        raise ValueError(f"bad duration {text!r} (expected e.g. '10s')")
    return {"seconds": int(match.group(1)), "nanos": int((match.group(2) or "0").ljust(9, "0"))}


def provision(state: StackState, topology: Topology, served: list[FunctionSpec]) -> None:
    """Topics (incl. dead-letter topics), push + dead-letter + sink subscriptions, and buckets."""
    from google.api_core.exceptions import AlreadyExists, Conflict
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import pubsub_v1, storage

    project = state.project
    with client_env(state.env):
        publisher = pubsub_v1.PublisherClient()
        subscriber = pubsub_v1.SubscriberClient()
        gcs = storage.Client(project=project, credentials=AnonymousCredentials())
    try:
        for topic in topology.all_topic_names:
            with contextlib.suppress(AlreadyExists):
                publisher.create_topic(request={"name": publisher.topic_path(project, topic)})
        urls = state.functions
        # Each function's push subscription on its trigger; the dead-letter recorder's, one on each other
        # function's dead-letter topic (topology.yaml `dead_letters`), as Terraform makes them.
        recorder = topology.recorder
        pushes = [(fn, fn.push_subscription, fn.trigger) for fn in topology.functions if fn.trigger is not None]
        if recorder is not None:
            pushes += [
                (recorder, fed.dead_letter_record_subscription, fed.dead_letter_topic)
                for fed in topology.recorded_functions
            ]
        for fn, name, topic in pushes:
            if fn not in served:
                continue
            endpoint = f"{urls[fn.name]}/projects/{project}/topics/{topic}"
            with contextlib.suppress(AlreadyExists):
                subscriber.create_subscription(
                    request={
                        "name": subscriber.subscription_path(project, name),
                        "topic": publisher.topic_path(project, topic),
                        "push_config": {"push_endpoint": endpoint},
                        "ack_deadline_seconds": fn.ack_deadline_seconds,
                        "retry_policy": {
                            "minimum_backoff": _duration(fn.minimum_backoff),
                            "maximum_backoff": _duration(fn.maximum_backoff),
                        },
                        "dead_letter_policy": {
                            "dead_letter_topic": publisher.topic_path(project, fn.dead_letter_topic),
                            "max_delivery_attempts": fn.max_delivery_attempts,
                        },
                    }
                )
        pulls = [(fn.dead_letter_subscription, fn.dead_letter_topic) for fn in topology.functions]
        for sink in topology.sinks:
            if sink.dead_letter_subscription and sink.dead_letter_topic:
                pulls.append((sink.dead_letter_subscription, sink.dead_letter_topic))
        for sub, topic in pulls:
            _pull_subscription(subscriber, publisher, project, sub, topic)
        for sink in topology.sinks:  # a sink with a dead-letter topic parks what its consumer keeps failing on
            parked = sink.dead_letter_topic
            policy = {"dead_letter_topic": publisher.topic_path(project, parked), "max_delivery_attempts": 10}
            _pull_subscription(
                subscriber, publisher, project, sink.subscription, sink.topic, policy if parked else None
            )
        for role, bucket in state.buckets.items():
            if role.startswith("s3-"):
                s3_server.create_bucket(state.s3_endpoint, bucket)
                continue
            with contextlib.suppress(Conflict):
                gcs.create_bucket(bucket)
    finally:
        subscriber.close()
        publisher.transport.close() if hasattr(publisher, "transport") else None


def _pull_subscription(
    subscriber: Any, publisher: Any, project: str, sub: str, topic: str, dead_letter: dict[str, Any] | None = None
) -> None:
    from google.api_core.exceptions import AlreadyExists

    request: dict[str, Any] = {
        "name": subscriber.subscription_path(project, sub),
        "topic": publisher.topic_path(project, topic),
        "ack_deadline_seconds": 60,
    }
    if dead_letter is not None:
        request["dead_letter_policy"] = dead_letter
    with contextlib.suppress(AlreadyExists):
        subscriber.create_subscription(request=request)


def function_env(fn: FunctionSpec, state: StackState) -> dict[str, str]:
    """What a function's process is deployed with, as Terraform deploys it (infra/modules/rlcleanup/functions.tf):
    which function it serves (the publish guard's declaration is cross-checked against it), the run buckets it may
    read, and a claim lease of the function's timeout (a crashed delivery stops blocking retries once it is over).
    Large Hub hand-offs and capture parts too large for one invocation go to their Cloud Run jobs as on GCP; here
    each is the job's same entry point as child processes in their own process group (RLCLEANUP_HUB_UPLOAD_JOB and
    RLCLEANUP_LARGE_COPY_JOB = local; they reach the same emulators through this environment)."""
    runs = [state.buckets["runs"], state.buckets["watched-runs"], f"s3://{state.buckets['s3-runs']}"]
    return {
        "RLCLEANUP_FUNCTION": fn.name,
        "RLCLEANUP_RUN_BUCKETS": ",".join(runs),
        "RLCLEANUP_LEASE_SECONDS": str(fn.timeout_seconds),
        "RLCLEANUP_HUB_UPLOAD_JOB": "local",
        "RLCLEANUP_LARGE_COPY_JOB": "local",
    }
