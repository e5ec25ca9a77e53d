"""The one error hierarchy: what a failure *is* decides what the runtime does with it.

- `PermanentError` (a domain error, with a `code`): bad input no retry can fix, raised only by our own typed
  errors (`InvalidMessage`, `UnsafePathError`, `ConfigError`, `LayoutError`, `ObjectTooLarge`,
  `RecordStoreLost`, ...). Recorded on the run under its code, dead-lettered, acked.
- `TransientError`: the world is not ready (`RetryLater`, `RecordStoreUnavailable`, storage hiccups). Re-raised:
  HTTP 500, Pub/Sub redelivers with backoff. Network errors of the client libraries count as transient too.
- everything else is a **defect** (our bug): logged with its traceback, recorded on the run as `internal_error`,
  retried a bounded number of deliveries, then dead-lettered and its step completed as failed. A builtin
  `ValueError`/`KeyError`/`TypeError` is a defect, never "bad input": bad input raises a typed error above (some
  of which also subclass `ValueError`, so the code that already catches them locally keeps working).

This module sits at the bottom of the layers: it imports nothing from rlcleanup.
"""

from __future__ import annotations

import json
import re
import sys
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class RunErrorCode(StrEnum):
    """Every code an error carries onto a run's record (`RunError.code`), a dead-letter attribute or a poison
    document: one vocabulary, like the problem codes (models/vocab.py). The values are the stored strings, so records
    written before the enum read the same. A step's own `<code>: <message>` lines keep their steps' codes
    (runtime/stages/common.py `run_errors`). tests/unit/test_run_error_codes.py finds every code spelled in shared/
    and checks it is here."""

    bad_input = "bad_input"
    bad_log_entry = "bad_log_entry"
    bad_notification = "bad_notification"
    bad_sweep_message = "bad_sweep_message"
    bad_webhook = "bad_webhook"
    bus_unreachable = "bus_unreachable"
    controller_refused = "controller_refused"
    deadline_passed = "deadline_passed"
    export_job_failed = "export_job_failed"
    export_job_invalid = "export_job_invalid"
    internal_error = "internal_error"
    invalid_grant = "invalid_grant"
    invalid_message = "invalid_message"
    job_start_refused = "job_start_refused"
    no_object_versions = "no_object_versions"
    no_preserve_root = "no_preserve_root"
    no_record = "no_record"
    no_records_database = "no_records_database"
    notification_failed = "notification_failed"
    notification_refused = "notification_refused"
    object_too_large = "object_too_large"
    record_store_lost = "record_store_lost"
    report_failed = "report_failed"
    retries_exhausted = "retries_exhausted"
    root_outside_allowed = "root_outside_allowed"
    run_held = "run_held"
    run_id_conflict = "run_id_conflict"
    run_outside_buckets = "run_outside_buckets"
    run_too_large = "run_too_large"
    secret_unreadable = "secret_unreadable"
    stalled = "stalled"
    storage_access = "storage_access"
    storage_unreachable = "storage_unreachable"
    store_choice_invalid = "store_choice_invalid"
    store_unreachable = "store_unreachable"
    sweep_unsupported_storage = "sweep_unsupported_storage"
    undecodable = "undecodable"
    unknown_channel = "unknown_channel"
    unknown_controller = "unknown_controller"
    unknown_dead_letter_topic = "unknown_dead_letter_topic"
    unknown_signature = "unknown_signature"
    unknown_state_source = "unknown_state_source"
    unreadable_run = "unreadable_run"
    unsafe_path = "unsafe_path"
    unpriced_scheme = "unpriced_scheme"
    unsupported_scheme = "unsupported_scheme"


INTERNAL_ERROR = RunErrorCode.internal_error  # the code a defect is recorded under


class PermanentError(Exception):
    """A domain error: bad input that no retry can fix. Recorded on the run under `code`, dead-lettered, acked."""

    code: str = "bad_input"

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class InvalidMessage(PermanentError):
    """A message payload that does not match its schema (pydantic said why)."""

    def __init__(self, message: str) -> None:
        super().__init__("invalid_message", message)

    @classmethod
    def from_validation(cls, exc: ValidationError) -> InvalidMessage:
        first = exc.errors()[0]
        return cls(f"{first['msg']} at {'.'.join(map(str, first['loc']))}")


class ObjectTooLarge(PermanentError, ValueError):
    """An object larger than the reader allows (`Storage.read_bytes(max_bytes=...)`)."""

    def __init__(self, uri: str, max_bytes: int) -> None:
        super().__init__("object_too_large", f"{uri} is larger than {max_bytes} bytes")


class UnreadableRunFile(PermanentError, ValueError):
    """A run file that must parse (JSON, YAML) and does not: the run cannot be read as the contract says."""

    def __init__(self, message: str) -> None:
        super().__init__("unreadable_run", message)


class TransientError(Exception):
    """Not an error of the input: the delivery fails and is retried later."""


