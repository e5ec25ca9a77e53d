"""The fast secret scan finds exactly what the slow path finds (issue 13 item 4).

The slow path (`secrets.reference_findings`) runs every detect-secrets plugin, ours included, on every view of
every line: the line, JSON-unescaped, concatenations joined, base64 runs decoded, joined with the next line.
The fast path pre-filters whole blocks with RE2 (the plugins' own regexes relaxed to supersets, plus the decoder
triggers) and runs the plugins only on candidate lines. These tests try to make the two disagree: generated
secrets of every rule, hidden in every decoded form, cut at block edges, on lines over 1 MiB, with CRLF and the
non-ASCII letters Python's IGNORECASE folds onto ASCII.
"""

from __future__ import annotations

import base64
import json
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.authority import secret_prefilter as F
from rlcleanup.authority import secret_views as V
from rlcleanup.authority import secrets as S

with S.detect_secrets_session():
    RULES = F.rule_patterns()
    BLOCK_RX, VIEW_RX = F.block_regex(), F.view_regex()


def test_case_specials_are_every_character_ignorecase_folds_onto_ascii() -> None:
    """Exhaustive over every code point: the relaxed classes add exactly these for IGNORECASE rules."""
    every = "".join(chr(c) for c in range(0x80, 0x110000) if not 0xD800 <= c <= 0xDFFF)
    by_class = {m.group(0) for m in re.finditer(r"(?i)[\x00-\x7f]", every)}
    letters = "abcdefghijklmnopqrstuvwxyz"
    by_literal = {m.group(0) for m in re.finditer("(?i)(?:" + "|".join(letters) + ")", every)}
    assert by_class == by_literal == set(F.CASE_SPECIALS)
    for char, letter in F.CASE_SPECIALS.items():
        assert re.fullmatch(f"(?i){letter}", char)


def test_every_plugin_is_covered_by_the_prefilter() -> None:
    from detect_secrets.settings import get_plugins

    with S.detect_secrets_session():
        plugins = {type(p).__name__ for p in get_plugins()}
    assert plugins == set(S.rules())  # no rule runs that the pre-filter has not relaxed
    assert len(RULES) >= len(plugins)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), index=st.integers(min_value=0, max_value=len(RULES) - 1))
def test_relaxed_rules_match_whatever_a_rule_matches(data: st.DataObject, index: int) -> None:
    """Superset, per rule: any string a plugin regex matches, the relaxed RE2 union matches too (as a view, and
    as a line of a block when it has no newline)."""
    rule = RULES[index]
    hit = data.draw(st.from_regex(rule), label="matched")
    assert rule.search(hit)
    assert VIEW_RX.search(hit.encode("utf-8", "surrogatepass")) is not None, (rule.pattern, hit)
    if "\n" not in hit and "\r" not in hit:
        block = f"step 1 loss 0.3\n{hit}\nstep 2\n".encode("utf-8", "surrogatepass")
        m = BLOCK_RX.search(block)
        assert m is not None and b"\n" not in block[m.start() : m.end()], (rule.pattern, hit)


# ---------------------------------------------------------------- the differential

HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345"
KNOWN = [
    f"HF_TOKEN={HF}",
    "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ab",
    "aws_access_key_id = AKIAIOSFODNN7EXAMPLE",
    "wandb.login(key=" + '"' + "0123456789abcdef" * 2 + "01234567" + '")',
    "key: " + "0123456789abcdef" * 2 + "01234567",
    'password = "hunter2hunter2hunter2"',
    "https://user:s3cr3tpassw0rd@example.com/model",
    "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "-----BEGIN RSA PRIVATE KEY-----",
    "curl https://h/x?access_token=" + "AbCdEfGhIjKlMnOpQrStUvWx",
]
NOISE = [
    "(TrainerActor pid=4165) step 12 loss 0.41 reward/mean 0.51 grad_norm 1.2 num_tokens 8123",
    '{"step": 3, "policy_loss": 0.31, "reward/mean": 0.52, "timing/generate": 12.4, "num_tokens": 81234}',
    "2026-11-30 12:00:01 INFO worker-42c0472f8646b322907322326673c08bac20d53625d1648dfcd5e5b0 started",
    '  File "/opt/skyrl/skyrl_train/trainer.py", line 412, in train',
    "[vllm] INFO metrics.py:341 Avg prompt throughput: 1520.3 tokens/s, GPU KV cache usage: 41.2%",
    'model = "Qwen/Qwen2.5-7B-Instruct" tokenizer_path = ""',
    "C:\\Users\\ray\\ckpt passwd_file=/etc/x \\",
    "",
]
_TEXT = st.text(alphabet=st.sampled_from(list("aAkKsSiI0129 =:_-./\\\"'+{}@\t\u212a\u0131\u017f\u0130\r")), max_size=60)
_SPLIT = st.integers(min_value=1, max_value=40)


