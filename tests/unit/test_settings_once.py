"""The deployment's settings are read once, at cold start (issue 46 item 6): a bad grant limit fails the function's
start, naming its variable, not the first grant; what the running function obeys is that reading."""

from __future__ import annotations

import pytest

from rlcleanup.authority.grants import lifetime_limits
from rlcleanup.settings import GrantLimits, SettingsError, load_settings


def test_a_bad_grant_limit_fails_at_cold_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLCLEANUP_GRANT_CLOCK_SKEW_SECONDS", "-1")
    with pytest.raises(SettingsError, match="RLCLEANUP_GRANT_CLOCK_SKEW_SECONDS='-1'"):
        load_settings()


def test_the_limits_read_at_cold_start_are_the_ones_obeyed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLCLEANUP_GRANT_MAX_LIFETIME_SECONDS", "3600")
    deployed = load_settings()
    monkeypatch.setenv("RLCLEANUP_GRANT_MAX_LIFETIME_SECONDS", "60")  # changed after the start: not obeyed
    assert lifetime_limits(deployed.grant_limits).max_lifetime.total_seconds() == 3600
    assert lifetime_limits(GrantLimits(max_lifetime_seconds=7200)).max_lifetime.total_seconds() == 7200
