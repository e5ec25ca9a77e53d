"""An in-memory model hub (ports.hub.ModelHub) for unit tests of the Hub hand-off's ordering: every call is
counted and every commit kept, so a test can say exactly what reached the repo. The HTTP-level behaviour is
tests/integration/test_hub_publish.py's, against the stand-in server."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from rlcleanup.models.vocab import Visibility
from rlcleanup.ports.hub import RemoteFile, git_blob_sha
from rlcleanup.ports.storage import VisibilityReading


@dataclass
class FakeHub:
    repos: dict[str, dict[str, bytes]] = field(default_factory=dict)
    private: dict[str, bool] = field(default_factory=dict)
    commits: list[tuple[str, list[str]]] = field(default_factory=list)
    fail_visibility: Exception | None = None
    requests: int = 0

    def seed(self, repo_id: str, files: dict[str, bytes], *, private: bool = True) -> None:
        self.repos[repo_id] = dict(files)
        self.private[repo_id] = private

    def ensure_private_repo(self, repo_id: str) -> str:
        self.requests += 1
        self.repos.setdefault(repo_id, {})
        self.private.setdefault(repo_id, True)
        return f"https://hub.test/{repo_id}"

    def visibility(self, repo_id: str) -> VisibilityReading | None:
        self.requests += 1
        if self.fail_visibility is not None:
            raise self.fail_visibility
        if repo_id not in self.repos:
            return None
        seen = Visibility.private if self.private[repo_id] else Visibility.public
        return VisibilityReading(seen, f"hf://{repo_id} is {seen.value} on hub.test")

    def remote_files(self, repo_id: str, paths: Iterable[str]) -> dict[str, RemoteFile]:
        self.requests += 1
        files = self.repos.get(repo_id, {})
        return {
            p: RemoteFile(p, len(files[p]), git_blob_sha(files[p]), hashlib.sha256(files[p]).hexdigest())
            for p in paths
            if p in files
        }

    def commit_files(self, repo_id: str, files: list[tuple[str, Path]], message: str) -> str:
        self.requests += 1
        for name, path in files:
            self.repos[repo_id][name] = path.read_bytes()
        self.commits.append((repo_id, [name for name, _ in files]))
        return hashlib.sha1(f"{len(self.commits)}".encode(), usedforsecurity=False).hexdigest()
