"""A STAND-IN for the Hugging Face Hub: no Hub emulator exists, so this small HTTP server implements exactly the
endpoints that the real `huggingface_hub` client (version 2.4.0; shapes read from its hf_api.py, _commit_api.py
and lfs.py) calls on our publish path, with the JSON shapes it parses:

    POST /api/repos/create                        {name, organization, visibility?, type?} -> {url}; 409 {error, url}
    GET  /api/models/{ns}/{name}[/revision/{rev}]  -> {id, private, sha, siblings[{rfilename}]}; 404 RepoNotFound
    POST /api/validate-yaml                       {content, repoType} -> {errors: [], warnings: []}
    GET  /api/agent-harnesses                     -> {standardEnvVars: [], harnesses: {}} (the client's best-effort
                                                  user-agent registry, fetched at most once a day)
    POST /api/models/{repo}/preupload/{rev}       {files[{path, sample, size}]} -> {files[{path, uploadMode, shouldIgnore, oid}]}
    POST /{repo}.git/info/lfs/objects/batch       {operation, transfers, objects[{oid, size}], hash_algo, ref}
                                                  -> {transfer: basic, objects[{oid, size, actions{upload, verify}}]}
    PUT  /__lfs/{oid}                             the object's bytes (basic transfer); sha256 and size checked
    POST /__lfs/{oid}/verify                      {oid, size}
    POST /api/models/{repo}/commit/{rev}          NDJSON header / file / lfsFile / deletedFile -> {commitUrl, commitOid}
    POST /api/models/{repo}/paths-info/{rev}      form paths=...&expand= -> [{type, path, size, oid, lfs{oid, size, pointerSize}}]
    GET  /{ns}/{name}/resolve/{rev}/{path}        the file's bytes (hf_hub_url's shape; the audit reads small files
                                                  with huggingface_hub's session: authority/hub_audit.py)

Uploads go through the LFS protocol (our client sets HF_HUB_DISABLE_XET: Xet needs a CAS server). Upload mode is
decided as the Hub does it in spirit: LFS for binary suffixes (.safetensors, .bin, .png, ...) or files over 10 MiB.

Test controls (not Hub endpoints): GET /__standin/stats (request counts per endpoint), POST /__standin/control
{"force_public_orgs": [...], "fail_lfs_put_after": n|null, "fail_lfs_put_count": k|null, "corrupt_sha_suffix":
str|null} (after n stored LFS uploads, refuse the next k — every one when k is null — then store again),
POST /__standin/seed {"repo", "private", "files": {path: base64}, "unreadable": [path]}: an unreadable path stays
listed (model_info, paths-info) but its download answers 404 EntryNotFound, as a file deleted between the listing
and the read does. Started by the tests in its own process group:

    python tests/servers/hub_standin.py --port P --token T
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import threading
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".png", ".jpg", ".msgpack", ".h5", ".gguf", ".onnx", ".zip")
LFS_SIZE = 10 * 1024 * 1024


def git_blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\x00" % len(data) + data, usedforsecurity=False).hexdigest()


@dataclass
class Entry:
    size: int
    sha256: str
    lfs: bool
    content: bytes = b""  # regular files only

    def oid(self) -> str:
        if self.lfs:
            pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\nsize {self.size}\n"
            return git_blob_sha(pointer.encode())
        return git_blob_sha(self.content)


@dataclass
class Repo:
    repo_id: str
    private: bool
    files: dict[str, Entry] = field(default_factory=dict)
    commits: list[str] = field(default_factory=list)
    unreadable: set[str] = field(default_factory=set)  # listed, but a download answers 404

    @property
    def sha(self) -> str:
        return self.commits[-1] if self.commits else "0" * 40


class Hub:
    def __init__(self, base: str, token: str) -> None:
        self.base, self.token = base, token
        self.lock = threading.Lock()
        self.repos: dict[str, Repo] = {}
        self.lfs: dict[tuple[str, str], bytes] = {}  # (repo, oid): LFS storage is per repo, as on the Hub
        self.stats: Counter[str] = Counter()
        self.force_public_orgs: set[str] = set()
        self.fail_lfs_put_after: int | None = None
        self.corrupt_sha_suffix: str | None = None
        self.lfs_puts = 0
        self.fail_lfs_put_count: int | None = None
        self.lfs_failures = 0

    def commit(self, repo: Repo, lines: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
        staged: dict[str, Entry | None] = {}
        for line in lines:
            key, value = line.get("key"), line.get("value", {})
            if key == "header":
                continue
            path = value.get("path", "")
            if key == "file":
                data = base64.b64decode(value["content"])
                staged[path] = Entry(len(data), hashlib.sha256(data).hexdigest(), False, data)
            elif key == "lfsFile":
                blob = self.lfs.get((repo.repo_id, value["oid"]))
                if blob is None or len(blob) != value["size"]:
                    return 400, {"error": f"LFS object {value['oid']} for {path} was never uploaded"}
                staged[path] = Entry(len(blob), value["oid"], True)
            elif key in ("deletedFile", "deletedFolder"):
                self.stats["deleted_paths"] += 1
                staged[path] = None
            else:
                return 400, {"error": f"unknown commit line {key!r}"}
        for path, entry in staged.items():
            if entry is None:
                repo.files.pop(path, None)
            else:
                repo.files[path] = entry
        sha = hashlib.sha1(f"{repo.repo_id}:{len(repo.commits)}:{sorted(staged)}".encode()).hexdigest()
        repo.commits.append(sha)
        return 200, {"commitUrl": f"{self.base}/{repo.repo_id}/commit/{sha}", "commitOid": sha, "pullRequestUrl": None}


def make_handler(hub: Hub) -> type[BaseHTTPRequestHandler]:  # noqa: C901 -- a stand-in server: one route per Hub endpoint it serves
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: object) -> None:
            pass

        def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> bytes:
            n = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(n) if n else b""

        def _authorized(self) -> bool:
            if self.headers.get("Authorization") == f"Bearer {hub.token}":
                return True
            self._send(401, {"error": "Invalid credentials in Authorization header"})
            return False

        def _repo(self, repo_id: str) -> Repo | None:
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._send(
                    404,
                    {"error": "Repository not found"},
                    {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"},
                )
            return repo

        def do_GET(self) -> None:
            path = urllib.parse.urlsplit(self.path).path
            with hub.lock:
                if path == "/__standin/stats":
                    self._send(200, dict(hub.stats))
                    return
                hub.stats[f"GET {_route(path)}"] += 1
                if path == "/api/agent-harnesses":
                    self._send(200, {"standardEnvVars": [], "harnesses": {}})
                    return
                if not self._authorized():
                    return
                if "/resolve/" in path:
                    self._resolve(path)
                    return
                if path.startswith("/api/models/"):
                    parts = path[len("/api/models/") :].split("/")
                    repo = self._repo("/".join(parts[:2]))
                    if repo is None:
                        return
                    self._send(
                        200,
                        {
                            "id": repo.repo_id,
                            "author": repo.repo_id.split("/")[0],
                            "private": repo.private,
                            "sha": repo.sha,
                            "siblings": [{"rfilename": p} for p in sorted(repo.files)],
                            "tags": [],
                        },
                    )
                    return
            self._send(404, {"error": f"no route GET {path}"})

        def _resolve(self, path: str) -> None:
            head, rest = path[1:].split("/resolve/", 1)
            repo = self._repo(urllib.parse.unquote(head))
            if repo is None:
                return
            name = urllib.parse.unquote(rest.split("/", 1)[1]) if "/" in rest else ""
            entry = repo.files.get(name)
            if entry is None or name in repo.unreadable:
                self._send(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
                return
            data = hub.lfs.get((repo.repo_id, entry.sha256), b"") if entry.lfs else entry.content
            self._send(200, data, {"X-Repo-Commit": repo.sha, "ETag": f'"{entry.oid()}"'})

        def do_PUT(self) -> None:
            split = urllib.parse.urlsplit(self.path)
            path, repo_id = split.path, urllib.parse.parse_qs(split.query).get("repo", [""])[0]
            body = self._body()
            with hub.lock:
                hub.stats[f"PUT {_route(path)}"] += 1
                if path.startswith("/__lfs/"):
                    oid = path[len("/__lfs/") :]
                    failing = hub.fail_lfs_put_after is not None and hub.lfs_puts >= hub.fail_lfs_put_after
                    if failing and (hub.fail_lfs_put_count is None or hub.lfs_failures < hub.fail_lfs_put_count):
                        hub.lfs_failures += 1
                        self._send(403, {"error": "upload interrupted (stand-in control)"})
                        return
                    if hashlib.sha256(body).hexdigest() != oid:
                        self._send(400, {"error": "sha256 of the body does not match the oid"})
                        return
                    hub.lfs[(repo_id, oid)] = body
                    hub.lfs_puts += 1
                    self._send(200, {})
                    return
            self._send(404, {"error": f"no route PUT {path}"})

        def do_POST(self) -> None:
            split = urllib.parse.urlsplit(self.path)
            path = split.path
            body = self._body()
            with hub.lock:
                if path == "/__standin/control":
                    ctl = json.loads(body)
                    hub.force_public_orgs = set(ctl.get("force_public_orgs", hub.force_public_orgs))
                    if "fail_lfs_put_after" in ctl:
                        hub.fail_lfs_put_after = ctl["fail_lfs_put_after"]
                        hub.fail_lfs_put_count = ctl.get("fail_lfs_put_count")
                        hub.lfs_puts = hub.lfs_failures = 0
                    if "corrupt_sha_suffix" in ctl:
                        hub.corrupt_sha_suffix = ctl["corrupt_sha_suffix"]
                    self._send(200, {})
                    return
                if path == "/__standin/seed":
                    seed = json.loads(body)
                    repo = hub.repos.setdefault(seed["repo"], Repo(seed["repo"], bool(seed.get("private", True))))
                    repo.unreadable = set(seed.get("unreadable", []))
                    lines = []
                    for name, b64 in seed.get("files", {}).items():
                        data = base64.b64decode(b64)
                        if name.endswith(LFS_SUFFIXES):
                            oid = hashlib.sha256(data).hexdigest()
                            hub.lfs[(seed["repo"], oid)] = data
                            lines.append({"key": "lfsFile", "value": {"path": name, "oid": oid, "size": len(data)}})
                        else:
                            lines.append({"key": "file", "value": {"path": name, "content": b64}})
                    self._send(*hub.commit(repo, lines))
                    return
                hub.stats[f"POST {_route(path)}"] += 1
                if path.startswith("/__lfs/") and path.endswith("/verify"):
                    oid = path[len("/__lfs/") : -len("/verify")]
                    repo_id = urllib.parse.parse_qs(split.query).get("repo", [""])[0]
                    want = json.loads(body)
                    blob = hub.lfs.get((repo_id, oid))
                    ok = blob is not None and len(blob) == want.get("size")
                    self._send(200 if ok else 404, {} if ok else {"error": "object not found"})
                    return
                if not self._authorized():
                    return
                if path == "/api/repos/create":
                    self._create(json.loads(body))
                elif path == "/api/validate-yaml":
                    self._send(200, {"errors": [], "warnings": []})
                elif path.endswith(".git/info/lfs/objects/batch"):
                    self._batch(path[1 : -len(".git/info/lfs/objects/batch")], json.loads(body))
                elif path.startswith("/api/models/"):
                    self._repo_post(path[len("/api/models/") :], body)
                else:
                    self._send(404, {"error": f"no route POST {path}"})

        def _create(self, payload: dict[str, Any]) -> None:
            org, name = payload.get("organization"), payload["name"]
            repo_id = f"{org}/{name}" if org else f"standin-user/{name}"
            url = f"{hub.base}/{repo_id}"
            if repo_id in hub.repos:
                self._send(409, {"error": "You already created this model repo", "url": url})
                return
            private = payload.get("visibility", "public") == "private"
            if org in hub.force_public_orgs:  # an org whose settings override the flag, as the Hub allows
                private = False
            hub.repos[repo_id] = Repo(repo_id, private)
            self._send(200, {"url": url, "name": repo_id})

        def _batch(self, repo_id: str, payload: dict[str, Any]) -> None:
            objects = []
            q = urllib.parse.urlencode({"repo": repo_id})
            for obj in payload.get("objects", []):
                oid, size = obj["oid"], obj["size"]
                entry: dict[str, Any] = {"oid": oid, "size": size, "authenticated": True}
                if (repo_id, oid) not in hub.lfs:  # already stored: no actions, the client skips the upload
                    entry["actions"] = {
                        "upload": {"href": f"{hub.base}/__lfs/{oid}?{q}"},
                        "verify": {"href": f"{hub.base}/__lfs/{oid}/verify?{q}"},
                    }
                objects.append(entry)
            self._send(200, {"transfer": "basic", "objects": objects})

        def _repo_post(self, rest: str, body: bytes) -> None:
            parts = rest.split("/")
            repo_id, verb = "/".join(parts[:2]), parts[2] if len(parts) > 2 else ""
            repo = self._repo(repo_id)
            if repo is None:
                return
            if verb == "preupload":
                files = json.loads(body)["files"]
                out = []
                for f in files:
                    lfs = f["path"].endswith(LFS_SUFFIXES) or f["size"] > LFS_SIZE
                    existing = repo.files.get(f["path"])
                    out.append(
                        {
                            "path": f["path"],
                            "uploadMode": "lfs" if lfs else "regular",
                            "shouldIgnore": False,
                            "oid": (existing.sha256 if existing.lfs else existing.oid()) if existing else None,
                        }
                    )
                self._send(200, {"files": out})
            elif verb == "commit":
                lines = [json.loads(line) for line in body.splitlines() if line.strip()]
                self._send(*hub.commit(repo, lines))
            elif verb == "paths-info":
                form = urllib.parse.parse_qs(body.decode())
                out = []
                for p in form.get("paths", []):
                    e = repo.files.get(p)
                    if e is None:
                        continue
                    sha = e.sha256
                    if hub.corrupt_sha_suffix and p.endswith(hub.corrupt_sha_suffix):
                        sha = hashlib.sha256(sha.encode()).hexdigest()  # what a corrupted upload would report
                    row: dict[str, Any] = {"type": "file", "path": p, "size": e.size, "oid": e.oid()}
                    if e.lfs:
                        row["lfs"] = {"oid": sha, "size": e.size, "pointerSize": 134}
                    out.append(row)
                self._send(200, out)
            else:
                self._send(404, {"error": f"no route {verb}"})

    return Handler


def _route(path: str) -> str:
    """A request's endpoint without its repo and object names, for the request counts."""
    if path.startswith("/__lfs/"):
        return "/__lfs/{oid}/verify" if path.endswith("/verify") else "/__lfs/{oid}"
    if path.endswith(".git/info/lfs/objects/batch"):
        return "/{repo}.git/info/lfs/objects/batch"
    if "/resolve/" in path:
        return "/{repo}/resolve/{rev}/{path}"
    if path.startswith("/api/models/"):
        parts = path.split("/")
        return "/api/models/{repo}" + (f"/{parts[5]}" if len(parts) > 5 else "")
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--token", required=True)
    args = ap.parse_args()
    hub = Hub(f"http://127.0.0.1:{args.port}", args.token)
    ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(hub)).serve_forever()


if __name__ == "__main__":
    main()
