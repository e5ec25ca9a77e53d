"""Secret scan of everything text that would leave the run: detect-secrets plus the rules it lacks.

Text objects are streamed in bounded chunks through temp files (detect-secrets scans files); safetensors
contribute only their header `__metadata__`, read with ranged requests. Tensor bytes are never read as text.
Findings name the object, the 1-based line and the rule, never the secret itself.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from rlcleanup.formats.safetensors_header import CorruptHeaderError, read_header
from rlcleanup.formats.weight_files import WEIGHT_SUFFIXES
from rlcleanup.ports.storage import ObjectInfo, Storage

# Entropy detectors flag every git SHA and tokenizer merge; an IP address is not a credential.
_SKIPPED_PLUGINS = {"Base64HighEntropyString", "HexHighEntropyString", "IPPublicDetector"}
_CHUNK_LINES = 20_000
_BINARY_SUFFIXES = (*WEIGHT_SUFFIXES, ".model", ".npy", ".parquet")  # weights, sentencepiece, arrays, tables
_TEXT_SUFFIXES = (".json", ".jsonl", ".txt", ".md", ".yaml", ".yml", ".log", ".out", ".err", ".jinja", ".py", ".toml")

# Rules detect-secrets lacks (patterns after gitleaks' huggingface / W&B rules).
_EXTRA_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("Hugging Face token", re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}(?![A-Za-z0-9])")),
    ("Hugging Face org token", re.compile(r"(?<![A-Za-z0-9])api_org_[A-Za-z0-9]{30,}(?![A-Za-z0-9])")),
    ("W&B API key", re.compile(r"WANDB_API_KEY['\"]?\s*[=:]\s*['\"]?[0-9a-f]{40}(?![0-9a-f])", re.IGNORECASE)),
    ("W&B API key (netrc)", re.compile(r"(?:^|\s)password\s+[0-9a-f]{40}(?![0-9a-f])")),
    (
        "GCP service-account private key",
        re.compile(r"['\"]private_key['\"]\s*:\s*['\"]-----BEGIN (?:RSA )?PRIVATE KEY-----"),
    ),
]


@dataclass(frozen=True)
class Finding:
    uri: str
    line: int
    rule: str

    def __str__(self) -> str:
        return f"{self.uri}:{self.line}: {self.rule}"


@dataclass
class ScanReport:
    findings: list[Finding]
    scanned: list[str]
    skipped: list[str]  # binary objects not read as text (weights), with why

    @property
    def clean(self) -> bool:
        return not self.findings


def is_text(uri: str) -> bool:
    name = uri.rsplit("/", 1)[-1].lower()
    if name.endswith(_BINARY_SUFFIXES):
        return False
    return name.endswith(_TEXT_SUFFIXES) or "netrc" in name or "." not in name


def _plugins() -> list[dict[str, str]]:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    classes: list[type] = list(get_mapping_from_secret_type_to_class().values())
    names = sorted(c.__name__ for c in classes)
    return [{"name": n} for n in names if n not in _SKIPPED_PLUGINS]


def _scan_chunk(lines: list[str], offset: int, uri: str) -> Iterator[Finding]:
    from detect_secrets import SecretsCollection
    from detect_secrets.settings import transient_settings

    for i, line in enumerate(lines, start=offset + 1):
        for rule, pattern in _EXTRA_RULES:
            if pattern.search(line):
                yield Finding(uri, i, rule)
    suffix = os.path.splitext(uri.rsplit("/", 1)[-1])[1] or ".txt"
    fd, path = tempfile.mkstemp(suffix=suffix, prefix="rlcleanup-scan-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
        with transient_settings({"plugins_used": _plugins()}):
            collection = SecretsCollection()
            collection.scan_file(path)
            for _, secret in collection:
                yield Finding(uri, offset + (secret.line_number or 0), secret.type)
    finally:
        os.unlink(path)


def scan_text(storage: Storage, uri: str) -> list[Finding]:
    """Stream the object's lines; each chunk is scanned on its own (line numbers stay global)."""
    found: list[Finding] = []
    chunk: list[str] = []
    offset = 0
    for line in storage.iter_lines(uri):
        chunk.append(line)
        if len(chunk) >= _CHUNK_LINES:
            found.extend(_scan_chunk(chunk, offset, uri))
            offset += len(chunk)
            chunk = []
    if chunk:
        found.extend(_scan_chunk(chunk, offset, uri))
    return sorted(set(found), key=lambda f: (f.line, f.rule))


def scan_safetensors_metadata(storage: Storage, info: ObjectInfo) -> list[Finding]:
    """Only the header's `__metadata__` (string map); one pretty line per key keeps line numbers meaningful."""
    try:
        header = read_header(storage, info.uri, info.size)
    except CorruptHeaderError as exc:
        return [Finding(info.uri, 0, f"unscannable header: {exc.reason}")]
    if not header.metadata:
        return []
    keys = sorted(header.metadata)
    lines = [json.dumps({k: header.metadata[k]}) for k in keys]
    return [
        Finding(f"{info.uri}#__metadata__[{keys[f.line - 1]}]", f.line, f.rule) for f in _scan_chunk(lines, 0, info.uri)
    ]


def scan_objects(storage: Storage, objects: Iterable[ObjectInfo]) -> ScanReport:
    report = ScanReport(findings=[], scanned=[], skipped=[])
    for info in objects:
        name = info.uri.lower()
        if name.endswith(".safetensors"):
            report.findings.extend(scan_safetensors_metadata(storage, info))
            report.scanned.append(f"{info.uri}#__metadata__")
        elif is_text(info.uri):
            report.findings.extend(scan_text(storage, info.uri))
            report.scanned.append(info.uri)
        else:
            report.skipped.append(f"{info.uri}: binary (never scanned as text)")
    return report
