"""rlcleanup's own secret rules, as detect-secrets plugins (so `# pragma: allowlist secret` and baselines apply).

Loaded by path (detect-secrets' `plugins_used: [{name, path: file://...}]`); the pre-filter in secrets.py must
know each rule's anchor. Patterns after gitleaks' rules where it has one.
"""

from __future__ import annotations

import re

from detect_secrets.plugins.base import RegexBasedDetector


class HuggingFaceTokenDetector(RegexBasedDetector):
    secret_type = "Hugging Face token"
    denylist = (re.compile(r"(?<![A-Za-z0-9])(hf_[A-Za-z0-9]{30,})(?![A-Za-z0-9])"),)


class HuggingFaceOrgTokenDetector(RegexBasedDetector):
    secret_type = "Hugging Face org token"
    denylist = (re.compile(r"(?<![A-Za-z0-9])(api_org_[A-Za-z0-9]{30,})(?![A-Za-z0-9])"),)


class GitHubFineGrainedTokenDetector(RegexBasedDetector):
    secret_type = "GitHub fine-grained token"
    denylist = (re.compile(r"(?<![A-Za-z0-9_])(github_pat_[A-Za-z0-9_]{22,255})"),)


class WandbKeyDetector(RegexBasedDetector):
    """W&B API keys: `WANDB_API_KEY=<40 hex>`, `key: <40 hex>` (settings files), `wandb.login(key="<40 hex>")`,
    and a bare 40-hex string beside `wandb` / `api.wandb.ai` on the same line."""

    secret_type = "W&B API key"
    denylist = (
        re.compile(r"(?i)WANDB_API_KEY['\"]?\s*[=:]\s*['\"]?([0-9a-f]{40})(?![0-9a-f])"),
        re.compile(r"(?i)(?:^|[\s{,])['\"]?(?:api_)?key['\"]?\s*[=:]\s*['\"]?([0-9a-f]{40})(?![0-9a-f])"),
        re.compile(r"(?i)wandb\.login\([^)]*key\s*=\s*['\"]([0-9a-f]{40})['\"]"),
        re.compile(r"(?i)wandb.*?(?<![0-9a-f])([0-9a-f]{40})(?![0-9a-f])"),
    )


class WandbNetrcDetector(RegexBasedDetector):
    secret_type = "W&B API key (netrc)"
    denylist = (re.compile(r"(?:^|\s)password\s+([0-9a-f]{40})(?![0-9a-f])"),)


class GcpServiceAccountKeyDetector(RegexBasedDetector):
    secret_type = "GCP service-account private key"
    denylist = (re.compile(r"(['\"]private_key['\"]\s*:\s*['\"]-----BEGIN (?:RSA )?PRIVATE KEY-----)"),)


class AwsSecretAccessKeyDetector(RegexBasedDetector):
    """An AWS secret access key assigned without quotes (detect-secrets' AWSKeyDetector needs them): shell
    `export AWS_SECRET_ACCESS_KEY=<40>`, `.env`, `~/.aws/credentials` (`aws_secret_access_key = <40>`), YAML
    `aws_secret_access_key: <40>`, a CLI flag `--aws-secret-access-key <40>`. Keys of exactly 40 base64-ish
    characters (after gitleaks' `aws-secret-access-key` rule)."""

    secret_type = "AWS secret access key"
    denylist = (
        re.compile(
            r"(?i)aws[_-]?secret[_-]?(?:access[_-]?)?key['\"]?(?:\s*[=:]\s*|\s+)['\"]?"
            r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"
        ),
    )


class UrlCredentialsDetector(RegexBasedDetector):
    """user:password@ in any URL (a base-model or dataset URL with a token in it)."""

    secret_type = "Credentials in a URL"
    denylist = (re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@'\"]+:([^/\s@'\"]{6,})@"),)


class UrlTokenParameterDetector(RegexBasedDetector):
    secret_type = "Token in a URL query"
    denylist = (
        re.compile(r"(?i)[?&](?:access_token|token|api_key|apikey|key|sig|signature)=([A-Za-z0-9%._~+/-]{16,})"),
    )


PLUGINS = (
    HuggingFaceTokenDetector,
    HuggingFaceOrgTokenDetector,
    GitHubFineGrainedTokenDetector,
    WandbKeyDetector,
    WandbNetrcDetector,
    GcpServiceAccountKeyDetector,
    AwsSecretAccessKeyDetector,
    UrlCredentialsDetector,
    UrlTokenParameterDetector,
)
