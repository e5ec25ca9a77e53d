"""Secret-scan evasions (issue 37 item 15): a token cut in two with text before each half, and an AWS secret
access key assigned without quotes. Each variant is found by the fast scan exactly as by the reference path."""

from __future__ import annotations

import pytest

from rlcleanup.authority.secrets import reference_findings, scan_string

HF = "hf_" + "Qw3rTy8uIoP2aSdF5gHjK1lZxC7vBn4mMnBv"
GH = "github_pat_" + "11ABCDEFG0" + "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUV"
AWS = "Zk3pQ9vLm2Xw8RtY7uN1bC4dE6fG0hJ5kL9mN2pQ"


def _split(token: str, at: int, first: str, second: str) -> str:
    return first.format(token[:at]) + "\n" + second.format(token[at:]) + "\n"


SPLIT_VARIANTS = {
    "shell exports, quoted": _split(HF, 15, 'export HF_A="{}"', 'export HF_B="{}"'),
    "shell exports, bare": _split(HF, 9, "HF_A={}", "HF_B={}"),
    "yaml keys, comment after": _split(HF, 20, "part_one: {}", "part_two: {}  # the rest"),
    "prose, full stop": _split(HF, 12, "the first half is {}", "and the second half is {}."),
    "python list items": _split(HF, 30, '    "{}",', '    "{}",'),
    "cut right after the prefix": _split(HF, 3, "token starts {}", "ends {}"),
    "github fine-grained": _split(GH, 25, "GH1={}", "GH2={}"),
}


@pytest.mark.parametrize("name", sorted(SPLIT_VARIANTS))
def test_a_token_split_across_two_lines_with_text_before_each_half_is_found(name: str) -> None:
    text = SPLIT_VARIANTS[name]
    found = {(f.line, f.rule) for f in scan_string(text, "log")}
    assert found, f"{name}: not found"
    assert found == reference_findings(text)
    assert all(line == 1 for line, _ in found)  # named at the line the token starts on, never the secret


AWS_VARIANTS = {
    "shell export": f"export AWS_SECRET_ACCESS_KEY={AWS}\n",
    "dotenv": f"AWS_SECRET_ACCESS_KEY={AWS}\n",
    "credentials ini": f"[default]\naws_access_key_id = AKIA0000\naws_secret_access_key = {AWS}\n",
    "yaml": f"env:\n  aws_secret_access_key: {AWS}\n",
    "cli flag": f"aws configure --aws-secret-access-key {AWS} --profile x\n",
    "inline env": f"AWS_SECRET_KEY={AWS} python train.py\n",
}


@pytest.mark.parametrize("name", sorted(AWS_VARIANTS))
def test_an_unquoted_aws_secret_access_key_is_found(name: str) -> None:
    text = AWS_VARIANTS[name]
    found = {(f.line, f.rule) for f in scan_string(text, "run.sh")}
    assert any(rule == "AWS secret access key" for _, rule in found), name
    assert found == reference_findings(text)


NOT_SECRETS = {
    "a variable name then a short word": "hf_token\nrevision: main\n",
    "an aws key name with a short value": "AWS_SECRET_ACCESS_KEY=${SECRET}\n",
    "41 characters are not an aws key": f"AWS_SECRET_ACCESS_KEY={AWS}Q\n",
}


@pytest.mark.parametrize("name", sorted(NOT_SECRETS))
def test_near_misses_are_not_findings(name: str) -> None:
    text = NOT_SECRETS[name]
    assert scan_string(text, "x") == []
    assert reference_findings(text) == set()