def _hidden(secret: str, form: str, cut: int) -> str:
    cut = min(cut, max(len(secret) - 1, 1))
    head, tail = secret[:cut], secret[cut:]
    return {
        "plain": secret,
        "base64": "blob " + base64.b64encode(secret.encode()).decode(),
        "base64url": base64.urlsafe_b64encode(("export " + secret).encode()).decode() + " trailing",
        "json": json.dumps({"msg": secret}),
        "json_u": json.dumps({"t": secret}).replace(secret[:1], f"\\u{ord(secret[0]):04x}", 1),
        "concat": f'tok = "{head}" + "{tail}"',
        "continuation": f'tok = "{head}\\\n{tail}"',
        "concat_newline": f'tok = ("{head}"\n    "{tail}")',
        "folded": secret.replace("k", "\u212a").replace("s", "\u017f"),
    }[form]


_FORMS = ["plain", "base64", "base64url", "json", "json_u", "concat", "continuation", "concat_newline", "folded"]


@st.composite
def _secrets(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        secret = draw(st.sampled_from(KNOWN))
    else:
        secret = draw(st.from_regex(draw(st.sampled_from(RULES))).filter(lambda s: "\n" not in s and len(s) < 300))
    return _hidden(secret, draw(st.sampled_from(_FORMS)), draw(_SPLIT))


_LINES = st.lists(st.one_of(st.sampled_from(NOISE), _TEXT, _secrets()), min_size=1, max_size=14)


def _fast(data: bytes, block: int) -> set[tuple[int, str]]:
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setattr(S, "_BLOCK", block)
        path = Path(tmp) / "train.log"
        path.write_bytes(data)
        storage = LocalStorage()
        info = storage.stat(str(path))
        assert info is not None
        with S.detect_secrets_session():
            return {(f.line, f.rule) for f in S.scan_text(storage, info)}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=_LINES, crlf=st.booleans(), block=st.integers(min_value=8, max_value=400), final_newline=st.booleans())
@example(lines=['{"msg": "apikey=\\"0\\ud800\\udc000\\""}'], crlf=False, block=8, final_newline=False)  # found by CI
def test_fast_scan_finds_exactly_what_the_slow_path_finds(
    lines: list[str], crlf: bool, block: int, final_newline: bool
) -> None:
    text = "\n".join(lines) + ("\n" if final_newline else "")
    data = text.replace("\n", "\r\n").encode() if crlf else text.encode("utf-8", "surrogatepass")
    slow = S.reference_findings(S._decode(data))
    assert _fast(data, block) == slow
    assert {(f.line, f.rule) for f in S.scan_string(S._decode(data), "u")} == slow


@pytest.mark.parametrize(
    "escaped", ["\\ud83d\\ude00", "\\ud800", "\\udc00", "\\udc00\\ud800"], ids=["pair", "high", "low", "reversed"]
)
def test_json_escaped_surrogates_are_scanned_not_crashed_on(escaped: str) -> None:
    """JSON escapes a character beyond the BMP as a surrogate pair; a lone one is legal JSON text too. The
    decoded view joins pairs and makes lone ones U+FFFD: the scan finds the token beside them instead of
    failing on text it cannot encode (a crash would refuse every publish of that file, not scan it)."""
    line = '{"msg": "apikey=\\"0' + escaped + '0\\"", "token": "' + HF + '"}'
    data = f"step 1\n{line}\n".encode()
    slow = S.reference_findings(S._decode(data))
    assert (2, "Hugging Face token") in slow, slow
    assert _fast(data, 64) == slow
    assert {(f.line, f.rule) for f in S.scan_string(S._decode(data), "u")} == slow


@pytest.mark.parametrize("form", _FORMS)
def test_a_secret_cut_by_every_block_edge_is_found_as_the_slow_path_finds_it(form: str) -> None:
    """Every block size from 8 to 120 bytes puts the edge at every position of the hidden token."""
    text = "\n".join([NOISE[0], _hidden(HF, form, 9), NOISE[2], ""])
    data = text.encode()
    slow = S.reference_findings(S._decode(data))
    assert any(rule == "Hugging Face token" for _, rule in slow), (form, slow)
    for block in range(8, 121, 7):
        assert _fast(data, block) == slow, (form, block)