class RetryLater(TransientError):
    """The step must run again later (busy lease, fan-in partner not done)."""


class RecordStoreUnavailable(TransientError):
    """The record store (Firestore) did not answer within its bounded deadline: transient. The delivery fails
    (HTTP 500) and Pub/Sub redelivers it with backoff; nothing was acked, so nothing is lost."""

    def __init__(self, run_id: str | None, step: str | None, operation: str, cause: BaseException) -> None:
        self.run_id = run_id
        self.step = step
        self.operation = operation
        self.cause = f"{type(cause).__name__}: {cause}".splitlines()[0][:300]
        super().__init__(
            f"record store unavailable: run {run_id or '?'}, step {step or '?'}, {operation} failed: {self.cause}"
            " (transient: the delivery fails and Pub/Sub redelivers it)"
        )


class RecordMissing(TransientError, KeyError):
    """A stage wrote to (or read) the record of a run that has none in the store: the run's record was lost under
    it (the database came back empty) or not yet visible. Transient: the delivery is retried, and a stage message
    that carries its run's origin (runtime/recovery.py) turns it into RecordStoreLost, with the record rebuilt from
    the message. Still a KeyError, so `except KeyError` around a record read keeps working."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"no record for run {run_id!r} in the record store (transient: the delivery is retried)")

    def __str__(self) -> str:  # KeyError's own str() quotes its argument
        return str(self.args[0])


class RecordStoreLost(PermanentError):
    """The record store came back without the data written before (an emulator restarted without persistence;
    never real Firestore). Retrying cannot bring the run's record and claims back: the run must be re-driven from
    the event that started it, which every stage message carries (`rlcleanup recover RUN_ID`, or the sweep)."""

    def __init__(self, run_id: str | None, step: str | None, since: str | None) -> None:
        self.run_id = run_id
        self.step = step
        when = f"before {since} (when the database was created again, empty)" if since else "before the reset"
        super().__init__(
            "record_store_lost",
            f"run {run_id or '?'}, step {step or '?'}: the record store lost every record and claim written {when}; "
            f"this run's progress is gone: re-drive it from scratch with `rlcleanup recover {run_id or 'RUN_ID'}` "
            "(the event that started it is kept; the sweep does it too; preserved evidence is reused)",
        )


class ErrorKind(StrEnum):
    domain = "domain"  # PermanentError: record under its code, dead-letter, ack
    transient = "transient"  # re-raise: redelivered with backoff
    defect = "defect"  # our bug: traceback logged, internal_error recorded, bounded retries, then finished failed


def _client_transient_types() -> tuple[type[BaseException], ...]:
    """The client libraries' network errors, from the libraries already imported. An exception of a library can
    only exist once its module is loaded, so looking in sys.modules never misses one; importing google.api_core
    (grpc, protobuf: ~45 MiB RSS) here would weigh on every process, the log scanner's included."""
    types: list[type[BaseException]] = [ConnectionError, TimeoutError]
    gexc = sys.modules.get("google.api_core.exceptions")
    if gexc is not None:
        types += [
            gexc.ServiceUnavailable,
            gexc.InternalServerError,
            gexc.TooManyRequests,
            gexc.DeadlineExceeded,
            gexc.Aborted,
            gexc.GatewayTimeout,
            gexc.BadGateway,
            gexc.RetryError,
        ]
    requests_exc = sys.modules.get("requests.exceptions")
    if requests_exc is not None:
        types += [requests_exc.ConnectionError, requests_exc.Timeout]
    return tuple(types)


def error_kind(exc: BaseException) -> ErrorKind:
    if isinstance(exc, PermanentError):
        return ErrorKind.domain
    if isinstance(exc, (TransientError, *_client_transient_types())):
        return ErrorKind.transient
    return ErrorKind.defect


def defect_message(exc: BaseException) -> str:
    """One bounded line naming the defect: `KeyError: 'step'`."""
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:500]


# ---------------------------------------------------------------- credentials never kept in error text

