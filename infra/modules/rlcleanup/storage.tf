# Buckets created here: preserved evidence (write-once, retained) and the function source bundles.
# The run buckets and destination buckets already exist; this module only grants access on them (iam.tf).

resource "google_storage_bucket" "evidence" {
  name     = var.preserve_bucket
  location = var.region
  labels   = { app = "rlcleanup", role = "evidence" }

  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = false

  versioning {
    enabled = true
  }

  retention_policy {
    retention_period = var.evidence_retention_days * 86400
    is_locked        = var.lock_evidence_retention
  }

  soft_delete_policy {
    retention_duration_seconds = var.soft_delete_retention_days * 86400
  }

  lifecycle {
    prevent_destroy = true
  }

  # checkov:skip=CKV_GCP_62: Usage/storage logs are a legacy feature; access to evidence is recorded by Cloud Audit Logs (data-access logging is configured at the organization/project level, outside this module).

  depends_on = [google_project_service.enabled]
}

resource "google_storage_bucket" "source" {
  name     = "${var.project_id}-${var.name_prefix}-fn-source"
  location = var.region
  labels   = { app = "rlcleanup", role = "function-source" }

  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = false

  versioning {
    enabled = true
  }

  soft_delete_policy {
    retention_duration_seconds = var.soft_delete_retention_days * 86400
  }

  # Terraform deletes a superseded bundle object when the name (content hash) changes; versioning keeps it as a
  # noncurrent version, removed after 30 days. The live bundle is never touched by this rule.
  lifecycle_rule {
    condition {
      days_since_noncurrent_time = 30
      with_state                 = "ARCHIVED"
    }
    action {
      type = "Delete"
    }
  }

  # checkov:skip=CKV_GCP_62: Holds only build inputs (code bundles already in git); Cloud Audit Logs record access.

  depends_on = [google_project_service.enabled]
}

# Content-addressed bundle: an unchanged bundle keeps its object name, so functions do not redeploy;
# a changed one gets a new name and every function rebuilds from it.
resource "google_storage_bucket_object" "bundle" {
  name         = "bundle-${substr(filesha256(var.bundle_path), 0, 16)}.zip"
  bucket       = google_storage_bucket.source.name
  source       = var.bundle_path
  content_type = "application/zip"
}
