"""What every part of the completion record is built from: the base model and the run-text type."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict

from rlcleanup.textsafe import neutralise

# Free text a run wrote (log messages, reasons, config values): stored neutralised, so no surface that shows the
# record (the Firestore console, the CLI, a report, a JSON consumer) receives a control sequence. Never a location:
# URIs stay as they are, they are read back.
RunText = Annotated[str, AfterValidator(neutralise)]


def utcnow() -> datetime:
    return datetime.now(UTC)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", use_enum_values=False)


def _without(data: Any, derived: tuple[str, ...]) -> Any:
    """Derived (computed) fields are written with a record and recomputed on reading it back, never taken as input."""
    if isinstance(data, dict) and any(k in data for k in derived):
        return {k: v for k, v in data.items() if k not in derived}
    return data
