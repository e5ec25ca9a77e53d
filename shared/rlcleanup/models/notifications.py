"""A notification to a person about one run in one state (runtime/notify_handler.py, report/notice.py): what is
posted, and what the notify function's claim stores per channel and state."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

MAX_NOTICE_CHARS = 3000  # below Google Chat's 4,096-character text limit and far below Slack's 40,000


class Notice(BaseModel):
    """One message about one run state: `digest` names the state (verdict + needs + deadline + urgency), so the
    same state is never posted twice and a new state is posted once."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    digest: str = Field(pattern=r"^[0-9a-f]{16}$")
    subject: str = Field(max_length=200)  # an e-mail's subject line (one line)
    text: str = Field(max_length=MAX_NOTICE_CHARS)  # the whole message, neutralised lines


class NotificationSent(BaseModel):
    """`notify:<digest>:<channel>`: one channel's outcome for one state (delivered, or given up and recorded)."""

    model_config = ConfigDict(extra="ignore")

    channel: str
    digest: str
    delivered: bool
    attempts: int = 1
