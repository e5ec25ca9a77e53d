# The thin root: provider and backend (versions.tf) and one instance of the reusable module. Another team's
# Terraform instantiates modules/rlcleanup the same way, with its own provider and state (see infra/README.md).

module "rlcleanup" {
  source = "./modules/rlcleanup"

  project_id                       = var.project_id
  region                           = var.region
  firestore_location               = var.firestore_location
  name_prefix                      = var.name_prefix
  run_buckets                      = var.run_buckets
  preserve_bucket                  = var.preserve_bucket
  evidence_retention_days          = var.evidence_retention_days
  lock_evidence_retention          = var.lock_evidence_retention
  soft_delete_retention_days       = var.soft_delete_retention_days
  approver_principals              = var.approver_principals
  allowed_destination_prefixes     = var.allowed_destination_prefixes
  alert_notification_channel       = var.alert_notification_channel
  bundle_path                      = var.bundle_path
  max_event_age_seconds            = var.max_event_age_seconds
  limit_warn_fraction              = var.limit_warn_fraction
  record_store_timeout_seconds     = var.record_store_timeout_seconds
  log_level                        = var.log_level
  iris_status_cmd                  = var.iris_status_cmd
  ray_dashboard                    = var.ray_dashboard
  notify_run_buckets               = var.notify_run_buckets
  run_bucket_notification_prefixes = var.run_bucket_notification_prefixes
  sweep_schedule                   = var.sweep_schedule
  sweep_roots                      = var.sweep_roots
  iris_controller_url              = var.iris_controller_url
  iris_cluster                     = var.iris_cluster
  iris_token_secret                = var.iris_token_secret
  iris_run_uri_template            = var.iris_run_uri_template
  sweep_tuning                     = var.sweep_tuning
  k8s_log_sink                     = var.k8s_log_sink
  k8s_log_sink_filter              = var.k8s_log_sink_filter
  k8s_run_uri_template             = var.k8s_run_uri_template
  job_event_publishers             = var.job_event_publishers
  topology_topics                  = var.topology_topics
  topology_functions               = var.topology_functions
  topology_sinks                   = var.topology_sinks
  s3_endpoints                     = var.s3_endpoints
  enable_hub_destination           = var.enable_hub_destination
  hf_endpoint                      = var.hf_endpoint
  hub_upload_image                 = var.hub_upload_image
  hub_upload_timeout_seconds       = var.hub_upload_timeout_seconds
  hub_job_threshold_bytes          = var.hub_job_threshold_bytes
  hub_audit                        = var.hub_audit
  hub_audit_token_secret           = var.hub_audit_token_secret
  precancel_sync_wait_seconds      = var.precancel_sync_wait_seconds
  capture_page_objects             = var.capture_page_objects
  max_run_objects                  = var.max_run_objects
  quarantine_prefix                = var.quarantine_prefix
  quarantine_days                  = var.quarantine_days
  notifications                    = var.notifications
}
