# Identities and least-privilege grants. Every binding is additive (`_member`) and scoped to one resource,
# except the authority-grants publisher binding, which is authoritative for that role on that topic.

data "google_project" "this" {
  project_id = var.project_id
}

locals {
  pubsub_service_agent = "serviceAccount:service-${data.google_project.this.number}@gcp-sa-pubsub.iam.gserviceaccount.com"
}

# --- Runtime identities: one service account per function (never the default compute service account) -------------

resource "google_service_account" "runtime" {
  for_each = var.topology_functions

  account_id   = local.runtime_sa_ids[each.key]
  display_name = "rlcleanup ${each.key} (runtime)"
  description  = "Runtime identity of the ${each.key} function."

  depends_on = [google_project_service.enabled]
}

# --- Push identities: one OIDC service account per push subscription, invoker on that function only -------------

resource "google_service_account" "invoker" {
  for_each = var.topology_functions

  account_id   = local.invoker_sa_ids[each.key]
  display_name = "rlcleanup ${each.value.push_subscription} (push invoker)"
  description  = "OIDC identity of push subscription ${each.value.push_subscription}; may invoke ${each.key} only."

  depends_on = [google_project_service.enabled]
}

resource "google_cloud_run_service_iam_member" "push_invoker" {
  for_each = var.topology_functions

  project  = var.project_id
  location = var.region
  service  = google_cloudfunctions2_function.fn[each.key].name
  role     = "roles/run.invoker"
  member   = google_service_account.invoker[each.key].member
}

# --- Build identity: builds the bundle into images instead of the default compute service account ---------------

resource "google_service_account" "builder" {
  account_id   = "${var.name_prefix}-fn-builder"
  display_name = "rlcleanup function builder"
  description  = "Cloud Build identity for building the rlcleanup functions from the source bundle."

  depends_on = [google_project_service.enabled]
}

resource "google_project_iam_member" "builder" {
  for_each = toset(["roles/logging.logWriter", "roles/artifactregistry.writer"])

  project = var.project_id
  role    = each.key
  member  = google_service_account.builder.member
}

resource "google_storage_bucket_iam_member" "builder_source_reader" {
  bucket = google_storage_bucket.source.name
  role   = "roles/storage.objectViewer"
  member = google_service_account.builder.member
}

# --- Firestore: records (project-level; Firestore IAM has no per-collection scope) -------------------------------

resource "google_project_iam_member" "firestore_user" {
  for_each = var.topology_functions

  project = var.project_id
  role    = "roles/datastore.user"
  member  = google_service_account.runtime[each.key].member

  condition {
    title       = "rlcleanup-database-only"
    description = "Only the rlcleanup Firestore database."
    expression  = "resource.name == \"${google_firestore_database.records.id}\""
  }
}

# --- Pub/Sub: each function publishes only to the topics the topology says it publishes to -----------------------

resource "google_pubsub_topic_iam_member" "function_publisher" {
  for_each = local.function_publishers

  topic  = google_pubsub_topic.topic[each.value.topic].id
  role   = "roles/pubsub.publisher"
  member = google_service_account.runtime[each.value.function].member
}

# Each service identity that is not a function and publishes on one topic of ours, while its feature is on: the
# project's GCS service agent (storage notifications), the k8s log sink's writer, the Hub upload job (it announces a
# large hand-off on the model events topic, as apply-grant does an inline one) and the large-copy job (a finished
# part goes back to capture-part). Publisher on that one topic only. Name => the topic (a key of
# google_pubsub_topic.topic) and the member.
locals {
  service_publishers = { for name, p in {
    gcs-notifications = {
      on     = true
      topic  = local.event_sources.storage_events
      member = "serviceAccount:${data.google_storage_project_service_account.gcs.email_address}"
    }
    k8s-log-sink = {
      on     = var.k8s_log_sink
      topic  = local.event_sources.k8s_job_events
      member = one(google_logging_project_sink.k8s_job_ends[*].writer_identity)
    }
    hub-upload = {
      on     = var.enable_hub_destination
      topic  = local.job_hand_offs.model_events_topic
      member = one(google_service_account.hub_upload[*].member)
    }
    large-copy = {
      on     = local.large_copy
      topic  = local.job_hand_offs.large_copy_topic
      member = one(google_service_account.large_copy[*].member)
    }
  } : name => { topic = p.topic, member = p.member } if p.on }
}

