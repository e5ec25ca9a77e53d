"""Which runtime commit each attempt of the chain ran, and whether it changed between resumed attempts
(run-layout-v3.md §7 [ML]).

Upstream: marin `docs/references/rl-launching.md` @084b305029f3 ("Artifact and runtime boundaries": the temporary
checkpoint root is derived from the RL artifact name and version, not from the runtime commit; reusing the version
with `resume_mode=latest` after `MARIN_SKYRL.commit` changed "can load private Torch or distributed state
serialized by the old runtime"). Where an attempt names its commit: MarinSkyRL `cloud/iris/protocol.py`
@06d8e744c443 (`SkyRLLaunchRequest.runtime` / `SkyRLLaunchResponse.runtime`: `RuntimeIdentity{commit, profile}`);
older records `response.runtime.launcher_commit`; a launch manifest `{config, result}` its document's
`runtime.launcher_commit` (`cloud/iris/launch_config.py`).
"""

from __future__ import annotations

from itertools import pairwise

from rlcleanup.formats.config import get
from rlcleanup.steps.layout_model import AttemptFiles

_COMMIT_KEYS = (
    "request.runtime.commit",
    "response.runtime.commit",
    "result.runtime.commit",
    "response.runtime.launcher_commit",
    "result.runtime.launcher_commit",
    "config.runtime.launcher_commit",
)


def attempt_commit(attempt: AttemptFiles) -> str | None:
    for key in _COMMIT_KEYS:
        value = get(attempt.record, key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def commit_change(attempts: list[AttemptFiles]) -> str | None:
    """Why resuming is unsafe when the chain's attempts (in chain order) ran more than one runtime commit; None
    when they agree or name none."""
    named = [(a.attempt_id, c) for a in attempts if (c := attempt_commit(a)) is not None]
    changes = [(prev, cur) for prev, cur in pairwise(named) if prev[1] != cur[1]]
    if not changes:
        return None
    (first_id, first), (then_id, then) = changes[-1]
    more = f" ({len(changes)} changes in the chain; the last shown)" if len(changes) > 1 else ""
    return (
        f"attempt {first_id} ran runtime commit {first[:12]}, attempt {then_id} ran {then[:12]} on the same "
        f"checkpoint root{more}: resuming across a runtime-commit change can load private Torch or distributed "
        "state serialized by the other runtime (marin docs/references/rl-launching.md)"
    )
