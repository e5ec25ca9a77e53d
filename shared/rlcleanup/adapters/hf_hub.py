"""The Hugging Face Hub as a publish / hand-off destination (`hf://<namespace>/<repo>`): the `ModelHub` port
(ports/hub.py) through `huggingface_hub`.

Only these calls are used (each one HTTP endpoint; see tests/servers/hub_standin.py for the shapes):
`create_repo(private=True, exist_ok=True)`, `model_info` (the repo's real visibility: an org's settings may
override the flag), `get_paths_info` (size, git blob id, LFS sha256 per file: what is already there, and the
verification after upload), `preupload_lfs_files` + `create_commit` with `CommitOperationAdd` only (additive: we
never send a delete). Uploads use the LFS protocol, not Xet (HF_HUB_DISABLE_XET): it hashes every file with
sha256 on our side, the same oid the Hub reports back in paths-info, so verification compares like with like.

Configuration: `HF_ENDPOINT` (default https://huggingface.co), `HF_TOKEN` (on GCP from Secret Manager, exposed only
to the publish job and apply-grant).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rlcleanup.models.vocab import Visibility
from rlcleanup.ports.hub import ModelHub, RemoteFile
from rlcleanup.ports.storage import StorageAccessError, StorageError, VisibilityReading
from rlcleanup.settings import HubSettings, read

_PATHS_INFO_CHUNK = 200  # paths per paths-info request (form-encoded body)
READ_TIMEOUT_SECONDS = 30  # the audit's reads: a Hub that hangs is unreachable, retried, then recorded


def _mapped(exc: BaseException, what: str) -> BaseException:
    """Hub errors in our vocabulary: auth and permission problems are permanent, 5xx/connection transient."""
    from huggingface_hub.errors import HFValidationError

    status = getattr(getattr(exc, "response", None), "status_code", None)
    text = " ".join(str(exc).split())[:300]
    if isinstance(exc, HFValidationError):  # refused by the client before any request: no retry fixes it
        return ValueError(f"Hub {what}: invalid argument: {text}")
    if status in (401, 403):
        return StorageAccessError(f"Hub refused {what} ({status}): check HF_TOKEN's write access: {text}")
    if status is not None and status < 500 and status != 429:
        return ValueError(f"Hub rejected {what} ({status}): {text}")
    return StorageError(f"Hub {what} failed: {type(exc).__name__}: {text}")


class _HubClient:
    """The calls both the destination and the read-only audit make: one `HfApi` on one endpoint."""

    def __init__(self, endpoint: str, token: str | None) -> None:
        import huggingface_hub.constants as hf_constants
        from huggingface_hub import HfApi
        from huggingface_hub.utils import disable_progress_bars

        hf_constants.HF_HUB_DISABLE_XET = True  # read at call time by is_xet_available(): LFS, sha256 on our side
        disable_progress_bars()  # tqdm bars in a function's log are noise; progress goes on the run instead
        self.endpoint = endpoint.rstrip("/")
        self.token = token
        self.api = HfApi(endpoint=self.endpoint, token=token)
        self.requests = 0  # calls made (each is one HTTP request, except commits: see upload)

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        self.requests += 1
        try:
            return fn(*args, **kwargs)
        except (StorageAccessError, StorageError):
            raise
        except Exception as exc:
            raise _mapped(exc, what) from exc

    def visibility(self, repo_id: str) -> VisibilityReading | None:
        """What the Hub says now, not what we asked for: `private` from model_info; None for no such repo."""
        from huggingface_hub.errors import RepositoryNotFoundError

        try:
            info = self._call("model_info", self.api.model_info, repo_id)
        except ValueError as exc:  # a 4xx, mapped: only "not found" means absent
            if isinstance(exc.__cause__, RepositoryNotFoundError):
                return None
            raise
        private = getattr(info, "private", None)
        if private is None:
            return VisibilityReading(None, f"the Hub did not say whether {repo_id} is private")
        if private:
            return VisibilityReading(Visibility.private, f"hf://{repo_id} is private on {self.endpoint}")
        return VisibilityReading(Visibility.public, f"hf://{repo_id} is public on {self.endpoint}")

    def remote_files(self, repo_id: str, paths: Iterable[str], revision: str = "main") -> dict[str, RemoteFile]:
        from huggingface_hub.hf_api import RepoFile

        wanted = list(paths)
        out: dict[str, RemoteFile] = {}
        for i in range(0, len(wanted), _PATHS_INFO_CHUNK):
            chunk = wanted[i : i + _PATHS_INFO_CHUNK]
            found = self._call(
                "get_paths_info", self.api.get_paths_info, repo_id, chunk, repo_type="model", revision=revision
            )
            for entry in found:
                if isinstance(entry, RepoFile):
                    sha = entry.lfs.sha256 if entry.lfs else None
                    out[entry.path] = RemoteFile(entry.path, int(entry.size), str(entry.blob_id), sha)
        return out


class HubReadOnly(_HubClient):
    """The `HubReader` port: the audit of a repo a run's own export job published to (authority/hub_audit.py).
    Reads only: `model_info` (visibility, the file names), `get_paths_info` (sizes, LFS sha256) and a bounded GET
    of `hf_hub_url` through huggingface_hub's own HTTP session. It never holds HF_TOKEN (the write token): its
    token, if any, is RLCLEANUP_HUB_AUDIT_TOKEN, and its endpoint HF_ENDPOINT, the deployment's, never a run's."""

    def __init__(self, endpoint: str | None = None, token: str | None = None) -> None:
        configured = read(HubSettings, secret=True)
        super().__init__(endpoint or configured.endpoint, token or configured.audit_token)

    def file_names(self, repo_id: str, revision: str) -> list[str]:
        info = self._call("model_info", self.api.model_info, repo_id, revision=revision, timeout=READ_TIMEOUT_SECONDS)
        return sorted(s.rfilename for s in (info.siblings or []))

    def read_small(self, repo_id: str, path: str, revision: str, max_bytes: int) -> bytes | None:
        from huggingface_hub import hf_hub_url
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

        url = hf_hub_url(repo_id, path, revision=revision, endpoint=self.endpoint)
        headers = build_hf_headers(token=self.token or False)

        def fetch() -> bytes | None:
            with get_session().stream(
                "GET", url, headers=headers, follow_redirects=True, timeout=READ_TIMEOUT_SECONDS
            ) as resp:
                hf_raise_for_status(resp)
                data = b""
                for chunk in resp.iter_bytes():
                    data += chunk
                    if len(data) > max_bytes:
                        return None  # larger than a small file: not read further
                return data

        result: bytes | None = self._call(f"read {path}", fetch)
        return result


class HubDestination(_HubClient, ModelHub):
    def __init__(self, endpoint: str | None = None, token: str | None = None) -> None:
        configured = read(HubSettings, secret=True)
        token = token or configured.token
        if not token:
            raise StorageAccessError("no Hugging Face token: set HF_TOKEN (on GCP: the hf-token secret)")
        super().__init__(endpoint or configured.endpoint, token)

    def ensure_private_repo(self, repo_id: str) -> str:
        url = self._call("create_repo", self.api.create_repo, repo_id, repo_type="model", private=True, exist_ok=True)
        return str(url)

    def commit_files(self, repo_id: str, files: list[tuple[str, Path]], message: str) -> str:
        """One commit adding these files (never deleting any); returns the commit sha. Requests: one preupload,
        one LFS batch and per new LFS object an upload PUT and a verify POST, then the commit (and validate-yaml
        when README.md is in it)."""
        from huggingface_hub import CommitOperationAdd

        ops = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(path)) for name, path in files]
        self._call("preupload", self.api.preupload_lfs_files, repo_id, ops, repo_type="model")
        info = self._call(
            "create_commit", self.api.create_commit, repo_id, ops, commit_message=message, repo_type="model"
        )
        return str(info.oid)
