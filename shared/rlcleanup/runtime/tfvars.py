"""Render the topology as Terraform input variables (infra/topology.auto.tfvars.json).

Terraform never restates topics, subscriptions or functions: it `for_each`es over the name-keyed maps produced
here. Regenerate after editing topology.yaml (a unit test fails while the committed file differs)::

    python -m rlcleanup.runtime.tfvars > infra/topology.auto.tfvars.json
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rlcleanup.runtime.topology import Topology, load_topology


def topology_tfvars(topology: Topology) -> dict[str, Any]:
    """Return the Terraform variables `topology_topics`, `topology_functions`, `topology_sinks` and
    `topology_dead_letter_recorder`.

    Each is a map keyed by the resource name; function entries carry the derived names of their push
    subscription, dead-letter topic and dead-letter subscription so Terraform does not re-derive them, and
    `dead_letter_record_subscription`: the recorder's push subscription on that dead-letter topic (null for the
    recorder itself, whose trigger is null too: it has no push subscription of its own).
    """
    recorded = {fn.name for fn in topology.recorded_functions}
    topics = {t.name: {"description": t.description} for t in topology.topics}
    functions = {
        fn.name: {
            # claim keys and where the run goes on: the pipeline's, not Terraform's
            **fn.model_dump(exclude={"name", "claim", "claim_label", "next", "routes"}),
            "push_subscription": fn.push_subscription,
            "dead_letter_topic": fn.dead_letter_topic,
            "dead_letter_subscription": fn.dead_letter_subscription,
            "dead_letter_record_subscription": fn.dead_letter_record_subscription if fn.name in recorded else None,
        }
        for fn in topology.functions
    }
    sinks = {
        s.subscription: {
            "topic": s.topic,
            "dead_letter_topic": s.dead_letter_topic,  # null: a plain pull subscription
            "dead_letter_subscription": s.dead_letter_subscription,
        }
        for s in topology.sinks
    }
    return {
        "topology_topics": topics,
        "topology_functions": functions,
        "topology_sinks": sinks,
        "topology_dead_letter_recorder": topology.dead_letter_recorder,
    }


def render(topology: Topology | None = None) -> str:
    """Serialize deterministically (sorted keys, two-space indent, trailing newline)."""
    data = topology_tfvars(topology if topology is not None else load_topology())
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
