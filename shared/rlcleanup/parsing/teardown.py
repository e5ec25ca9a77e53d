"""The teardown vocabulary as data: what a dying distributed job prints after (and because of) its real failure.

run-layout-v2.md §7. One table; each entry names the upstream source that prints the wording, so a reader can check
it and a new wording is one row. The scanner matches this table before its fatal-line table: a line that is
teardown is never a cause, even when it mentions a signal or an error word in its prose.

Two exceptions are causal even though they arrive in teardown clothing (§7): a C++ `what():` payload that carries
a `CUDA error: ...` or an `NCCL error: ...`, and vLLM's `EngineCore encountered a fatal error.` traceback (the
`EngineDeadError` after it is the consequence).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TORCH_NCCL = "pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"
TORCH_ELASTIC = "pytorch torch/distributed/elastic/multiprocessing/api.py"
TORCH_ELASTIC_ERRORS = "pytorch torch/distributed/elastic/multiprocessing/errors/__init__.py"
RAY_EXCEPTIONS = "ray python/ray/exceptions.py"
RAY_RAYLET = "ray src/ray/raylet/node_manager.cc"
RAY_CORE = "ray src/ray/core_worker/core_worker.cc"
VLLM_EXC = "vllm vllm/v1/engine/exceptions.py"
VLLM_CLIENT = "vllm vllm/v1/engine/core_client.py"
VLLM_ASYNC = "vllm vllm/v1/engine/async_llm.py"
VLLM_EXECUTOR = "vllm vllm/v1/executor/multiproc_executor.py"
ABSL = "abseil absl/debugging/failure_signal_handler.cc"
CPYTHON_FAULTHANDLER = "cpython Modules/faulthandler.c (inferred; run-layout-v2.md §7 marks it UNVERIFIED)"
LIBSTDCXX = "gcc libstdc++-v3/libsupc++/vterminate.cc"
SLURM = "slurm src/slurmd/slurmstepd/req.c"
IRIS = "marin lib/iris (task worker)"
SKYRL = "SkyRL skyrl/train (trainer worker loop)"


@dataclass(frozen=True)
class TeardownWording:
    name: str
    pattern: re.Pattern[str]
    reason: str
    source: str  # the upstream file that prints it
    after_error_only: bool = False  # teardown only when an error came first in the same attempt


def _w(name: str, pattern: str, reason: str, source: str, *, after_error_only: bool = False) -> TeardownWording:
    return TeardownWording(name, re.compile(pattern), reason, source, after_error_only)


TEARDOWN: tuple[TeardownWording, ...] = (
    # --- torch c10d / elastic
    _w(
        "nccl_watchdog",
        r"(?i)watchdog caught collective operation timeout|ProcessGroupNCCL.*time ?out|WorkNCCL.*timed? ?out"
        r"|NCCL communicator was aborted|watchdog got stuck for|Process group watchdog thread terminated with exception"
        r"|NCCL watchdog thread terminated with exception|Some NCCL operations have failed or timed out"
        r"|we are taking the entire process down|ProcessGroupNCCL's watchdog got stuck"
        r"|Heartbeat monitor timed out! Process will be terminated",
        "NCCL watchdog timeout or communicator abort: a peer rank had already died",
        TORCH_NCCL,
    ),
    _w(
        "dist_backend_terminate",
        r"terminate called after throwing an instance of 'c10::DistBackendError'",
        "c10::DistBackendError thrown from the NCCL watchdog thread: the process group was torn down",
        TORCH_NCCL + " + " + LIBSTDCXX,
    ),
    _w(
        "elastic_death_signal",
        r"death signal, shutting down workers|Sending process \d+ closing signal SIG\w+"
        r"|SignalException: Process \d+ got signal",
        "torchelastic forwarding a stop signal to its workers",
        TORCH_ELASTIC,
    ),
    _w(
        "elastic_child_failed",
        # torchrun's summary ("Root Cause (first observed failure): ... traceback : ...") of a worker that failed:
        # the worker's own traceback, earlier or in its error file, is the cause.
        r"ChildFailedError|Root Cause \(first observed failure\)",
        "torchrun reporting that a worker process failed: the worker's own error is the cause",
        TORCH_ELASTIC_ERRORS,
    ),
    # --- Ray
    _w(
        "actor_died",
        r"ActorDiedError|RayActorError.*(?:died unexpectedly|actor is dead)"
        r"|The actor died unexpectedly before finishing this task|The actor is dead because"
        r"|The actor never ran - it was cancelled before it started running",
        "Ray actor died: follows the failure that killed it",
        RAY_EXCEPTIONS,
    ),
    _w(
        "worker_exit_prose",
        # The prose names SIGKILL and SIGSEGV as *possible* causes: it is not a signal report.
        r"Worker unexpectedly exits with a connection error code|There are some potential root causes"
        r"|The worker is crashed unexpectedly due to SIGSEGV or other unexpected errors"
        r"|A worker died or was killed while executing a task by an unexpected system error"
        r"|The leased worker has unrecoverable failure",
        "Ray's explanation of a dead worker (possible causes listed in prose, none asserted)",
        RAY_EXCEPTIONS + " / " + RAY_RAYLET,
    ),
    _w(
        "ray_task_failed",
        r"Actor task failed; the worker process will exit|Worker exit type: (?:SYSTEM_ERROR|INTENDED_\w+|USER_ERROR)",
        "Ray core worker exiting after its task failed",
        RAY_CORE,
    ),
    _w(
        "ray_shutdown",
        r"(?i)RaySystemError.*(?:shut ?down|shutting|not been started|not initialized|terminat|exit)",
        "Ray system error raised while Ray shut down",
        RAY_EXCEPTIONS,
    ),
    # --- vLLM
    _w(
        "engine_dead",
        r"EngineDeadError|EngineCore encountered an issue\. See stack trace \(above\) for the root cause"
        r"|Engine core proc \S+ died unexpectedly|AsyncLLM output_handler failed",
        "vLLM engine already dead: the earlier 'EngineCore encountered a fatal error.' traceback is the cause",
        VLLM_EXC + " / " + VLLM_CLIENT + " / " + VLLM_ASYNC,
    ),
    _w(
        "vllm_parent_exited",
        r"Parent process exited, terminating worker",
        "vLLM worker exiting because its engine process is gone",
        VLLM_EXECUTOR,
    ),
    # --- signals and aborts
    _w(
        "absl_sigterm",
        r"\*\*\* SIG(?:TERM|INT) received at time=",
        "abseil's failure signal handler reporting a stop signal",
        ABSL,
    ),
    _w(
        "python_aborted",
        r"Fatal Python error: Aborted",
        "CPython faulthandler after abort(): the C++ terminate or watchdog before it is the story",
        CPYTHON_FAULTHANDLER,
    ),
    _w(
        "signal",
        # The bare names only in capitals: a run or path named `math-rl-sigterm` says nothing about a signal.
        r"(?i:received signal (?:15|2|SIGTERM|SIGINT)\b|\bsignal 15\b|sending SIGTERM|got SIGTERM)|\bSIGTERM\b"
        r"|\bSIGINT\b",
        "termination signal: the job was being stopped",
        IRIS + " / " + SKYRL,
    ),
    _w("keyboard_interrupt", r"^KeyboardInterrupt", "KeyboardInterrupt: a stop request", "cpython"),
    _w("cancelled", r"CancelledError", "asyncio cancellation during shutdown", "cpython asyncio"),
    _w(
        "slurm_cancelled",
        r"\*\*\* (?:JOB|STEP) [\w.]+ (?:ON \S+ )?CANCELLED AT",  # Slurm < 17.11 names the node after the time
        "Slurm cancelled the job (time limit, preemption, scancel)",
        SLURM,
    ),
    _w(
        "connection_reset",
        r"(?i)connection reset|closed by (?:the )?peer|connection closed|BrokenPipeError|ConnectionResetError",
        "connection reset after an earlier error: a peer went away",
        "cpython socket / grpc",
        after_error_only=True,
    ),
)

# A client library's connection failure (requests/urllib3, aiohttp, httpx/httpcore, grpc, the builtin
# ConnectionError family): clients retry these and the process carries on, so a later error in the same attempt is
# what ended it (attempt_logs.demote_survived_connection_errors). Alone, it stays the cause: a job can die of it.
# SkyRL's own clients retry so: NovaSky-AI/SkyRL@a956457 skyrl/backends/skyrl_train/inference_servers/
# remote_inference_client.py (aiohttp.ServerDisconnectedError / ClientOSError, "POST retry n/N"), vllm_server_actor.py
# `_wait_until_healthy` (httpx.RequestError while the server starts). Wordings: psf/requests src/requests/exceptions.py, urllib3 src/urllib3/exceptions.py, aio-libs/aiohttp
# aiohttp/client_exceptions.py, encode/httpx httpx/_exceptions.py, grpc src/python/grpcio/grpc/_channel.py.
CLIENT_CONNECTION_SOURCE = "requests / urllib3 / aiohttp / httpx / grpc client exceptions"
CLIENT_CONNECTION_REASON = (
    "a client connection error the process carried on past: the later error in the same attempt ended it"
)
_CLIENT_CONNECTION = re.compile(
    r"^(?:requests\.exceptions\.|urllib3\.exceptions\.|aiohttp\.client_exceptions\.|aiohttp\.|httpx\.|httpcore\.)?"
    r"(?:ConnectionError|ConnectionRefusedError|ConnectionAbortedError|ConnectionResetError|MaxRetryError"
    r"|NewConnectionError|ProtocolError|ClientConnectorError|ClientConnectionError|ClientOSError"
    r"|ServerDisconnectedError|ConnectError|ConnectTimeout|RemoteProtocolError)\b"
    r"|StatusCode\.UNAVAILABLE|failed to connect to all addresses|Cannot connect to host"
    r"|Failed to establish a new connection|Max retries exceeded with url"
)


def client_connection_error(error_type: str, message: str) -> bool:
    """Whether `ErrorType: message` is a client's connection failure (retried by its library), not a crash."""
    return bool(_CLIENT_CONNECTION.search(error_type) or _CLIENT_CONNECTION.search(message))