def test_a_line_over_one_mib_gives_the_same_findings() -> None:
    pad = "." * (1024 * 1024 + 17)  # a progress-bar line; letters would cost the slow path minutes
    line = pad[: len(pad) // 2] + f" {HF} " + pad[len(pad) // 2 :] + ' password = "hunter2hunter2"'
    data = f"step 1\n{line}\nstep 2\n".encode()
    slow = S.reference_findings(S._decode(data))
    assert {(2, "Hugging Face token"), (2, "Secret Keyword")} <= slow
    assert _fast(data, 256 * 1024) == slow


@pytest.mark.parametrize("at", [0, 5, V.WINDOW - V.OVERLAP - 20, V.WINDOW - 20, 2 * V.WINDOW - 40, 3 * V.WINDOW])
def test_a_token_at_a_window_edge_of_a_long_line_gives_the_same_findings(at: int) -> None:
    pad = "y." * (3 * V.WINDOW // 2 + 99)
    line = pad[:at] + f" {HF} " + pad[at:]
    data = f"step 1\n{line}\n".encode()
    slow = S.reference_findings(S._decode(data))
    assert (2, "Hugging Face token") in slow
    assert _fast(data, 4096) == slow


@settings(max_examples=40, deadline=None)
@given(noise=st.lists(st.sampled_from(NOISE[:5]), min_size=50, max_size=200))
def test_ordinary_log_lines_are_not_candidates(noise: list[str]) -> None:
    """The pre-filter is narrow where it matters for speed: trainer log lines never reach detect-secrets."""
    buf = "\n".join(noise).encode()
    assume(buf)
    assert list(S._candidates(buf)) == []


def test_a_plugin_that_finds_secrets_by_its_own_code_stops_the_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pre-filter can vouch only for regexes: a plugin whose analyze_line is its own code (here one that
    flags any line) would be skipped on non-candidate lines, so building the pre-filter refuses it instead."""
    from detect_secrets.plugins.aws import AWSKeyDetector

    def anything(self: object, filename: str, line: str, **kwargs: object) -> set[object]:
        return set()

    monkeypatch.setattr(AWSKeyDetector, "analyze_line", anything)
    with S.detect_secrets_session(), pytest.raises(ValueError, match="AWSKeyDetector finds secrets by its own code"):
        F.rule_patterns()


def test_relaxing_drops_lookarounds_copies_backreferences_and_keeps_blocks_newline_free() -> None:
    relaxed = F.relaxed(re.compile(r"(?i)(?<=\W)api_?key\s*[:=]\s*(['\"])(\w{8,})\1"), block=True)
    assert "\\x{a}" not in relaxed  # block mode: no class admits a newline
    assert re.search(r"\(\?<", relaxed) is None and "\\1" not in relaxed  # lookbehind gone, backreference copied


# ---------------------------------------------------------------- base64 runs

VLLM_METRICS = (
    "(AsyncVLLMInferenceEngine pid=812) INFO 11-30 12:00:01 [loggers.py:123] Engine 000: "
    "Avg prompt throughput: 1520.3 tokens/s, Running: 64 reqs"
)


def test_a_line_whose_base64_runs_decode_to_nothing_is_not_a_candidate() -> None:
    """`AsyncVLLMInferenceEngine` is a mixed-case base64-alphabet run of 24 on every vLLM metrics line, and decodes
    to nothing printable: the line has no view to scan, so it is not a candidate (it was, and cost a search, a
    decode and two base64 attempts per line: most of the bench's logs). A run that decodes to text still is."""
    assert not any(V.b64_decoded(VLLM_METRICS))
    assert list(S._candidates("\n".join([VLLM_METRICS] * 3).encode())) == []
    hidden = "cfg " + base64.b64encode(f"HF_TOKEN={HF}".encode()).decode()
    assert [i for i, *_ in S._candidates("\n".join([VLLM_METRICS, hidden, VLLM_METRICS]).encode())] == [1]


_B64_PIECES = st.one_of(
    st.binary(min_size=12, max_size=40).map(lambda b: base64.b64encode(b).decode()),
    st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=12, max_size=40).map(
        lambda t: base64.urlsafe_b64encode(t.encode()).decode()
    ),
    st.sampled_from(KNOWN).map(lambda s: base64.b64encode(s.encode()).decode()),
    st.text(alphabet="AsyncVLMInferEgi0+/_-=", min_size=20, max_size=40),
    st.sampled_from([" ", "=", "==", "===", ":", "\u00e9", "\t", "x"]),
)
_B64_LINES = st.lists(st.lists(_B64_PIECES, max_size=6).map("".join), min_size=1, max_size=6)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=_B64_LINES)
def test_every_line_with_a_decodable_base64_run_is_a_candidate_and_scans_as_the_slow_path(lines: list[str]) -> None:
    """Runs that decode to text or not, padded or not, side by side or split by one character: a line is left out
    only when none of its runs decodes (b64_decoded, the views the scan would run the rules on, is empty)."""
    buf = "\n".join(lines).encode()
    candidates = {i for i, *_ in S._candidates(buf)}
    assert {i for i, line in enumerate(lines) if any(V.b64_decoded(line))} <= candidates
    slow = S.reference_findings(S._decode(buf))
    assert _fast(buf, 64) == slow
