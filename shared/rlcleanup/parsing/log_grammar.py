"""The line grammar of a training log: what a line says, read on its own.

Trainer events (`Saved checkpoint`, `Reached max training steps (N)`, ...), fatal lines printed outside a Python
traceback, the traceback header and its chain sentences, and `ErrorType: message` lines. The cheap substring hints
gate the regex tables (most lines are throughput chatter); the block engine (log_engine.py) searches for the same
hints in raw bytes, so a new pattern here needs its hint in EVENT_HINTS or FATAL_HINTS. What the lines mean
together (a traceback's extent, teardown noise, caps) is the scanner's (log_scanner.py); the teardown vocabulary is
parsing/teardown.py.
"""

from __future__ import annotations

import re
from enum import StrEnum

from rlcleanup.parsing.infra_statements import STATEMENT_HINTS

MAX_EVENT_TEXT = 500  # an event's text, an error's message: cut to this many characters
TRACEBACK_HEADER = "Traceback (most recent call last):"
WHAT_LOOKAHEAD = 3  # a `terminate called ...` line is decided by the `what():` line right after it


class EventKind(StrEnum):
    saved_checkpoint = "saved_checkpoint"
    reached_max_steps = "reached_max_steps"
    saved_final_checkpoint = "saved_final_checkpoint"
    training_done = "training_done"
    loaded_checkpoint = "loaded_checkpoint"
    no_checkpoint = "no_checkpoint"
    already_complete_on_resume = "already_complete_on_resume"
    resumed_already_complete = "resumed_already_complete"
    stopped_early = "stopped_early"
    controller_stopped = "controller_stopped"  # Slurm cancelled the job: time limit, preemption, scancel
    budget_stated = "budget_stated"  # the trainer's own total: `Steps per epoch: X, total training steps: Y`


# (kind, pattern); group 1 is the step when there is one. The `resumed ... already COMPLETE` line precedes
# `Reached max` so its `max training steps (N)` is not read as a normal finish.
EVENT_PATTERNS: tuple[tuple[EventKind, re.Pattern[str]], ...] = (
    (EventKind.saved_checkpoint, re.compile(r"Successfully saved checkpoint for global_step_(\d+)")),
    (
        EventKind.resumed_already_complete,
        re.compile(r"Resumed at global_step (\d+) >= max training steps \((\d+)\); run is already COMPLETE"),
    ),
    # The MarinSkyRL fork (`skyrl-train/skyrl_train/trainer.py` `train`, `Reached max training steps
    # ({self.total_training_steps})`) and NovaSky SkyRL HEAD (`skyrl/train/trainer.py` `train` and
    # `fully_async_trainer.py` @a956457: `Reached max_training_steps={cap}, stopping early.`, logged once
    # global_step passed the cap). Both say the budget was trained; group 1 is the number they name.
    (EventKind.reached_max_steps, re.compile(r"Reached max training steps \((\d+)\)")),
    (EventKind.reached_max_steps, re.compile(r"Reached max_training_steps=(\d+), stopping early")),
    # The trainer's computed total (min of the epoch total and the cap): run-layout-v3.md §6 `Steps per epoch: X,
    # total training steps: Y` (the fork), `Total training steps: Y` on its own line (NovaSky HEAD
    # `fully_async_trainer.py`, the fork's `fully_async_trainer.py`).
    (EventKind.budget_stated, re.compile(r"(?i)\btotal training steps: (\d{1,12})\b")),
    (EventKind.saved_final_checkpoint, re.compile(r"Saved final checkpoint\.")),
    (EventKind.training_done, re.compile(r"Training done!")),
    (EventKind.loaded_checkpoint, re.compile(r"(?i)loaded (?:complete )?checkpoint(?: state)? from global_step_(\d+)")),
    (EventKind.no_checkpoint, re.compile(r"No checkpoint found, starting training from scratch")),
    (EventKind.already_complete_on_resume, re.compile(r"Training already complete on resume")),
    (EventKind.stopped_early, re.compile(r"Training stopped early by callback")),
    (EventKind.controller_stopped, re.compile(r"\*\*\* (?:JOB|STEP) [\w.]+ (?:ON \S+ )?CANCELLED AT \S+")),
)

# A plain run of characters every match of the EVENT_PATTERNS entry at the same index holds (None: a caseless
# pattern, searched whenever the line passes EVENT_HINTS). The scanner searches a pattern only when its literal is in
# the line: a metric mirror line passes the hints (`trainer/global_step`) and would otherwise run all twelve searches.
# tests/unit/test_logs.py derives each from its pattern's parse: a top-level literal run, never inside a branch.
EVENT_GATES: tuple[str | None, ...] = (
    "Successfully saved checkpoint for global_step_",
    "Resumed at global_step ",
    "Reached max training steps (",
    "Reached max_training_steps=",
    None,
    "Saved final checkpoint.",
    "Training done!",
    None,
    "No checkpoint found, starting training from scratch",
    "Training already complete on resume",
    "Training stopped early by callback",
    "CANCELLED AT ",
)


def event_phrase(kind: EventKind, text: str) -> str:
    """The words of `text` that made it a `kind` event (a log line carries a logger prefix around them)."""
    for each, pattern in EVENT_PATTERNS:
        if each is kind and (match := pattern.search(text)):
            return match.group(0)
    return text.strip()


