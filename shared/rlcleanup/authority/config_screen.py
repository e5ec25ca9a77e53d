"""A run's configuration screened as evidence before any of it is kept or shown across runs (docs/failures.md §3).

A configuration is evidence: the run's writer chose every value, and a later run's "what fixed it" diff shows them
to whoever reads another run's record. Each flattened key (`formats/config_diff.flatten_config`) and value passes
the rules published text passes (`authority/secrets.scan_string`: detect-secrets and our own plugins, over every
decoded view of the line), and a key that names a credential (`errors.names_credential`: `hf_token`,
`WANDB_API_KEY`, `aws_secret_access_key`, `password`, ...) is never kept by value, whatever its value looks like.
A withheld value is kept as `[withheld: <rule>]`, so the finding reads `key: rule`, never the secret.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from rlcleanup.authority.secrets import scan_string
from rlcleanup.errors import CREDENTIAL_KEY_RULE, names_credential, withheld

_KEY_WITHHELD = "[key withheld: {rule}]"


class ScreenedConfig(NamedTuple):
    values: dict[str, str]
    findings: list[str]  # `key: rule`, never a value


def _one_line(text: str) -> str:
    return text.replace("\r", " ").replace("\n", " ")


def screen_config(flat: Mapping[str, str]) -> ScreenedConfig:
    """`flat` with every value a secret rule or a credential-naming key withholds replaced, and every key a rule
    flags replaced by its position (a mapping keyed by a token). One scan over all keys, one over all lines."""
    items = [(_one_line(key), value) for key, value in flat.items()]
    key_rules: dict[int, set[str]] = {}
    for finding in scan_string("\n".join(key for key, _ in items), "config keys"):
        key_rules.setdefault(finding.line - 1, set()).add(finding.rule)
    line_rules: dict[int, set[str]] = {}
    lines = "\n".join(f"{key}: {_one_line(value)}" for key, value in items)
    for finding in scan_string(lines, "config"):
        line_rules.setdefault(finding.line - 1, set()).add(finding.rule)
    out: dict[str, str] = {}
    findings: list[str] = []
    for index, (key, value) in enumerate(items):
        shown_key = key
        if index in key_rules:
            rule = ",".join(sorted(key_rules[index]))
            shown_key = _KEY_WITHHELD.format(rule=rule) + f" #{index}"
            findings.append(f"{shown_key}: {rule}")
        if names_credential(key) and value not in ("null", '""'):
            out[shown_key] = withheld(CREDENTIAL_KEY_RULE)
            findings.append(f"{shown_key}: {CREDENTIAL_KEY_RULE}")
        elif index in line_rules:
            rule = ",".join(sorted(line_rules[index]))
            out[shown_key] = withheld(rule)
            findings.append(f"{shown_key}: {rule}")
        else:
            out[shown_key] = value
    return ScreenedConfig(out, findings)


def screen_command(command: str) -> str:
    """A launch command as it may be kept: each `key=value` argument (a Hydra override) whose key names a
    credential, and each argument a secret rule flags, shown as its key and rule, never its value."""
    words = command.split(" ")
    flagged: dict[int, set[str]] = {}
    for finding in scan_string("\n".join(_one_line(w) for w in words), "launch command"):
        flagged.setdefault(finding.line - 1, set()).add(finding.rule)
    out = []
    for index, word in enumerate(words):
        key, eq, _ = word.partition("=")
        if index and words[index - 1].startswith("-") and names_credential(words[index - 1].lstrip("-")):
            out.append(f"[withheld: {CREDENTIAL_KEY_RULE}]")  # `--hf_token <value>`
        elif eq and names_credential(key.lstrip("+~-")):
            out.append(f"{key}=[withheld: {CREDENTIAL_KEY_RULE}]")
        elif index in flagged:
            rule = ",".join(sorted(flagged[index]))
            out.append(f"{key}=[withheld: {rule}]" if eq else f"[withheld: {rule}]")
        else:
            out.append(word)
    return " ".join(out)