# What stays causal though it looks like teardown (§7).
_CAUSAL_WHAT = re.compile(r"what\(\):\s*.*?\b(?P<msg>(?:CUDA error|NCCL error)\b.*)")
# ProcessGroupNCCL's watchdog reporting the CUDA error that killed its stream (`[PG ID 2 …] Process group watchdog
# thread terminated with exception: CUDA error: an illegal memory access was encountered`): the CUDA error is the
# cause, the watchdog only carries it (pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp).
_WATCHDOG_CUDA = re.compile(r"watchdog thread terminated with exception: (?P<msg>CUDA error: .*)")
VLLM_FATAL_HEADER = re.compile(r"EngineCore encountered a fatal error\.")  # vllm/v1/engine/core.py


def teardown_for(text: str, *, error_seen: bool) -> TeardownWording | None:
    """The first table entry whose wording is in `text` ("ErrorType: message" or a whole line)."""
    for wording in TEARDOWN:
        if wording.after_error_only and not error_seen:
            continue
        if wording.pattern.search(text):
            return wording
    return None


def causal_what_payload(text: str) -> str | None:
    """`  what():  CUDA error: an illegal memory access ...` -> the CUDA/NCCL error message, else None."""
    match = _CAUSAL_WHAT.search(text)
    return match.group("msg").strip() if match else None


def watchdog_cuda_payload(text: str) -> str | None:
    """`… watchdog thread terminated with exception: CUDA error: …` -> `an illegal memory access …`, else None."""
    match = _WATCHDOG_CUDA.search(text)
    return match.group("msg").removeprefix("CUDA error:").strip() if match else None


def by_name(name: str | None) -> TeardownWording | None:
    return next((w for w in TEARDOWN if w.name == name), None)