resource "google_pubsub_topic_iam_member" "service_publisher" {
  for_each = local.service_publishers

  topic  = google_pubsub_topic.topic[each.value.topic].id
  role   = "roles/pubsub.publisher"
  member = each.value.member
}

# A permanent error (bad input) is recorded on the run, acked, and a copy parked on the function's own dead-letter
# topic by the function itself, so each runtime identity publishes there too (only there: not another's).
resource "google_pubsub_topic_iam_member" "function_dead_letter_publisher" {
  for_each = local.function_dead_letter_publishers

  topic  = google_pubsub_topic.dead_letter[each.value.topic].id
  role   = "roles/pubsub.publisher"
  member = google_service_account.runtime[each.key].member
}

# Only the approvers may publish signed grants. Authoritative for this role on this topic: any other publisher
# binding on authority-grants is removed on apply.
resource "google_pubsub_topic_iam_binding" "grants_publishers" {
  topic   = google_pubsub_topic.topic[local.grants_topic].id
  role    = "roles/pubsub.publisher"
  members = var.approver_principals
}

# Dead-lettering: the Pub/Sub service agent publishes to each dead-letter topic and acknowledges on the source
# subscription it forwards from.
resource "google_pubsub_topic_iam_member" "dead_letter_publisher" {
  for_each = local.dead_letter_topics

  topic  = google_pubsub_topic.dead_letter[each.key].id
  role   = "roles/pubsub.publisher"
  member = local.pubsub_service_agent
}

# The same for each sink that dead-letters (model-events-sub): publish on its dead-letter topic, acknowledge on it.
resource "google_pubsub_topic_iam_member" "sink_dead_letter_publisher" {
  for_each = local.sink_dead_letters

  topic  = google_pubsub_topic.sink_dead_letter[each.value.topic].id
  role   = "roles/pubsub.publisher"
  member = local.pubsub_service_agent
}

resource "google_pubsub_subscription_iam_member" "sink_dead_letter_subscriber" {
  for_each = local.sink_dead_letters

  subscription = google_pubsub_subscription.sink[each.key].id
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_service_agent
}

resource "google_pubsub_subscription_iam_member" "dead_letter_subscriber" {
  for_each = local.triggered_functions

  subscription = module.push_subscriptions["functions"].ids[each.key]
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_service_agent
}

resource "google_pubsub_subscription_iam_member" "dead_letter_record_subscriber" {
  for_each = local.dead_letter_records

  subscription = module.push_subscriptions["dead-letter-records"].ids[each.key]
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_service_agent
}

# --- Storage: bucket-scoped, per function, per need (see local.function_access) ----------------------------------

resource "google_storage_bucket_iam_member" "function_storage" {
  for_each = local.storage_bindings

  bucket = each.value.bucket
  role   = each.value.role
  member = google_service_account.runtime[each.value.function].member
}

resource "google_storage_bucket_iam_member" "function_evidence" {
  for_each = local.evidence_bindings

  bucket = google_storage_bucket.evidence.name
  role   = each.value.role
  member = google_service_account.runtime[each.value.function].member
}

# Reading a destination's bucket metadata and IAM policy is how the grant path verifies the actual visibility
# (public access prevention, no public principals in the bucket policy) before any byte moves.
resource "google_project_iam_custom_role" "bucket_inspector" {
  role_id     = "${var.name_prefix}BucketInspector"
  title       = "rlcleanup bucket inspector"
  description = "Read a bucket's metadata and IAM policy (visibility check before hand-off)."
  permissions = ["storage.buckets.get", "storage.buckets.getIamPolicy"]
}

resource "google_storage_bucket_iam_member" "destination_inspector" {
  for_each = local.destination_inspectors

  bucket = each.value.bucket
  role   = google_project_iam_custom_role.bucket_inspector.name
  member = google_service_account.runtime[each.value.function].member
}
