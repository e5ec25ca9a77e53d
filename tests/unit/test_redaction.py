"""Secrets in error text (issue 37 item 11): an upstream error that echoes a credential is kept only redacted,
wherever rlcleanup keeps error text: grant documents and outcomes, the record's errors and authority actions,
fan-out members' failures, and so the SQLite file and everything the CLI prints from them."""

from __future__ import annotations

from pathlib import Path

import pytest
from authority_support import make_world
from hub_fake import FakeHub

from rlcleanup.authority.grants import Approver, new_key, public_b64, register_approver
from rlcleanup.errors import redact_credentials
from rlcleanup.models.outcomes import MemberError
from rlcleanup.models.record import AuthorityAction, RunError

HF = "hf_" + "Qw3rTy8uIoP2aSdF5gHjK1lZxC7vBn4mMnBv"
GH = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123456789"
AWS_ID, AWS_SECRET = "AKIA" + "ABCDEFGHIJKLMNOP", "Zk3pQ9vLm2Xw8RtY7uN1bC4dE6fG0hJ5kL9mN2pQ"

ECHOED = {
    "requests headers dict": (
        f"401 Client Error for url: https://hub/api headers={{'Authorization': 'Bearer {HF}'}}",
        HF,
    ),
    "raw header line": (f"request failed\nAuthorization: Bearer {HF}\nUser-Agent: x", HF),
    "json header": (f'{{"authorization": "token {GH}", "accept": "json"}}', GH),
    "lowercase bearer alone": (f"rejected bearer {HF} (expired)", HF),
    "x-api-key": (f"headers: X-Api-Key: sk-{'a1' * 20}", "a1" * 20),
    "cookie": ("Cookie: session=abcdef0123456789abcdef", "abcdef0123456789abcdef"),
    "password in a url": ("could not reach https://svc:hunter2-secret@host/x", "hunter2-secret"),
    "signed url": ("GET https://b.s3/x?X-Amz-Credential=AKIA/x&X-Amz-Signature=deadbeef00ff", "deadbeef00ff"),
    "aws key pair": (f"InvalidAccessKeyId {AWS_ID} aws_secret_access_key={AWS_SECRET}", AWS_SECRET),
    "a bare hub token": (f"token {HF} has no write access", HF),
}


@pytest.mark.parametrize("name", sorted(ECHOED))
def test_every_echoed_credential_is_redacted(name: str) -> None:
    text, secret = ECHOED[name]
    kept = redact_credentials(text)
    assert secret not in kept and "[REDACTED]" in kept


def test_redaction_keeps_what_is_not_a_credential() -> None:
    text = "step 30: digest 3f2a9c0d1e2b4a5c3f2a9c0d1e2b4a5c3f2a9c0d1e2b4a5c3f2a9c0d1e2b4a5c not in gs://b/run/x (token expired)"
    assert redact_credentials(text) == text


@pytest.mark.parametrize(
    "text",
    [
        "checkpoints/global_step_20/hf_export_request.json was edited after the grant",  # MarinSkyRL's request file
        "hf_hub_private is false but the repo is public; see hf_upload_mode and sk-learn_version",
        "config names api_org_settings_override and ghp_is_not_a_token_here",
    ],
)
def test_a_name_after_a_token_prefix_is_a_word_not_a_credential(text: str) -> None:
    assert redact_credentials(text) == text


def test_a_token_spelled_in_lowercase_letters_and_digits_is_still_redacted() -> None:
    token = "hf_" + "qw3rty8uiop2asdf5ghjk1lzxc7vbn4mmnbv"
    assert token not in redact_credentials(f"token {token} refused") and "hf_[REDACTED]" in redact_credentials(token)


def test_the_models_that_keep_error_text_redact_it() -> None:
    text, secret = ECHOED["requests headers dict"]
    assert secret not in RunError(step="x", code="c", message=text).message
    assert secret not in (AuthorityAction(action="publish", grant_id="g", state="refused", detail=text).detail or "")
    assert secret not in MemberError(code="c", message=text).message


def test_an_upstream_error_echoing_the_authorization_header_is_stored_and_shown_redacted(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    key = new_key()
    register_approver(
        w.stack.ports.records,
        Approver(approver_id="bob", public_key=public_b64(key), allowed_prefixes=["hf://rl-team"]),
    )
    hub = FakeHub(fail_visibility=ValueError(ECHOED["requests headers dict"][0]))
    w.stack.ports.model_hub = lambda: hub
    grant = w.grant(action="handoff", destination="hf://rl-team/echo", granted_by="bob")
    w.deliver(w.message(grant, key=key))
    doc = w.grant_doc(grant.grant_id)
    assert doc["state"] == "refused" and "[REDACTED]" in doc["detail"], doc
    assert HF not in str(doc) and HF not in str(w.action(grant.grant_id))
    w.stack.ports.records.add_errors(w.run_id, [RunError(step="x", code="c", message=ECHOED["raw header line"][0])])
    assert HF not in w.record.model_dump_json()
    stored = sorted(tmp_path.glob("records.db*"))  # the file and its -wal
    assert stored and not any(HF.encode() in f.read_bytes() for f in stored)
