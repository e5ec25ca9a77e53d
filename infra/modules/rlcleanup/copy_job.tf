# The large-copy job (docs/runtime.md "Inline or job"): a capture part whose planned copy exceeds
# copy_job_threshold_bytes does not fit capture-part's timeout, so capture-part files it as a ticket on the run and
# starts this job with the ticket's claim key as an override; the job's tasks (CLOUD_RUN_TASK_INDEX / _COUNT) each
# copy a slice of the part's objects server-side, the last files the part's outcome under the member's own claim
# key and publishes the part's message again on capture-parts (runtime/stages/large_copy.py). Off while
# large_copy_image is "" (every part is copied inline, as before).

locals {
  large_copy          = var.large_copy_image != ""
  large_copy_starters = local.large_copy ? toset([local.job_hand_offs.large_copy_starter]) : toset([])
  # What the job reads (rlcleanup.settings): the deployment's boundaries, as capture-part has them.
  large_copy_env = {
    GOOGLE_CLOUD_PROJECT                   = var.project_id
    RLCLEANUP_RUN_BUCKETS                  = join(",", var.run_buckets)
    RLCLEANUP_PRESERVE_ROOT                = "gs://${google_storage_bucket.evidence.name}/"
    RLCLEANUP_RECORD_STORE_TIMEOUT_SECONDS = tostring(var.record_store_timeout_seconds)
  }
  large_copy_s3_secrets = {
    for name, _ in var.s3_endpoints :
    "RLCLEANUP_S3_ENDPOINT_${upper(replace(name, "-", "_"))}" => google_secret_manager_secret.s3_endpoint[name].secret_id
  }
}

resource "google_service_account" "large_copy" {
  count = local.large_copy ? 1 : 0

  account_id   = "${var.name_prefix}-large-copy"
  display_name = "rlcleanup large-copy job"
  description  = "Copies capture parts too large for a function server-side: reads runs, writes evidence, files the outcome."

  depends_on = [google_project_service.enabled]
}

resource "google_cloud_run_v2_job" "large_copy" {
  count = local.large_copy ? 1 : 0

  name                = "${var.name_prefix}-large-copy"
  location            = var.region
  labels              = { app = "rlcleanup" }
  deletion_protection = false

  template {
    # The execution's task count is set per part by capture-part (an override, at most copy_job_limits.max_tasks);
    # this is the default and parallelism bounds how many copy at once.
    task_count  = 1
    parallelism = var.copy_job_limits.parallelism

    template {
      service_account = google_service_account.large_copy[0].email
      timeout         = "${var.copy_job_limits.timeout_seconds}s"
      max_retries     = var.copy_job_limits.max_retries # a retry resumes: copies done are seen as done (write-once)

      containers {
        image   = var.large_copy_image
        command = ["python", "-m", "rlcleanup.runtime.copy_job"]
        # The last of max_retries + 1 attempts files the slice's objects as not copied (never left handed off).
        args = ["--max-retries", tostring(var.copy_job_limits.max_retries)]

        resources {
          limits = { cpu = var.copy_job_limits.cpu, memory = var.copy_job_limits.memory }
        }

        dynamic "env" {
          for_each = local.large_copy_env
          content {
            name  = env.key
            value = env.value
          }
        }
        dynamic "env" {
          for_each = local.large_copy_s3_secrets # runs on S3-compatible storage: the endpoints' secrets
          iterator = secret
          content {
            name = secret.key
            value_source {
              secret_key_ref {
                secret  = secret.value
                version = "latest"
              }
            }
          }
        }
      }
    }
  }

  depends_on = [google_project_service.enabled, google_secret_manager_secret_iam_member.s3_endpoint_large_copy]
}

# capture-part starts the job with per-part overrides (run id, ticket key, task count), nothing more.
resource "google_cloud_run_v2_job_iam_member" "large_copy_starter" {
  for_each = local.large_copy_starters

  project  = var.project_id
  location = var.region
  name     = google_cloud_run_v2_job.large_copy[0].name
  role     = "roles/run.jobsExecutorWithOverrides"
  member   = google_service_account.runtime[each.key].member
}

# Read runs (any run bucket); write evidence write-once (create, and read back what is there: never overwrite,
# never delete); the claims and the record (Firestore, this database only); the part's message on capture-parts.
resource "google_storage_bucket_iam_member" "large_copy_storage" {
  for_each = local.large_copy ? merge(
    { for bucket in var.run_buckets : "runs/${bucket}" => { bucket = bucket, role = "roles/storage.objectViewer" } },
    { for role in ["roles/storage.objectViewer", "roles/storage.objectCreator"] : "evidence/${role}" => { bucket = google_storage_bucket.evidence.name, role = role } },
  ) : {}

  bucket = each.value.bucket
  role   = each.value.role
  member = google_service_account.large_copy[0].member
}

resource "google_project_iam_member" "large_copy_firestore" {
  count = local.large_copy ? 1 : 0

  project = var.project_id
  role    = "roles/datastore.user"
  member  = google_service_account.large_copy[0].member

  condition {
    title       = "rlcleanup-database-only"
    description = "Only the rlcleanup Firestore database."
    expression  = "resource.name == \"${google_firestore_database.records.id}\""
  }
}

# The job returns each finished part to capture-part: google_pubsub_topic_iam_member.service_publisher (iam.tf).
moved {
  from = google_pubsub_topic_iam_member.large_copy_publisher[0]
  to   = google_pubsub_topic_iam_member.service_publisher["large-copy"]
}

# Runs on S3-compatible storage: the job reads the endpoint secrets as the capture functions do.
resource "google_secret_manager_secret_iam_member" "s3_endpoint_large_copy" {
  for_each = { for name, secret in google_secret_manager_secret.s3_endpoint : name => secret.id if local.large_copy }

  secret_id = each.value
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.large_copy[0].member
}