# Causal fatal lines printed outside any Python traceback: (pattern, error_type). Checked before the noise table,
# so `received signal SIGSEGV` is causal while `received signal 15` is teardown.
# The message is group 1 when the pattern has one, else the whole line. No leading `.*`: these run on every line.
FATAL_LINES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"Fatal Python error: ?(.*)"), "Fatal Python error"),
    # Signal names count only where a signal is reported (`received signal 11`, `*** SIGSEGV received at`, the
    # kernel's `Segmentation fault`); prose that lists SIGSEGV as a possible cause is matched as teardown first.
    (
        re.compile(r"(?i)segmentation fault|\*\*\* SIGSEGV received|received signal (?:11|SIGSEGV)\b|SIGSEGV \(@"),
        "SegmentationFault",
    ),
    (re.compile(r"(?i)\bbus error\b|\*\*\* SIGBUS received|received signal (?:7|SIGBUS)\b"), "BusError"),
    (re.compile(r"torch\.(?:cuda\.)?OutOfMemoryError:? ?(.*)"), "torch.OutOfMemoryError"),
    (re.compile(r"ray\.exceptions\.OutOfMemoryError:? ?(.*)"), "ray.exceptions.OutOfMemoryError"),
    (re.compile(r"CUDA out of memory"), "torch.OutOfMemoryError"),
    (re.compile(r"CUDA error: ?(.*)"), "CUDAError"),
    # PyTorch < 1.5 (THC): `RuntimeError: cuda runtime error (39) : uncorrectable ECC error encountered at …`.
    (re.compile(r"cuda runtime error \(\d+\) : ?(.*)"), "CUDAError"),
    (re.compile(r"terminate called after throwing an instance of '([^']+)'"), "C++ exception"),
)
# An exception line outside any traceback (an orphan): `torch.distributed.DistBackendError: NCCL error in: …`,
# `FileNotFoundError: [Errno 2] No such file or directory: …`. Python prints that line last in a traceback, so alone
# it is an error whose traceback was cut, logged by itself, or lost to interleaving. The scanner keeps it as a cause
# of the lowest tier (steps/first_cause.py): a retry loop can log one and carry on, so any traceback, fatal line or
# infrastructure statement of the attempt outranks it. A module-qualified type, or a builtin error type.
ORPHAN_EXCEPTION = re.compile(
    r"^(?P<type>(?:[A-Za-z_]\w*\.)+[A-Z]\w*(?:Error|Exception|Failure|Fault)"
    r"|(?:[A-Z][a-z]+)+(?:Error|Exception))(?:\([\w., ]*\))?: (?P<msg>\S.*)"
)
MAX_MATCH_CHARS = 16 * 1024  # events, fatal lines and noise are matched on this much of a line
# Cheap substring gates: most lines are throughput chatter and skip the regex tables entirely.
EVENT_HINTS = (
    "global_step",
    "Training",
    "Reached max",
    "Saved final",
    "No checkpoint",
    "CANCELLED AT",
    "training steps",
)
# Lowercased-line gates. Not plain "nccl": every `NCCL INFO` chatter line has it; the NCCL noise rule needs a
# watchdog, a timeout or an abort, so gate on those words instead.
# Each hint once (a statement's gate may repeat one above): the scanner tries every hint on every fed line.
FATAL_HINTS = tuple(
    dict.fromkeys(
        (
            "error",
            "fault",
            "sig",
            "terminate",
            "cuda",
            "watchdog",
            "timeout",
            "time out",
            "timed out",
            "aborted",
            "fatal",
            "out_of_memory",
            "out of memory",
            "low on memory",
            "xid",
            "cancelled at",  # Slurm's `*** JOB N CANCELLED AT …` without `error:` before it (teardown, judged)
            *STATEMENT_HINTS,  # the infrastructure statements' gates (parsing/infra_statements.py)
        )
    )
)


# `Name: message` (any dotted identifier, optionally `Wrapper(Inner)`), or a bare name that reads as an exception.
_EXCEPTION_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:\([\w., ]*\))?)(?::\s?(?P<msg>.*))?$")
_BARE_EXCEPTION = re.compile(r"(?:Error|Exception|Interrupt|Exit|Fault|Failure|Timeout|Iteration|Group|Warning)$")
# NovaSky SkyRL's tracker on a crash (NovaSky-AI/SkyRL `skyrl/train/utils/tracking.py` `Tracking.log_exception`:
# `logger.error(f"Training failed at step {step} with {type(e).__name__}:\n{tb_str}")`, tb_str being
# `traceback.format_exc()[-10000:]`): the traceback follows, its own header cut off when it is longer than that, so
# this line opens the traceback and its type stands in until the exception line is read.
SKYRL_TRAINING_FAILED = re.compile(r"Training failed at step (?P<step>\d+) with (?P<type>[A-Za-z_][\w.]*):\s*$")
CHAIN_LINES = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)


def exception_line(text: str, *, strict: bool) -> tuple[str, str] | None:
    """`ErrorType: message`. Strict (after an exception line, where log lines follow) wants an exception-like name;
    lenient (ending frames) also takes any CamelCase name with a message. `INFO: ...` is never one."""
    match = _EXCEPTION_LINE.match(text.rstrip())
    if not match:
        return None
    etype, msg = match.group("type"), match.group("msg")
    name = etype.split("(")[0]
    last = name.rsplit(".", 1)[-1]
    exception_like = bool(_BARE_EXCEPTION.search(name)) or ("." in name and last[:1].isupper())
    camel = last[:1].isupper() and any(c.islower() for c in last)
    if not exception_like and (strict or msg is None or not camel):
        return None
    return etype, (msg or "").strip()
