"""Provisioning a started stack from the topology (topics, push, dead-letter and sink subscriptions, buckets)
through the emulators' own clients, and the environment each function process is deployed with."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator

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
        for fn in topology.functions:
            if fn not in served:
                continue
            endpoint = f"{urls[fn.name]}/projects/{project}/topics/{fn.trigger}"
            with contextlib.suppress(AlreadyExists):
                subscriber.create_subscription(
                    request={
                        "name": subscriber.subscription_path(project, fn.push_subscription),
                        "topic": publisher.topic_path(project, fn.trigger),
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
        pulls += [(sink.subscription, sink.topic) for sink in topology.sinks]
        for sub, topic in pulls:
            with contextlib.suppress(AlreadyExists):
                subscriber.create_subscription(
                    request={
                        "name": subscriber.subscription_path(project, sub),
                        "topic": publisher.topic_path(project, topic),
                        "ack_deadline_seconds": 60,
                    }
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