# An upstream error can echo the request it failed on (headers, a signed URL, a URL with a password). Every error
# string rlcleanup keeps (run errors, grant details and outcomes, what the CLI prints from them) passes
# `redact_credentials` where it is recorded. Each pattern keeps what names the credential and drops its value.
_REDACTED = "[REDACTED]"
_CREDENTIAL_PATTERNS: tuple[tuple[str, str], ...] = (
    # header lines and dict/JSON reprs of headers: Authorization, Proxy-Authorization, Cookie, X-Api-Key, ...
    (
        r"(?i)((?:proxy-)?authorization|cookie|set-cookie|x-api-key|api-key|x-goog-api-key|x-amz-security-token"
        r"|x-hf-token)(['\"]?\s*[:=]\s*['\"]?)[^'\"\r\n,}]+",
        rf"\1\2{_REDACTED}",
    ),
    (r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{8,}", rf"\1\2{_REDACTED}"),  # a scheme and its value
    (r"(?i)\b(token)(\s+)(?=[A-Za-z._~+/=-]*[0-9])[A-Za-z0-9._~+/=-]{16,}", rf"\1\2{_REDACTED}"),
    # A token's body is random: it holds a capital or a digit. A snake_case name after the same prefix (a run's
    # `hf_export_request.json`, `sk-learn`) is a word, never redacted: that mangled refusals naming the file.
    (
        r"(?<![A-Za-z0-9])(hf_|api_org_|github_pat_|gh[pousr]_|glpat-|xox[abpors]-|sk-|sk_live_)"
        r"(?=[a-z_-]*[A-Z0-9])[A-Za-z0-9_-]{8,}",
        rf"\1{_REDACTED}",
    ),
    (r"(?<![A-Z0-9])((?:AKIA|ASIA)[0-9A-Z]{16})(?![A-Z0-9])", _REDACTED),
    (r"(?i)(aws[_-]?secret[_-]?(?:access[_-]?)?key['\"]?\s*[=:]\s*['\"]?)[A-Za-z0-9/+]{40}", rf"\1{_REDACTED}"),
    (r"([a-z][a-z0-9+.-]*://[^/\s:@'\"]+:)[^/\s@'\"]+@", rf"\1{_REDACTED}@"),  # user:password@ in a URL
    (
        r"(?i)([?&](?:access_token|token|api_key|apikey|key|sig|signature|x-amz-signature|x-amz-credential"
        r"|x-amz-security-token|x-goog-signature|x-goog-credential|password|secret)=)[^&\s'\"]+",
        rf"\1{_REDACTED}",
    ),
    (
        r"(?i)((?:password|passwd|secret|client_secret|private_key)['\"]?\s*[:=]\s*['\"]?)[^\s'\",}]{4,}",
        rf"\1{_REDACTED}",
    ),
)


_COMPILED = tuple((re.compile(pattern), replacement) for pattern, replacement in _CREDENTIAL_PATTERNS)


def redact_credentials(text: str) -> str:
    """`text` with every credential value it carries replaced by [REDACTED] (the one redaction of kept errors)."""
    for pattern, replacement in _COMPILED:
        text = pattern.sub(replacement, text)
    return text


# A configuration key whose value is a credential by its name (the last dotted segment, any case): `hf_token`,
# `HF_TOKEN`, `wandb.api_key`, `WANDB_API_KEY`, `aws_secret_access_key`, `aws_access_key_id`, `password`,
# `client_secret`, `private_key`, `credentials`, `auth`, `cookie`. Never kept or shown by value (docs/failures.md
# §3). A tokenizer's special tokens (`eos_token`, `pad_token`, `*_token_id`) name no credential.
_CREDENTIAL_KEY = re.compile(
    r"(?i)(?:^|[_\-])(?:token|secret|password|passwd|passphrase|pass|pwd|api[_\-]?key|apikey|key[_\-]?id"
    r"|access[_\-]?key|secret[_\-]?key|private[_\-]?key|credentials?|creds|auth|authorization|cookie|netrc"
    r"|signature|sas|(?:wandb|hf|hub|openai|anthropic|license|ssh|gpg|encryption|master|signing)[_\-]?key)$"
)
_SERVICE = re.compile(r"(?i)wandb|huggingface|\bhf\b|hub|openai|anthropic|auth|secret|credential|api")
_TOKENIZER_TOKEN = re.compile(
    r"(?i)^(?:pad|eos|bos|unk|sep|cls|mask|start|end|stop|image|audio|video|chat|special|think|tool|eot|im_start"
    r"|im_end|begin|end_of_text|padding|max|num|total|min)_token$"
)


def names_credential(key: str) -> bool:
    """Whether a configuration key (dotted, as `formats/config_diff.flatten_config` writes it) names a credential."""
    parent, _, last = key.rpartition(".")
    last = last.strip().strip("'\"[]")
    if last.lower() == "key":  # W&B's settings `key`, a service's `key`: a credential beside the service's name
        return bool(_SERVICE.search(parent.replace("_", " ").replace(".", " ")))
    return bool(_CREDENTIAL_KEY.search(last)) and not _TOKENIZER_TOKEN.match(last)


CREDENTIAL_KEY_RULE = "credential_key"  # the rule a value withheld for its key's name is shown under


def withheld(rule: str) -> str:
    """What stands for a configuration value withheld by a secret rule (canonical JSON text, as kept values are):
    the rule, never the value."""
    return json.dumps(f"[withheld: {rule}]")


def is_withheld(value: str | None) -> bool:
    return value is not None and value.startswith('"[withheld: ')


def screened_value(key: str, value: str | None) -> str | None:
    """A kept configuration value (JSON text) as it may be shown: withheld when its key names a credential, else
    with every credential pattern of `redact_credentials` replaced. Absent, null and empty stay (no value)."""
    if value is None or value in ("null", '""') or is_withheld(value):
        return value
    if names_credential(key):
        return withheld(CREDENTIAL_KEY_RULE)
    return redact_credentials(value)
