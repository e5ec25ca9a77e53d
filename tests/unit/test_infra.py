"""Offline checks of infra/ and cloudbuild.yaml (no provider download is possible here; see infra/README.md).

- `terraform fmt -check`, python-hcl2 assertions on the parsed .tf files, and checkov over infra/;
- the generated topology.auto.tfvars.json equals what the topology produces now (drift);
- the derived maps in infra/locals.tf, evaluated for real with `terraform console` (locals.tf references only
  variables, so it evaluates without the google provider).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hcl2
import pytest
import yaml

from rlcleanup.runtime.tfvars import render, topology_tfvars
from rlcleanup.runtime.topology import load_topology
from rlcleanup.settings import env_names

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"  # the thin root: provider, backend, one module call
MODULE = INFRA / "modules" / "rlcleanup"  # the reusable resources
TFVARS = INFRA / "topology.auto.tfvars.json"
CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"
TERRAFORM = shutil.which("terraform")
needs_terraform = pytest.mark.skipif(TERRAFORM is None, reason="terraform binary not on PATH")
TF_ENV = {**os.environ, "TF_CLI_CONFIG_FILE": "/dev/null", "TF_IN_AUTOMATION": "1"}
PUBLIC_MEMBERS = ("allUsers", "allAuthenticatedUsers")

GRANT_APPLIERS = {"apply-grant", "retry-waiting-grants"}
FRAMEWORK_VARIABLES = {"LOG_EXECUTION_ID"}  # read by functions-framework, not by rlcleanup.settings


# --- helpers ------------------------------------------------------------------------------------------------------


def _load(path: Path) -> dict[str, Any]:
    with path.open(encoding="utf-8") as f:
        return hcl2.load(
            f, serialization_options=hcl2.utils.SerializationOptions(strip_string_quotes=True, explicit_blocks=False)
        )


@pytest.fixture(scope="module")
def parsed() -> dict[str, dict[str, Any]]:
    return {p.name: _load(p) for p in sorted(MODULE.glob("*.tf"))}


def _resources(parsed: dict[str, dict[str, Any]]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for doc in parsed.values():
        for block in doc.get("resource", []):
            for rtype, named in block.items():
                for name, body in named.items():
                    yield rtype, name, body


def _resource(parsed: dict[str, dict[str, Any]], rtype: str, name: str) -> dict[str, Any]:
    found = [body for t, n, body in _resources(parsed) if (t, n) == (rtype, name)]
    assert len(found) == 1, f"expected exactly one {rtype}.{name}, found {len(found)}"
    return found[0]


def _block(body: dict[str, Any], key: str) -> dict[str, Any]:
    value = body.get(key)
    assert isinstance(value, list) and len(value) == 1, f"expected one `{key}` block, got {value!r}"
    return value[0]


def _service_publisher(parsed: dict[str, dict[str, Any]], name: str) -> tuple[str, str, str]:
    """(when it is on, its topic, its member) of one entry of `local.service_publishers` (iam.tf), as written; and
    the one resource it drives publishes on that topic, as that member, as publisher only."""
    resource = _resource(parsed, "google_pubsub_topic_iam_member", "service_publisher")
    assert resource["for_each"] == "${local.service_publishers}" and resource["role"] == "roles/pubsub.publisher"
    assert resource["topic"] == "${google_pubsub_topic.topic[each.value.topic].id}"
    assert resource["member"] == "${each.value.member}"
    entry = re.search(
        rf"{name} = \{{on = ([^,]+), topic = ([^,]+), member = (.+?)\}}", _locals(parsed)["service_publishers"]
    )
    assert entry is not None, name
    on, topic, member = entry.groups()
    return on, topic, member


def _locals(parsed: dict[str, dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for doc in parsed.values():
        for block in doc.get("locals", []):
            merged.update(block)
    return merged


@pytest.fixture(scope="module")
def tfvars() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(TFVARS.read_text(encoding="utf-8"))
    return data


# --- formatting and generated inputs ------------------------------------------------------------------------------


@needs_terraform
def test_terraform_fmt_clean() -> None:
    proc = subprocess.run(
        [TERRAFORM or "terraform", "fmt", "-check", "-recursive", "-diff", str(INFRA)],
        env=TF_ENV,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, f"terraform fmt -check failed (run `terraform fmt -recursive infra`):\n{proc.stdout}"


def test_generated_tfvars_match_topology() -> None:
    assert TFVARS.read_text(encoding="utf-8") == render(), (
        "infra/topology.auto.tfvars.json drifted from topology.yaml; regenerate with "
        "`python -m rlcleanup.runtime.tfvars > infra/topology.auto.tfvars.json`"
    )


def test_tfvars_cover_every_topology_function_topic_and_sink(tfvars: dict[str, Any]) -> None:
    topo = load_topology()
    assert set(tfvars["topology_topics"]) == {t.name for t in topo.topics}
    assert set(tfvars["topology_sinks"]) == {s.subscription for s in topo.sinks}
    fns = tfvars["topology_functions"]
    assert set(fns) == {f.name for f in topo.functions}
    for spec in topo.functions:
        f = fns[spec.name]
        assert f["entry_point"] == spec.entry_point
        assert f["trigger"] == spec.trigger and f["publishes"] == spec.publishes
        assert f["push_subscription"] == f"{spec.name}-push"
        assert f["dead_letter_topic"] == f"{spec.name}-dlq"
        assert f["dead_letter_subscription"] == f"{spec.name}-dlq-sub"
        assert f["ack_deadline_seconds"] >= f["timeout_seconds"], spec.name
    assert topology_tfvars(topo) == tfvars


def test_every_tfvars_key_is_a_declared_variable(parsed: dict[str, dict[str, Any]], tfvars: dict[str, Any]) -> None:
    declared = {name for block in parsed["variables.tf"]["variable"] for name in block}
    assert set(tfvars) <= declared


# --- the thin root and the reusable module --------------------------------------------------------------------


def _root() -> dict[str, dict[str, Any]]:
    return {p.name: _load(p) for p in sorted(INFRA.glob("*.tf"))}


def _declared(doc: dict[str, Any], kind: str) -> dict[str, Any]:
    return {name: body for block in doc.get(kind, []) for name, body in block.items()}


def test_root_is_provider_backend_and_one_module_call(parsed: dict[str, dict[str, Any]]) -> None:
    root = _root()
    assert not [n for doc in root.values() for n in doc.get("resource", [])], "resources belong in the module"
    [call] = [b for doc in root.values() for b in doc.get("module", [])]
    module = call["rlcleanup"]
    assert module["source"] == "./modules/rlcleanup"
    module_vars = _declared(parsed["variables.tf"], "variable")
    root_vars = _declared(root["variables.tf"], "variable")
    # Every module input is passed straight through from a root variable of the same name, with the same default.
    assert {k for k in module if k != "source"} == set(module_vars) == set(root_vars)
    for name in module_vars:
        assert module[name] == f"${{var.{name}}}", name
        assert root_vars[name].get("default", "<none>") == module_vars[name].get("default", "<none>"), name
    # The root re-exports every module output.
    module_outputs = _declared(parsed["outputs.tf"], "output")
    root_outputs = _declared(root["outputs.tf"], "output")
    assert set(root_outputs) == set(module_outputs)
    assert all(o["value"] == f"${{module.rlcleanup.{n}}}" for n, o in root_outputs.items())


def test_module_has_no_provider_or_backend(parsed: dict[str, dict[str, Any]]) -> None:
    """A team instantiates the module in its own Terraform: provider configuration and state are theirs."""
    assert not [doc for doc in parsed.values() if doc.get("provider")]
    [terraform] = [block for doc in parsed.values() for block in doc.get("terraform", [])]
    assert "backend" not in terraform and "google" in terraform["required_providers"][0]
    root_terraform = _load(INFRA / "versions.tf")
    assert root_terraform["provider"] and root_terraform["terraform"][0]["backend"]


# --- resources from the topology, never hand-copied --------------------------------------------------------------


def test_topology_resources_use_for_each_over_generated_maps(parsed: dict[str, dict[str, Any]]) -> None:
    assert _resource(parsed, "google_pubsub_topic", "topic")["for_each"] == "${var.topology_topics}"
    pushes = _locals(parsed)["push_subscriptions"]
    assert pushes["functions"].startswith("${{for fn, f in local.triggered_functions : fn => {")
    assert pushes["dead-letter-records"].startswith("${{for sub, r in local.dead_letter_records : sub => {")
    assert _resource(parsed, "google_pubsub_subscription", "sink")["for_each"] == "${var.topology_sinks}"
    assert _resource(parsed, "google_cloudfunctions2_function", "fn")["for_each"] == "${var.topology_functions}"
    assert _resource(parsed, "google_pubsub_topic", "dead_letter")["for_each"] == "${local.dead_letter_topics}"
    [pulls] = [
        b["dead_letter_pulls"] for doc in parsed.values() for b in doc.get("module", []) if "dead_letter_pulls" in b
    ]
    assert pulls["for_each"]["functions"].startswith("${{for sub, d in local.dead_letter_subscriptions : sub => {")
    assert pulls["for_each"]["sinks"].startswith("${{for sink, d in local.sink_dead_letters : d.subscription => {")
    # No topology name is spelled out in a .tf file. Exceptions: the access table, the event sources and the job
    # hand-offs in locals.tf, and the grants topic (local.grants_topic, and the validation that no function publishes
    # to it: validations cannot read locals).
    names = {f.name for f in load_topology().functions} | {t.name for t in load_topology().topics}
    for fname in parsed:
        text = (MODULE / fname).read_text(encoding="utf-8")
        if fname == "locals.tf":
            text = re.sub(r"function_access = \{.*?\n  \}\n", "", text, flags=re.S)
            text = text.replace('grants_topic = "authority-grants"', "")
            text = re.sub(r"event_sources = \{.*?\n  \}\n", "", text, flags=re.S)
            text = re.sub(r"job_hand_offs = \{.*?\n  \}\n", "", text, flags=re.S)
        if fname == "variables.tf":
            text = text.replace('contains(f.publishes, "authority-grants")', "")
        for name in names:
            assert f'"{name}"' not in text, f"{fname} hard-codes topology name {name!r}"


def test_function_access_covers_exactly_the_topology_functions(parsed: dict[str, dict[str, Any]]) -> None:
    access = _locals(parsed)["function_access"]
    assert set(access) == {f.name for f in load_topology().functions}
    deleters = {fn for fn, a in access.items() if a["delete_in_runs"]}
    # Only the grant-applying functions (apply-grant, and retry-waiting-grants for grants that arrived before
    # their record was ready) carry out a reclaim, so only they may delete in run buckets.
    assert deleters == GRANT_APPLIERS, "only the grant functions (reclaim) may delete in run buckets"


# --- push subscriptions -------------------------------------------------------------------------------------------


def _push_module(parsed: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    """The push subscriptions: the module call, its one resource, and the two typed maps that drive it."""
    [call] = [
        b["push_subscriptions"] for doc in parsed.values() for b in doc.get("module", []) if "push_subscriptions" in b
    ]
    assert call["source"] == "./push_subscriptions" and call["for_each"] == "${local.push_subscriptions}"
    assert (call["subscriptions"], call["functions"]) == ("${each.value}", "${local.push_targets}")
    child = {p.name: _load(p) for p in sorted((MODULE / "push_subscriptions").glob("*.tf"))}
    return call, _resource(child, "google_pubsub_subscription", "this"), _locals(parsed)


def test_every_push_subscription_has_dead_letter_retry_and_oidc(parsed: dict[str, dict[str, Any]]) -> None:
    # No push subscription is declared twice: both kinds are instances of the module's one resource, moved there
    # whole (every instance keeps its key), so an apply over an earlier deployment recreates none.
    assert not [n for t, n, b in _resources(parsed) if t == "google_pubsub_subscription" and "push_config" in b]
    moved = [m for doc in parsed.values() for m in doc.get("moved", [])]
    for old, key in (("push", "functions"), ("dead_letter_record", "dead-letter-records")):
        target = f'${{module.push_subscriptions["{key}"].google_pubsub_subscription.this}}'
        assert {"from": f"${{google_pubsub_subscription.{old}}}", "to": target} in moved
    _, body, local = _push_module(parsed)
    target = "var.functions[each.value.function]"
    push = _block(body, "push_config")
    assert push["push_endpoint"] == f"${{{target}.topics_endpoint}}/${{each.value.topic_name}}"
    assert _block(push, "oidc_token") == {
        "service_account_email": f"${{{target}.invoker_email}}",
        "audience": f"${{{target}.uri}}",
    }
    assert _block(body, "dead_letter_policy") == {
        "dead_letter_topic": f"${{{target}.dead_letter_topic_id}}",
        "max_delivery_attempts": f"${{{target}.max_delivery_attempts}}",
    }
    assert _block(body, "retry_policy") == {
        "minimum_backoff": f"${{{target}.minimum_backoff}}",
        "maximum_backoff": f"${{{target}.maximum_backoff}}",
    }
    assert (body["name"], body["topic"]) == ("${each.value.name}", "${each.value.topic_id}")
    # What a subscription takes from the function it pushes to: its endpoint (/projects/P/topics/T puts the topic
    # into the CloudEvent `source`), its own invoker identity, its topology settings, its own dead-letter topic.
    targets = local["push_targets"]
    assert targets.startswith("${{for fn, f in var.topology_functions : fn => {")
    for part in (
        'topics_endpoint = "${google_cloudfunctions2_function.fn[fn].service_config[0].uri}/projects/${var.project_id}/topics"',
        "uri = google_cloudfunctions2_function.fn[fn].service_config[0].uri",
        "invoker_email = google_service_account.invoker[fn].email",
        "dead_letter_topic_id = google_pubsub_topic.dead_letter[f.dead_letter_topic].id",
        "max_delivery_attempts = f.max_delivery_attempts",
        "minimum_backoff = f.minimum_backoff, maximum_backoff = f.maximum_backoff",
    ):
        assert part in targets, part
    # A function's own subscription reads its trigger and pushes to it; the recorder's read the dead-letter topics.
    functions, records = local["push_subscriptions"]["functions"], local["push_subscriptions"]["dead-letter-records"]
    assert "name = f.push_subscription, topic_id = google_pubsub_topic.topic[f.trigger].id" in functions
    assert "topic_name = f.trigger, function = fn" in functions
    assert "name = sub, topic_id = google_pubsub_topic.dead_letter[r.topic].id, topic_name = r.topic" in records
    assert "function = var.topology_dead_letter_recorder" in records and "dead_letter_for = r.function" in records


def test_ack_deadline_covers_function_timeout(parsed: dict[str, dict[str, Any]], tfvars: dict[str, Any]) -> None:
    # Both sides read the same topology entry ...
    fn = _resource(parsed, "google_cloudfunctions2_function", "fn")
    assert _block(fn, "service_config")["timeout_seconds"] == "${each.value.timeout_seconds}"
    _, sub, local = _push_module(parsed)
    assert sub["ack_deadline_seconds"] == "${var.functions[each.value.function].ack_deadline_seconds}"
    assert "ack_deadline_seconds = f.ack_deadline_seconds" in local["push_targets"]
    # ... whose values satisfy timeout <= ack deadline <= 600 for every function.
    for name, f in tfvars["topology_functions"].items():
        assert f["timeout_seconds"] <= f["ack_deadline_seconds"] <= 600, name
        assert 5 <= f["max_delivery_attempts"] <= 100, name


def test_each_function_publishes_to_its_own_dead_letter_topic(parsed: dict[str, dict[str, Any]]) -> None:
    # record_poison parks a copy of every permanent error on the function's own <fn>-dlq (see infra/README.md).
    pub = _resource(parsed, "google_pubsub_topic_iam_member", "function_dead_letter_publisher")
    assert pub["for_each"] == "${local.function_dead_letter_publishers}" and pub["role"] == "roles/pubsub.publisher"
    assert pub["topic"] == "${google_pubsub_topic.dead_letter[each.value.topic].id}"
    assert pub["member"] == "${google_service_account.runtime[each.key].member}"


def test_dead_letter_grants_for_pubsub_service_agent(parsed: dict[str, dict[str, Any]]) -> None:
    pub = _resource(parsed, "google_pubsub_topic_iam_member", "dead_letter_publisher")
    assert pub["for_each"] == "${local.dead_letter_topics}" and pub["role"] == "roles/pubsub.publisher"
    assert pub["member"] == "${local.pubsub_service_agent}"
    sub = _resource(parsed, "google_pubsub_subscription_iam_member", "dead_letter_subscriber")
    assert sub["for_each"] == "${local.triggered_functions}" and sub["role"] == "roles/pubsub.subscriber"
    assert sub["subscription"] == '${module.push_subscriptions["functions"].ids[each.key]}'
    rec = _resource(parsed, "google_pubsub_subscription_iam_member", "dead_letter_record_subscriber")
    assert rec["for_each"] == "${local.dead_letter_records}" and rec["role"] == "roles/pubsub.subscriber"
    assert rec["subscription"] == '${module.push_subscriptions["dead-letter-records"].ids[each.key]}'
    assert _locals(parsed)["pubsub_service_agent"].endswith("@gcp-sa-pubsub.iam.gserviceaccount.com")


def test_push_invoker_is_run_invoker_on_its_own_function(parsed: dict[str, dict[str, Any]]) -> None:
    inv = _resource(parsed, "google_cloud_run_service_iam_member", "push_invoker")
    assert inv["for_each"] == "${var.topology_functions}"
    assert inv["role"] == "roles/run.invoker"
    assert inv["service"] == "${google_cloudfunctions2_function.fn[each.key].name}"
    assert inv["member"] == "${google_service_account.invoker[each.key].member}"


# --- functions ----------------------------------------------------------------------------------------------------


def test_functions_run_as_their_own_service_account(parsed: dict[str, dict[str, Any]]) -> None:
    fns = [(n, b) for t, n, b in _resources(parsed) if t == "google_cloudfunctions2_function"]
    assert fns, "no google_cloudfunctions2_function in infra/"
    for name, body in fns:
        svc = _block(body, "service_config")
        assert svc.get("service_account_email") == "${google_service_account.runtime[each.key].email}", name
        assert svc["ingress_settings"] == "ALLOW_INTERNAL_ONLY"
        assert svc["available_memory"] == "${each.value.memory}"
        assert svc["max_instance_count"] == "${each.value.max_instances}"
        env = svc["environment_variables"]
        # Every variable Terraform sets is one the settings read (and so used), and every one they read is set;
        # LOG_EXECUTION_ID is functions-framework's own.
        # Secrets (the Iris token) arrive as secret environment variables, not plain ones.
        secrets = {
            d["content"][0]["key"] for d in svc.get("dynamic", []) for d in [d.get("secret_environment_variables")] if d
        }
        # Credentials the adapters read themselves (issue 15): each S3 endpoint's JSON, the Hub token, the Hub audit's read-only token.
        credentials = {
            'RLCLEANUP_S3_ENDPOINT_${upper(replace(secret_environment_variables.key, "-", "_"))}',
            "HF_TOKEN",
            "RLCLEANUP_HUB_AUDIT_TOKEN",
        }
        assert set(env) - FRAMEWORK_VARIABLES | (secrets - credentials) == env_names()
        assert secrets == {"RLCLEANUP_IRIS_TOKEN", *credentials}
        assert env["RLCLEANUP_FUNCTION"] == "${each.key}"
        assert env["RLCLEANUP_LEASE_SECONDS"] == "${tostring(each.value.timeout_seconds)}"
        build = _block(body, "build_config")
        assert build["runtime"] == "python311"
        assert build["entry_point"] == "${each.value.entry_point}"
        assert build["service_account"] == "${google_service_account.builder.id}", "builds must not use the default SA"
        storage = _block(_block(build, "source"), "storage_source")
        assert storage["object"] == "${google_storage_bucket_object.bundle.name}"
        assert "event_trigger" not in body, "triggered by our own push subscription, not Eventarc"
    text = "\n".join(p.read_text(encoding="utf-8") for p in INFRA.rglob("*.tf"))
    assert "compute@developer.gserviceaccount.com" not in text
    assert "appspot.gserviceaccount.com" not in text


def test_bundle_object_is_content_addressed(parsed: dict[str, dict[str, Any]]) -> None:
    obj = _resource(parsed, "google_storage_bucket_object", "bundle")
    assert obj["name"] == "bundle-${substr(filesha256(var.bundle_path), 0, 16)}.zip"
    assert obj["source"] == "${var.bundle_path}"


# --- IAM ----------------------------------------------------------------------------------------------------------


def test_no_public_principals_anywhere() -> None:
    for path in sorted(p for p in INFRA.rglob("*") if p.is_file() and ".terraform" not in p.parts):
        text = path.read_text(encoding="utf-8")
        for member in PUBLIC_MEMBERS:
            assert member not in text, f"{path.relative_to(ROOT)} mentions {member}"


def _names_other_topic(topic: str) -> bool:
    """A grant on one named topic other than authority-grants (the event sources' publishers, modules/rlcleanup/events.tf;
    the large-copy job's, copy_job.tf)."""
    pattern = r"\$\{google_pubsub_topic\.topic\[local\.(?:event_sources|job_hand_offs)\.(\w+)\]\.id\}"
    match = re.fullmatch(pattern, topic)
    return match is not None


def test_only_approvers_publish_to_authority_grants(parsed: dict[str, dict[str, Any]], tfvars: dict[str, Any]) -> None:
    topic_iam = [(t, n, b) for t, n, b in _resources(parsed) if t.startswith("google_pubsub_topic_iam")]
    assert not [n for t, n, _ in topic_iam if t == "google_pubsub_topic_iam_policy"], "no authoritative topic policies"
    on_grants = [
        (t, n, b)
        for t, n, b in topic_iam
        if "local.grants_topic" in b["topic"]
        or "authority-grants" in b["topic"]
        or ("each" not in b["topic"] and not _names_other_topic(b["topic"]))
    ]
    assert [(t, n) for t, n, _ in on_grants] == [("google_pubsub_topic_iam_binding", "grants_publishers")]
    binding = on_grants[0][2]
    assert binding["topic"] == "${google_pubsub_topic.topic[local.grants_topic].id}"
    assert binding["role"] == "roles/pubsub.publisher"
    assert binding["members"] == "${var.approver_principals}"
    assert _locals(parsed)["grants_topic"] == "authority-grants"
    # Per-function publisher bindings iterate over a map that filters the grants topic out, and no function
    # publishes there in the topology either (the variable validation rejects it too).
    assert _resource(parsed, "google_pubsub_topic_iam_member", "function_publisher")["for_each"] == (
        "${local.function_publishers}"
    )
    assert all("authority-grants" not in f["publishes"] for f in tfvars["topology_functions"].values())
    # Nothing grants publish rights project-wide.
    for t, n, b in _resources(parsed):
        if t == "google_project_iam_member":
            role = str(b["role"])
            assert "pubsub" not in role and "roles/owner" not in role and "roles/editor" not in role, (t, n, role)
            if role.startswith("${"):
                assert role == "${each.key}" and "pubsub" not in str(b.get("for_each", "")), (t, n)


# --- the derived maps, evaluated by terraform itself --------------------------------------------------------------

CONSOLE_VARS = {
    "project_id": "my-project-1",
    "region": "us-central1",
    "run_buckets": ["runs-a", "runs-b"],
    "preserve_bucket": "evidence-b",
    "approver_principals": ["group:approvers@example.com"],
    "allowed_destination_prefixes": ["gs://handoff-x/releases/"],
    "alert_notification_channel": "projects/my-project-1/notificationChannels/123",
}


def _console(tmp_path: Path, expressions: list[str], **overrides: Any) -> list[Any]:
    proc = _run_console(tmp_path, expressions, **overrides)
    assert proc.returncode == 0, proc.stderr
    values_out: list[Any] = json.loads(json.loads(proc.stdout.strip()))
    assert len(values_out) == len(expressions), proc.stdout
    return values_out


def _validation_errors(tmp_path: Path, **overrides: Any) -> str:
    """What `terraform console` says about the variables' validation rules (it reports a failed rule on stderr and
    goes on), as one line of text without the box drawing."""
    stderr = _run_console(tmp_path, ["0"], **overrides).stderr
    return " ".join(re.sub(r"\x1b\[[0-9;]*m|[│╷╵]", " ", stderr).split())


def _run_console(tmp_path: Path, expressions: list[str], **overrides: Any) -> subprocess.CompletedProcess[str]:
    for name in ("variables.tf", "locals.tf"):
        shutil.copy(MODULE / name, tmp_path / name)
    shutil.copy(TFVARS, tmp_path / TFVARS.name)
    (tmp_path / "bundle-0123456789abcdef.zip").write_bytes(b"PK\x05\x06" + b"\0" * 18)
    values = {**CONSOLE_VARS, "bundle_path": "bundle-0123456789abcdef.zip", **overrides}
    (tmp_path / "test.auto.tfvars.json").write_text(json.dumps(values), encoding="utf-8")
    return subprocess.run(
        [TERRAFORM or "terraform", "console"],
        input=f"jsonencode([{', '.join(expressions)}])\n",
        cwd=tmp_path,
        env=TF_ENV,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


@needs_terraform
def test_derived_iam_maps(tmp_path: Path, tfvars: dict[str, Any]) -> None:
    publishers, dlq_publishers, storage, evidence, inspectors, dlq_topics, dlq_subs = _console(
        tmp_path,
        [
            "local.function_publishers",
            "local.function_dead_letter_publishers",
            "local.storage_bindings",
            "local.evidence_bindings",
            "local.destination_inspectors",
            "local.dead_letter_topics",
            "local.dead_letter_subscriptions",
        ],
    )
    fns = tfvars["topology_functions"]
    # Publisher on exactly the topics each function publishes to (the same list the publish guard enforces), its
    # own dead-letter topic included, bound on the dead-letter topic resource.
    granted = {(b["function"], b["topic"]) for b in publishers.values()}
    granted |= {(fn, b["topic"]) for fn, b in dlq_publishers.items()}
    assert granted == {(fn, t) for fn, f in fns.items() for t in f["publishes"]}
    assert granted == {(fn.name, t) for fn in load_topology().functions for t in fn.publishes}
    assert {fn: b["topic"] for fn, b in dlq_publishers.items()} == {fn: f["dead_letter_topic"] for fn, f in fns.items()}
    assert not {b["topic"] for b in publishers.values()} & set(dlq_topics), "dead-letter topics are bound apart"
    # Deleting in run buckets (objectUser) is the grant function's alone, and only on run buckets.
    users = {(b["function"], b["bucket"]) for b in storage.values() if b["role"] == "roles/storage.objectUser"}
    assert users == {(fn, b) for fn in GRANT_APPLIERS for b in CONSOLE_VARS["run_buckets"]}
    assert {b["role"] for b in storage.values()} <= {
        "roles/storage.objectViewer",
        "roles/storage.objectCreator",
        "roles/storage.objectUser",
    }
    writers = {b["function"] for b in storage.values() if b["role"] == "roles/storage.objectCreator"}
    assert writers <= {"apply-grant", "retry-waiting-grants"}
    assert all(b["bucket"] == "handoff-x" for b in storage.values() if b["role"] == "roles/storage.objectCreator")
    assert {b["function"] for b in inspectors.values()} == writers
    # Evidence is written (create only, no overwrite/delete role) by the functions whose steps write it:
    # capture, derived metrics/listings/reports, pre-cancel capture, grant provenance and reclaim plans.
    assert {b["function"] for b in evidence.values() if b["role"] == "roles/storage.objectCreator"} == {
        "capture-part",
        "capture-pre-cancel",
        "establish-terminal-state",
        "scan-log-part",
        "plan-capture",
        "select-candidate",
        "record-dead-letter",  # a failed member's fan-in writes the capture manifest; a failed run its manifest
        *GRANT_APPLIERS,
    }
    assert not any(b["role"] == "roles/storage.objectUser" for b in evidence.values()), "nobody deletes evidence"
    assert {b["role"] for b in evidence.values()} == {"roles/storage.objectViewer", "roles/storage.objectCreator"}
    # One dead-letter topic and subscription per function.
    assert dlq_topics == {f["dead_letter_topic"]: fn for fn, f in fns.items()}
    assert {s: v["topic"] for s, v in dlq_subs.items()} == {
        f["dead_letter_subscription"]: f["dead_letter_topic"] for f in fns.values()
    }


@needs_terraform
@pytest.mark.parametrize("prefix", ["rlc", "abcdefgh"])
def test_service_account_ids_are_valid_and_unique(tmp_path: Path, prefix: str, tfvars: dict[str, Any]) -> None:
    runtime, invoker = _console(tmp_path, ["local.runtime_sa_ids", "local.invoker_sa_ids"], name_prefix=prefix)
    assert set(runtime) == set(invoker) == set(tfvars["topology_functions"])
    ids = [*runtime.values(), *invoker.values(), f"{prefix}-fn-builder"]
    assert len(set(ids)) == len(ids)
    for sa in ids:
        assert re.fullmatch(r"[a-z][a-z0-9-]{4,28}[a-z0-9]", sa), sa


# --- cloudbuild.yaml ----------------------------------------------------------------------------------------------


def test_cloudbuild_steps_in_order() -> None:
    build = yaml.safe_load((ROOT / "cloudbuild.yaml").read_text(encoding="utf-8"))
    steps = build["steps"]
    assert [s["id"] for s in steps] == ["lint", "test", "bundle", "tf-init", "tf-plan", "tf-apply"]
    scripts = [" ".join([*s.get("args", []), s.get("script", "")]) for s in steps]
    assert "make lint" in scripts[0]
    assert "make test" in scripts[1]
    assert "scripts/build_bundle.py" in scripts[2]
    assert "init" in scripts[3] and "-backend-config=bucket=${_TF_STATE_BUCKET}" in scripts[3]
    assert "plan" in scripts[4] and "-out=" in scripts[4]
    assert "apply" in scripts[5]
    for i, step in enumerate(steps[1:], start=1):  # each step waits for the one before it
        assert step.get("waitFor", [steps[i - 1]["id"]]) == [steps[i - 1]["id"]], step["id"]
    assert {"_PROJECT_ID", "_REGION", "_TF_STATE_BUCKET"} <= set(build["substitutions"])
    backend = _load(INFRA / "versions.tf")["terraform"][0]["backend"][0]
    assert "gcs" in backend and "bucket" not in backend["gcs"], "backend must be partial: bucket comes from init"


# --- checkov ------------------------------------------------------------------------------------------------------


def test_checkov_has_no_failed_checks() -> None:
    assert CHECKOV.exists(), "checkov is not installed: run `make test` (or `make .venv-checkov/.installed`)"
    proc = subprocess.run(
        [str(CHECKOV), "-d", str(INFRA), "--framework", "terraform", "--compact", "--quiet", "--skip-download"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=240,
    )
    assert proc.returncode == 0, f"checkov found failed checks:\n{proc.stdout}\n{proc.stderr}"
    assert re.search(r"Failed checks: 0\b", proc.stdout), proc.stdout
    # Every skip must carry a reason next to it in the .tf file.
    for path in INFRA.rglob("*.tf"):
        for line in path.read_text(encoding="utf-8").splitlines():
            if "checkov:skip=" in line:
                assert re.search(r"checkov:skip=CKV2?_[A-Z]+_\d+: \S.{20,}", line), f"{path.name}: unjustified skip"


# --- event sources (modules/rlcleanup/events.tf) ------------------------------------------------------------------------------


def test_run_buckets_notify_storage_events(parsed: dict[str, dict[str, Any]], tfvars: dict[str, Any]) -> None:
    notification = _resource(parsed, "google_storage_notification", "run_bucket")
    assert notification["for_each"] == "${local.run_bucket_notifications}"
    assert notification["topic"] == "${google_pubsub_topic.topic[local.event_sources.storage_events].id}"
    assert (notification["payload_format"], notification["event_types"]) == ("JSON_API_V1", ["OBJECT_FINALIZE"])
    on, topic, member = _service_publisher(parsed, "gcs-notifications")
    assert on == "true" and f"${{google_pubsub_topic.topic[{topic}].id}}" == notification["topic"]
    assert "data.google_storage_project_service_account.gcs.email_address" in member
    assert tfvars["topology_functions"]["on-storage-event"]["trigger"] == "storage-events"


def test_scheduler_ticks_the_sweep(parsed: dict[str, dict[str, Any]], tfvars: dict[str, Any]) -> None:
    job = _resource(parsed, "google_cloud_scheduler_job", "reconcile")
    assert _block(job, "pubsub_target")["topic_name"] == "${google_pubsub_topic.topic[local.event_sources.sweep].id}"
    assert job["schedule"] == "${var.sweep_schedule}"
    assert tfvars["topology_functions"]["sweep"]["trigger"] == "sweep"
    env = _block(_resource(parsed, "google_cloudfunctions2_function", "fn"), "service_config")["environment_variables"]
    assert env["RLCLEANUP_SWEEP_ROOTS"] == "${jsonencode(var.sweep_roots)}"
    topology = {f.name for f in load_topology().functions} | {t.name for t in load_topology().topics}
    assert set(_locals(parsed)["event_sources"].values()) <= topology
    secret = _resource(parsed, "google_secret_manager_secret_iam_member", "sweep_iris_token")
    assert (
        secret["role"] == "roles/secretmanager.secretAccessor"
        and "runtime[local.event_sources.sweep_function]" in secret["member"]
    )


def test_k8s_sink_and_job_event_publishers(parsed: dict[str, dict[str, Any]]) -> None:
    sink = _resource(parsed, "google_logging_project_sink", "k8s_job_ends")
    assert (
        sink["destination"]
        == "pubsub.googleapis.com/${google_pubsub_topic.topic[local.event_sources.k8s_job_events].id}"
    )
    assert sink["unique_writer_identity"] is True
    on, topic, member = _service_publisher(parsed, "k8s-log-sink")
    assert (on, topic) == ("var.k8s_log_sink", "local.event_sources.k8s_job_events")
    assert member == "one(google_logging_project_sink.k8s_job_ends[*].writer_identity)"
    publishers = _resource(parsed, "google_pubsub_topic_iam_member", "job_event_publishers")
    assert publishers["topic"] == "${google_pubsub_topic.topic[local.event_sources.job_events].id}"
    assert publishers["for_each"] == "${toset(var.job_event_publishers)}"


def test_sink_filter_matches_what_the_adapter_reads(parsed: dict[str, dict[str, Any]]) -> None:
    from rlcleanup.sources import k8s

    variables = {
        name: body for doc in parsed.values() for block in doc.get("variable", []) for name, body in block.items()
    }
    default = variables["k8s_log_sink_filter"]["default"]
    for reason in sorted(k8s.COMPLETE_REASONS | k8s.FAILED_REASONS):
        assert f'\\"{reason}\\"' in default or f'"{reason}"' in default, reason
    for method in k8s.STATUS_METHODS:
        assert method in default


@needs_terraform
def test_s3_endpoint_secrets_and_hub_token_are_least_privilege(tmp_path: Path, tfvars: dict[str, Any]) -> None:
    """Issue 15: one Secret Manager secret per S3 endpoint, readable by exactly the functions that read runs; the HF
    token by exactly the grant-applying functions (plus the upload job, in hub.tf); hf:// prefixes get no bucket IAM."""
    readers, appliers, storage, access = _console(
        tmp_path,
        ["local.s3_secret_readers", "local.grant_appliers", "local.storage_bindings", "local.access"],
        s3_endpoints={"coreweave": {"buckets": ["marin-us-east-02a"]}, "r2": {"buckets": ["marin-na"]}},
        allowed_destination_prefixes=["gs://handoff-x/releases/", "hf://marin-community/"],
    )
    run_readers = {fn for fn, a in access.items() if a["read_runs"]}
    assert {(b["function"], b["endpoint"]) for b in readers.values()} == {
        (fn, ep) for fn in run_readers for ep in ("coreweave", "r2")
    }
    assert set(appliers) == set(GRANT_APPLIERS)
    assert {b["bucket"] for b in storage.values() if b["role"] == "roles/storage.objectCreator"} == {"handoff-x"}
    hub = (MODULE / "hub.tf").read_text()
    functions = (MODULE / "functions.tf").read_text()
    assert "contains(local.s3_readers, each.key) ? var.s3_endpoints : {}" in functions
    assert "contains(local.grant_appliers, each.key)" in functions and "secret_key_ref" in hub
    assert "google_cloud_run_v2_job" in hub and "roles/run.jobsExecutorWithOverrides" in hub


# --- Firestore: the console queries' composite indexes -------------------------------------------------------------


def test_every_documented_console_query_has_its_composite_index(parsed: dict[str, dict[str, Any]]) -> None:
    """The queries docs/firestore-console.md lists (firestore_queries.CONSOLE_QUERIES) filter one field and order
    by ended_at: each needs a composite index, declared here exactly once, and no index serves nothing."""
    from rlcleanup.adapters.firestore_queries import CONSOLE_QUERIES

    declared = set()
    for rtype, name, body in _resources(parsed):
        if rtype != "google_firestore_index":
            continue
        if body["collection"] == "steps":  # the fan-ins' claim query (firestore_claims._done_query), not a console one
            assert name == "steps_done_by_key", name
            assert [(f["field_path"], f["order"]) for f in body["fields"]] == [
                ("state", "ASCENDING"),
                ("key", "ASCENDING"),
            ]
            continue
        assert (body["collection"], body["query_scope"]) == ("runs", "COLLECTION"), name
        assert body["database"] == "${google_firestore_database.records.name}", name
        fields = tuple((f["field_path"], f.get("order") or f.get("array_config")) for f in body["fields"])
        assert fields not in declared, f"{name} declares an index twice"
        declared.add(fields)
    needed = {q.index_fields() for q in CONSOLE_QUERIES}
    assert declared == needed
    docs = (ROOT / "docs" / "firestore-console.md").read_text(encoding="utf-8")
    for q in CONSOLE_QUERIES:
        assert q.console_text() in docs, f"docs/firestore-console.md does not list {q.console_text()}"


# --- notifications (issue 38 item 7) ------------------------------------------------------------------------------


def test_notify_webhook_url_is_a_secret_only_the_notify_function_reads(parsed: dict[str, dict[str, Any]]) -> None:
    """The webhook URL holds a token: a Secret Manager secret without a value in Terraform, secretAccessor on that one
    secret for the notify function's own service account only, and the function is handed the secret's version
    resource (never the URL) as a plain variable, on the notify function alone."""
    assert _locals(parsed)["event_sources"]["notify"] in {f.name for f in load_topology().functions}
    secret = _resource(parsed, "google_secret_manager_secret", "notify_webhook")
    assert secret["count"] == "${var.notifications.webhook ? 1 : 0}"
    assert not [n for t, n, _ in _resources(parsed) if t == "google_secret_manager_secret_version"], "no value in state"
    reader = _resource(parsed, "google_secret_manager_secret_iam_member", "notify_webhook_reader")
    assert reader["role"] == "roles/secretmanager.secretAccessor"
    assert reader["secret_id"] == "${google_secret_manager_secret.notify_webhook[0].id}"
    assert reader["member"] == "${google_service_account.runtime[local.event_sources.notify].member}"
    readers = [b for t, _, b in _resources(parsed) if t.startswith("google_secret_manager_secret_iam")]
    assert sum("notify_webhook" in json.dumps(b) for b in readers) == 1
    assert not [t for t, _, _ in _resources(parsed) if t.startswith("google_project_iam") and "secretmanager" in t]
    env = _block(_resource(parsed, "google_cloudfunctions2_function", "fn"), "service_config")["environment_variables"]
    assert env["RLCLEANUP_NOTIFY_WEBHOOK_URL"] == ""
    assert env["RLCLEANUP_NOTIFY_WEBHOOK_SECRET"] == (
        "${var.notifications.webhook && each.key == local.event_sources.notify ? "
        '"${google_secret_manager_secret.notify_webhook[0].id}/versions/latest" : ""}'
    )


def test_the_hub_audit_is_on_and_only_its_function_reads_its_read_only_token(parsed: dict[str, dict[str, Any]]) -> None:
    """The Hub audit (issue 35 item 3) is on by default in a deployment; its optional token is a separate, read-only
    secret mounted as RLCLEANUP_HUB_AUDIT_TOKEN on the one function whose handler runs the audit (select-candidate's
    wrap-up), with secretAccessor for that function's account alone; the write token (HF_TOKEN) never reaches it."""
    from rlcleanup.runtime.stage_table import stage_table

    function = _locals(parsed)["event_sources"]["hub_audit"]
    assert stage_table().row(function.replace("-", "_")).handler.__module__ == "rlcleanup.runtime.stages.select"
    variables = {
        name: body for doc in parsed.values() for block in doc.get("variable", []) for name, body in block.items()
    }
    assert variables["hub_audit"]["default"] is True
    assert variables["hub_audit_token_secret"]["default"] == ""
    reader = _resource(parsed, "google_secret_manager_secret_iam_member", "hub_audit_token_reader")
    assert reader["count"] == '${var.hub_audit && var.hub_audit_token_secret != "" ? 1 : 0}'
    assert reader["secret_id"] == "${var.hub_audit_token_secret}"
    assert reader["member"] == "${google_service_account.runtime[local.event_sources.hub_audit].member}"
    assert reader["role"] == "roles/secretmanager.secretAccessor"
    functions = (MODULE / "functions.tf").read_text()
    mount = functions[functions.index('key        = "RLCLEANUP_HUB_AUDIT_TOKEN"') - 400 :]
    assert "each.key == local.event_sources.hub_audit ? [var.hub_audit_token_secret] : []" in mount.split("content")[0]
    assert "HF_TOKEN" not in mount.split("}")[0]


# --- the large-copy job (copy_job.tf, docs/runtime.md "Inline or job") -----------------------------------------------


def test_the_large_copy_job_has_its_limits_and_runs_the_copy_entry_point(parsed: dict[str, dict[str, Any]]) -> None:
    job = _resource(parsed, "google_cloud_run_v2_job", "large_copy")
    assert job["count"] == "${local.large_copy ? 1 : 0}"  # off until an image is given: every part inline
    execution = _block(job, "template")
    assert execution["parallelism"] == "${var.copy_job_limits.parallelism}"
    task = _block(execution, "template")
    assert task["service_account"] == "${google_service_account.large_copy[0].email}"  # its own identity
    assert task["timeout"] == "${var.copy_job_limits.timeout_seconds}s"
    assert task["max_retries"] == "${var.copy_job_limits.max_retries}"
    container = _block(task, "containers")
    assert container["command"] == ["python", "-m", "rlcleanup.runtime.copy_job"]
    # The job's last attempt files what it could not copy: its idea of the last attempt is Cloud Run's.
    assert container["args"] == ["--max-retries", "${tostring(var.copy_job_limits.max_retries)}"]
    limits = {"cpu": "${var.copy_job_limits.cpu}", "memory": "${var.copy_job_limits.memory}"}
    assert _block(container, "resources")["limits"] == limits
    assert set(_locals(parsed)["large_copy_env"]) <= env_names() | {"GOOGLE_CLOUD_PROJECT"}
    defaults = _declared(parsed["variables.tf"], "variable")["copy_job_limits"]["default"]
    assert defaults["timeout_seconds"] <= 604800  # Cloud Run's task timeout limit
    assert 0 <= defaults["max_retries"] <= 10
    assert 1 <= defaults["parallelism"] <= defaults["max_tasks"] <= 10000
    # capture-part is told which job, and the threshold and task bound it splits parts by.
    env = _resource(parsed, "google_cloudfunctions2_function", "fn")["service_config"][0]["environment_variables"]
    assert env["RLCLEANUP_LARGE_COPY_JOB"] == '${local.large_copy ? google_cloud_run_v2_job.large_copy[0].id : ""}'
    assert env["RLCLEANUP_COPY_JOB_THRESHOLD_BYTES"] == "${tostring(var.copy_job_threshold_bytes)}"
    assert env["RLCLEANUP_COPY_JOB_MAX_TASKS"] == "${tostring(var.copy_job_limits.max_tasks)}"


def test_the_large_copy_job_is_least_privilege_and_only_capture_part_starts_it(
    parsed: dict[str, dict[str, Any]],
) -> None:
    job_sa = "${google_service_account.large_copy[0].member}"
    grants = {(t, n): b for t, n, b in _resources(parsed) if b.get("member") == job_sa}
    assert {(t, n, b.get("role")) for (t, n), b in grants.items()} == {
        ("google_storage_bucket_iam_member", "large_copy_storage", "${each.value.role}"),
        ("google_project_iam_member", "large_copy_firestore", "roles/datastore.user"),
        ("google_secret_manager_secret_iam_member", "s3_endpoint_large_copy", "roles/secretmanager.secretAccessor"),
    }
    # Runs: read only. Evidence: create and read back, never overwrite or delete (no objectUser / objectAdmin).
    storage = grants["google_storage_bucket_iam_member", "large_copy_storage"]["for_each"]
    assert '"runs/${bucket}" => {bucket = bucket, role = "roles/storage.objectViewer"}' in storage
    assert '["roles/storage.objectViewer", "roles/storage.objectCreator"]' in storage
    assert "google_storage_bucket.evidence.name" in storage and "objectUser" not in storage and "Admin" not in storage
    firestore = _block(grants["google_project_iam_member", "large_copy_firestore"], "condition")
    assert firestore["expression"] == 'resource.name == "${google_firestore_database.records.id}"'
    # and publisher on the one topic that returns a finished part to capture-part
    on, topic, member = _service_publisher(parsed, "large-copy")
    assert (on, topic, member) == (
        "local.large_copy",
        "local.job_hand_offs.large_copy_topic",
        "one(google_service_account.large_copy[*].member)",
    )

    # Who may start it: capture-part alone, with overrides (run id, ticket, task count), never an admin role.
    starter = _resource(parsed, "google_cloud_run_v2_job_iam_member", "large_copy_starter")
    assert starter["role"] == "roles/run.jobsExecutorWithOverrides"
    assert starter["for_each"] == "${local.large_copy_starters}"
    hand_offs = _locals(parsed)["job_hand_offs"]
    capture = next(f for f in load_topology().functions if f.name == hand_offs["large_copy_starter"])
    assert capture.entry_point == "capture_part"
    assert hand_offs["large_copy_topic"] == capture.trigger  # the job's finished part returns to capture-part
    job_starters = [b for t, n, b in _resources(parsed) if t.startswith("google_cloud_run_v2_job_iam")]
    assert all(b["role"] == "roles/run.jobsExecutorWithOverrides" for b in job_starters)


@needs_terraform
def test_model_events_are_published_by_the_grant_functions_only_and_dead_letter(tmp_path: Path) -> None:
    """Issue 49: the model-events topic (docs/events-out.md) gets publisher IAM for the functions that carry out
    grants and nobody else, and its sink subscription parks what a consumer keeps failing on its own
    dead-letter topic, which has a pull subscription (never lost) and the service agent's two bindings."""
    topic = load_topology().route("apply-grant", "announce")
    [sink] = [s for s in load_topology().sinks if s.topic == topic]
    publishers, dead_letters = _console(tmp_path, ["local.function_publishers", "local.sink_dead_letters"])
    assert {b["function"] for b in publishers.values() if b["topic"] == topic} == GRANT_APPLIERS
    assert dead_letters == {
        sink.subscription: {"topic": f"{sink.subscription}-dlq", "subscription": f"{sink.subscription}-dlq-sub"}
    }
    parsed = {p.name: _load(p) for p in sorted(MODULE.glob("*.tf"))}
    policy = _resource(parsed, "google_pubsub_subscription", "sink")["dynamic"][0]["dead_letter_policy"]
    assert "google_pubsub_topic.sink_dead_letter" in policy["content"][0]["dead_letter_topic"]
    # Every dead-letter pull subscription (a function's, a sink's) keeps what was acked and never expires.
    child = {p.name: _load(p) for p in sorted((MODULE / "dead_letter_pulls").glob("*.tf"))}
    pull = _resource(child, "google_pubsub_subscription", "this")
    assert pull["retain_acked_messages"] is True and _block(pull, "expiration_policy") == {"ttl": ""}
    moved = [m for doc in parsed.values() for m in doc.get("moved", [])]
    for old, key in (("dead_letter", "functions"), ("sink_dead_letter", "sinks")):
        target = f'${{module.dead_letter_pulls["{key}"].google_pubsub_subscription.this}}'
        assert {"from": f"${{google_pubsub_subscription.{old}}}", "to": target} in moved
    for kind in ("google_pubsub_topic_iam_member", "google_pubsub_subscription_iam_member"):
        name = "sink_dead_letter_publisher" if kind.startswith("google_pubsub_topic") else "sink_dead_letter_subscriber"
        assert _resource(parsed, kind, name)["member"] == "${local.pubsub_service_agent}"
    # The Hub upload job finishes a large hand-off, so it announces it too; operators who restore may announce.
    assert _locals(parsed)["job_hand_offs"]["model_events_topic"] == topic
    on_topic = "${google_pubsub_topic.topic[local.job_hand_offs.model_events_topic].id}"
    on, topic, member = _service_publisher(parsed, "hub-upload")
    assert on == "var.enable_hub_destination" and f"${{google_pubsub_topic.topic[{topic}].id}}" == on_topic
    assert member == "one(google_service_account.hub_upload[*].member)"
    operators = _resource(parsed, "google_pubsub_topic_iam_member", "restore_operators")
    assert operators["topic"] == on_topic and operators["for_each"] == "${toset(var.restore_operators)}"


# --- export grants (issue 49, docs/authority.md §9) ---------------------------------------------------------------

EXPORT_GRANTS = {
    "converter": ["python", "-m", "skyrl_train.entrypoints.checkpoint_export"],
    "controller": "ray",
    "allowed_prefixes": ["gs://models-x/base/", "/mnt/models/"],
    "throughput_bytes_per_second": 120000000,
    "margin_seconds": 900,
}


@needs_terraform
def test_export_grant_settings_reach_the_grant_functions_only(
    tmp_path: Path, parsed: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`export_grants` is what ExportSettings reads, evaluated by terraform itself: on apply-grant and
    retry-waiting-grants the converter, controller and allowed prefixes parse back to exactly what was configured;
    on any other function they are empty, so it refuses every export grant (it never applies one)."""
    from rlcleanup.settings import ExportSettings

    env = _block(_resource(parsed, "google_cloudfunctions2_function", "fn"), "service_config")["environment_variables"]
    names = sorted(n for n in env if n.startswith("RLCLEANUP_EXPORT_"))
    assert set(names) == {n for n in env_names() if n.startswith("RLCLEANUP_EXPORT_")}
    other = next(fn for fn in json.loads(TFVARS.read_text())["topology_functions"] if fn not in GRANT_APPLIERS)
    functions = [*sorted(GRANT_APPLIERS), other]
    expressions = [
        env[name].removeprefix("${").removesuffix("}").replace("each.key", json.dumps(fn))
        for fn in functions
        for name in names
    ]
    values = iter(_console(tmp_path, expressions, export_grants=EXPORT_GRANTS))
    for fn in functions:
        for name in names:
            monkeypatch.setenv(name, next(values))
        settings = ExportSettings()
        assert settings.throughput_bytes_per_second == EXPORT_GRANTS["throughput_bytes_per_second"], fn
        assert settings.margin_seconds == EXPORT_GRANTS["margin_seconds"], fn
        if fn in GRANT_APPLIERS:
            assert settings.converter == tuple(EXPORT_GRANTS["converter"]), fn
            assert settings.controller == "ray", fn
            assert settings.allowed_prefixes == tuple(EXPORT_GRANTS["allowed_prefixes"]), fn
        else:
            assert (settings.converter, settings.controller, settings.allowed_prefixes) == (None, None, None), fn
    # The default deployment configures no export: every function refuses export grants.
    defaults = _console(
        tmp_path, [env[n].removeprefix("${").removesuffix("}").replace("each.key", '"apply-grant"') for n in names]
    )
    for name, value in zip(names, defaults, strict=True):
        monkeypatch.setenv(name, value)
    assert (ExportSettings().converter, ExportSettings().controller) == (None, None)


@needs_terraform
def test_export_grant_settings_are_validated(tmp_path: Path) -> None:
    """An argv with an empty element, a controller without an export submitter, a relative model-source prefix and
    a zero throughput are each refused at plan time, by name; a controller without a converter too; the example
    setting passes every rule."""
    bad = {
        "converter": ["python", ""],
        "controller": "iris",
        "allowed_prefixes": ["models/"],
        "throughput_bytes_per_second": 0,
    }
    errors = _validation_errors(tmp_path, export_grants=bad)
    for message in ("non-empty strings", "must be ray", "or absolute paths", "must be above 0"):
        assert message in errors, (message, errors)
    assert "set together" not in errors
    assert "set together" in _validation_errors(tmp_path, export_grants={"controller": "ray"})
    assert "export_grants" not in _validation_errors(tmp_path, export_grants=EXPORT_GRANTS)
