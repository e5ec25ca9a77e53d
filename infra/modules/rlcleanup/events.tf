# Event sources (docs/events.md): what feeds job-events when no controller pushes anything.
#   - Cloud Storage notifications of the run buckets -> storage-events -> on-storage-event
#   - Cloud Scheduler ticks -> sweep (run roots, stalled records, Iris/Ray polls)
#   - a Cloud Logging sink of GKE Job endings -> k8s-job-events -> on-k8s-log-entry
#   - job_event_publishers: anyone else's hook (SkyPilot event_callback, CI, ...) publishing to job-events

locals {
  # bucket -> object_name_prefix ("" = the whole bucket). GCS filters on a prefix only; the function matches
  # the marker names (.executor_status, terminal.json, receipts, attempt records) in code.
  run_bucket_notifications = var.notify_run_buckets ? {
    for b in var.run_buckets : b => lookup(var.run_bucket_notification_prefixes, b, "")
  } : {}

}

# --- Cloud Storage notifications ---------------------------------------------------------------------------------

# The project's GCS service agent publishes the notifications; it needs publisher on the topic (and only there).
data "google_storage_project_service_account" "gcs" {
  project = var.project_id
}

moved {
  from = google_pubsub_topic_iam_member.gcs_notifications_publisher
  to   = google_pubsub_topic_iam_member.service_publisher["gcs-notifications"]
}

resource "google_storage_notification" "run_bucket" {
  for_each = local.run_bucket_notifications

  bucket             = each.key
  topic              = google_pubsub_topic.topic[local.event_sources.storage_events].id
  payload_format     = "JSON_API_V1"
  event_types        = ["OBJECT_FINALIZE"]
  object_name_prefix = each.value == "" ? null : each.value
  custom_attributes  = { rlcleanup = "run-bucket" }

  depends_on = [google_pubsub_topic_iam_member.service_publisher]
}

# --- The reconciling sweep ------------------------------------------------------------------------------------------

resource "google_cloud_scheduler_job" "reconcile" {
  name        = "${var.name_prefix}-sweep"
  region      = var.region
  description = "rlcleanup reconciling sweep: terminal runs without a record, stalled records, controller polls."
  schedule    = var.sweep_schedule
  time_zone   = "Etc/UTC"

  pubsub_target {
    topic_name = google_pubsub_topic.topic[local.event_sources.sweep].id
    data       = base64encode("{\"kind\": \"tick\"}")
    attributes = { source = "cloud-scheduler" }
  }

  depends_on = [google_project_service.enabled]
}

# The Iris bearer token, from Secret Manager, readable by the sweep's service account only.
resource "google_secret_manager_secret_iam_member" "sweep_iris_token" {
  count = var.iris_token_secret == "" ? 0 : 1

  project   = var.project_id
  secret_id = var.iris_token_secret
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.runtime[local.event_sources.sweep_function].email}"
}

# --- GKE / Kubernetes Job endings via Cloud Logging --------------------------------------------------------------

resource "google_logging_project_sink" "k8s_job_ends" {
  count = var.k8s_log_sink ? 1 : 0

  name                   = "${var.name_prefix}-k8s-job-ends"
  destination            = "pubsub.googleapis.com/${google_pubsub_topic.topic[local.event_sources.k8s_job_events].id}"
  filter                 = var.k8s_log_sink_filter
  unique_writer_identity = true
}

# The sink's writer publishes on k8s-job-events: google_pubsub_topic_iam_member.service_publisher (iam.tf).
moved {
  from = google_pubsub_topic_iam_member.k8s_sink_publisher[0]
  to   = google_pubsub_topic_iam_member.service_publisher["k8s-log-sink"]
}

# --- Anyone else's hook ---------------------------------------------------------------------------------------------

# Publisher on job-events only (not on any stage topic, never on authority-grants).
resource "google_pubsub_topic_iam_member" "job_event_publishers" {
  for_each = toset(var.job_event_publishers)

  topic  = google_pubsub_topic.topic[local.event_sources.job_events].id
  role   = "roles/pubsub.publisher"
  member = each.key
}
