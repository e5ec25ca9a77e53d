# The Hugging Face Hub as a publish / hand-off destination (docs/hub.md). A large export exceeds one function
# invocation, so apply-grant starts the Cloud Run job below for it (resumable: files already on the Hub with the
# same sha256 are skipped). The HF token is a Secret Manager secret (value added out of band, never in state),
# readable only by the job's own service account and by the two grant-applying functions (small exports inline).

locals {
  # Who may read the HF token: the grant-applying functions (small exports are uploaded inline) and the job.
  hub_token_readers = var.enable_hub_destination ? merge(
    { for fn in local.grant_appliers : fn => google_service_account.runtime[fn].member },
    { hub-upload-job = google_service_account.hub_upload[0].member },
  ) : {}
}

resource "google_secret_manager_secret" "hf_token" {
  count = var.enable_hub_destination ? 1 : 0

  secret_id = "${var.name_prefix}-hf-token"
  labels    = { app = "rlcleanup", purpose = "hub-destination" }

  replication {
    auto {}
  }

  depends_on = [google_project_service.enabled]
}

resource "google_service_account" "hub_upload" {
  count = var.enable_hub_destination ? 1 : 0

  account_id   = "${var.name_prefix}-hub-upload"
  display_name = "rlcleanup Hub upload job"
  description  = "Runs the resumable Hugging Face Hub upload job for large hand-offs; reads runs and evidence."

  depends_on = [google_project_service.enabled]
}

resource "google_secret_manager_secret_iam_member" "hf_token_reader" {
  for_each = local.hub_token_readers

  secret_id = google_secret_manager_secret.hf_token[0].id
  role      = "roles/secretmanager.secretAccessor"
  member    = each.value
}

resource "google_cloud_run_v2_job" "hub_upload" {
  count = var.enable_hub_destination ? 1 : 0

  name                = "${var.name_prefix}-hub-upload"
  location            = var.region
  labels              = { app = "rlcleanup" }
  deletion_protection = false

  template {
    task_count  = 1
    parallelism = 1

    template {
      service_account = google_service_account.hub_upload[0].email
      timeout         = "${var.hub_upload_timeout_seconds}s"
      max_retries     = 3 # each retry resumes: verified files are skipped (keep equal to --max-retries below)

      containers {
        image   = var.hub_upload_image
        command = ["python", "-m", "rlcleanup.runtime.hub_job"]
        # The last of max_retries + 1 attempts files a failure as apply_failed (never left `applying`).
        args = ["--max-retries", "3"]

        resources {
          limits = { cpu = "2", memory = "4Gi" }
        }

        env {
          name  = "GOOGLE_CLOUD_PROJECT"
          value = var.project_id
        }
        env {
          name  = "HF_ENDPOINT"
          value = var.hf_endpoint
        }
        # The job re-verifies the grant under the deployment's own boundaries, as apply-grant does.
        env {
          name  = "RLCLEANUP_ALLOWED_DESTINATION_PREFIXES"
          value = join(",", var.allowed_destination_prefixes)
        }
        env {
          name  = "RLCLEANUP_RUN_BUCKETS"
          value = join(",", var.run_buckets)
        }
        env {
          name  = "RLCLEANUP_PRESERVE_ROOT"
          value = "gs://${google_storage_bucket.evidence.name}/"
        }
        env {
          name  = "RLCLEANUP_RECORD_STORE_TIMEOUT_SECONDS"
          value = tostring(var.record_store_timeout_seconds)
        }
        env {
          name = "HF_TOKEN"
          value_source {
            secret_key_ref {
              secret  = google_secret_manager_secret.hf_token[0].secret_id
              version = "latest"
            }
          }
        }
        dynamic "env" {
          for_each = var.s3_endpoints
          content {
            name = "RLCLEANUP_S3_ENDPOINT_${upper(replace(env.key, "-", "_"))}"
            value_source {
              secret_key_ref {
                secret  = google_secret_manager_secret.s3_endpoint[env.key].secret_id
                version = "latest"
              }
            }
          }
        }
      }
    }
  }

  depends_on = [google_project_service.enabled, google_secret_manager_secret_iam_member.hf_token_reader]
}

# apply-grant / retry-waiting-grants start the job with per-grant overrides (run id, grant id), nothing more.
resource "google_cloud_run_v2_job_iam_member" "hub_upload_starter" {
  for_each = var.enable_hub_destination ? toset(local.grant_appliers) : toset([])

  project  = var.project_id
  location = var.region
  name     = google_cloud_run_v2_job.hub_upload[0].name
  role     = "roles/run.jobsExecutorWithOverrides"
  member   = google_service_account.runtime[each.key].member
}

# The job reads the run (any run bucket) and records progress on the run (Firestore). It stages what it uploads
# in the run's private staging area in the evidence bucket (written, scanned, removed: docs/authority.md P4).
resource "google_storage_bucket_iam_member" "hub_upload_reads" {
  for_each = var.enable_hub_destination ? toset(var.run_buckets) : toset([])

  bucket = each.key
  role   = "roles/storage.objectViewer"
  member = google_service_account.hub_upload[0].member
}

resource "google_storage_bucket_iam_member" "hub_upload_stages" {
  count = var.enable_hub_destination ? 1 : 0

  bucket = google_storage_bucket.evidence.name
  role   = "roles/storage.objectUser"
  member = google_service_account.hub_upload[0].member
}

resource "google_project_iam_member" "hub_upload_firestore" {
  count = var.enable_hub_destination ? 1 : 0

  project = var.project_id
  role    = "roles/datastore.user"
  member  = google_service_account.hub_upload[0].member
}

# The Hub audit (authority/hub_audit.py) runs in select-candidate's wrap-up and only reads: its token, if the
# deployment gives one, is a separate read-only secret that select-candidate alone may access (never hf_token).
resource "google_secret_manager_secret_iam_member" "hub_audit_token_reader" {
  count = var.hub_audit && var.hub_audit_token_secret != "" ? 1 : 0

  project   = var.project_id
  secret_id = var.hub_audit_token_secret
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.runtime[local.event_sources.hub_audit].member
}

# `rlcleanup restore` is an operator's command: whoever runs it against the deployment announces the restore.
resource "google_pubsub_topic_iam_member" "restore_operators" {
  for_each = toset(var.restore_operators)

  topic  = google_pubsub_topic.topic[local.job_hand_offs.model_events_topic].id
  role   = "roles/pubsub.publisher"
  member = each.key
}

# The job's publisher binding on the model events topic: google_pubsub_topic_iam_member.service_publisher (iam.tf).
moved {
  from = google_pubsub_topic_iam_member.hub_upload_announces[0]
  to   = google_pubsub_topic_iam_member.service_publisher["hub-upload"]
}
