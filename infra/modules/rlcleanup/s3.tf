# S3-compatible run storage (CoreWeave, R2, AWS): one Secret Manager secret per endpoint, holding the JSON
# {"endpoint_url", "buckets", "region", "addressing_style", "access_key_id", "secret_access_key"} that
# adapters/s3_storage.py reads from RLCLEANUP_S3_ENDPOINT_<NAME> (docs/s3.md). Terraform creates the secret, never
# its value (no key in state): add it with `gcloud secrets versions add <prefix>-s3-<name> --data-file=endpoint.json`.
# Least privilege: only the functions that read runs (function_access.read_runs), and the Hub upload job, may access
# each secret; each gets it as an environment variable through secret_environment_variables (functions.tf).

resource "google_secret_manager_secret" "s3_endpoint" {
  for_each = var.s3_endpoints

  secret_id = "${var.name_prefix}-s3-${each.key}"
  labels    = { app = "rlcleanup", purpose = "s3-run-storage" }

  replication {
    auto {}
  }

  depends_on = [google_project_service.enabled]
}

resource "google_secret_manager_secret_iam_member" "s3_endpoint_reader" {
  for_each = local.s3_secret_readers

  secret_id = google_secret_manager_secret.s3_endpoint[each.value.endpoint].id
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.runtime[each.value.function].member
}

resource "google_secret_manager_secret_iam_member" "s3_endpoint_hub_job" {
  for_each = var.enable_hub_destination ? var.s3_endpoints : {}

  secret_id = google_secret_manager_secret.s3_endpoint[each.key].id
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.hub_upload[0].member
}
