"""Issue 40 item 3: the quarantine's lifecycle rule (Terraform output `quarantine_lifecycle_rule`, from
`local.quarantine_lifecycle_rule`), evaluated with `terraform console`, is a GCS bucket lifecycle configuration
that deletes only objects under the quarantine prefix after quarantine_days."""

from __future__ import annotations

from pathlib import Path

from google.cloud.storage import Bucket, Client
from google.cloud.storage.bucket import LifecycleRuleDelete
from test_infra import _console, needs_terraform

from rlcleanup.settings import QuarantineSettings


@needs_terraform
def test_the_quarantine_lifecycle_output_is_a_gcs_lifecycle_config_on_the_prefix(tmp_path: Path) -> None:
    (tmp_path / "default").mkdir()
    (tmp_path / "custom").mkdir()
    (default,) = _console(tmp_path / "default", ["local.quarantine_lifecycle_rule"])
    (custom,) = _console(
        tmp_path / "custom", ["local.quarantine_lifecycle_rule"], quarantine_days=30, quarantine_prefix="held"
    )
    settings = QuarantineSettings()
    for config, prefix, days in ((default, settings.prefix, settings.days), (custom, "held", 30)):
        assert config == {
            "rule": [{"action": {"type": "Delete"}, "condition": {"age": days, "matchesPrefix": [f"{prefix}/"]}}]
        }
        # As the GCS client reads a bucket's `lifecycle` resource (storage#bucket): one Delete rule, nothing else.
        bucket = Bucket(Client.create_anonymous_client(), name="runs")
        bucket._properties["lifecycle"] = config
        (rule,) = list(bucket.lifecycle_rules)
        assert isinstance(rule, LifecycleRuleDelete)
        assert rule["condition"] == {"age": days, "matchesPrefix": [f"{prefix}/"]}
