"""Registries fail closed (issue 46 item 3): a storage scheme the ledger has no price for is refused, never priced
as S3; the Cloud Run ports refuse to start without a project instead of making one up."""

from __future__ import annotations

import pytest

from rlcleanup.adapters.storage_router import RoutingStorage
from rlcleanup.authority.storage_ledger import Prices
from rlcleanup.errors import PermanentError
from rlcleanup.runtime.ports import cloud_ports
from rlcleanup.settings import SettingsError, unconfigured


def test_an_unpriced_scheme_is_refused_not_priced_as_another_store() -> None:
    """Prices are what each backend declares in the registry; a scheme nobody registered has none."""
    gib = 2**30
    prices = Prices(RoutingStorage())
    assert prices.monthly_usd("gs://b/x", gib) == 0.020
    assert prices.monthly_usd("s3://b/x", gib) == 0.023
    assert prices.monthly_usd("/local/x", gib) == 0.0
    with pytest.raises(PermanentError, match=r"no list price for scheme 'az'") as caught:
        prices.monthly_usd("az://container/x", gib)
    assert caught.value.code == "unpriced_scheme"
    assert "gs: GCS Standard" in prices.source() and "s3: S3 Standard" in prices.source() and "az" not in prices.used


def test_the_cloud_ports_need_a_project() -> None:
    settings = unconfigured().model_copy(update={"project": None})
    with pytest.raises(SettingsError, match="GOOGLE_CLOUD_PROJECT is not set"):
        cloud_ports(settings)
