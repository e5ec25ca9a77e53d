output "function_uris" {
  description = "Cloud Run URI of each function, keyed by function name (internal ingress only)."
  value       = { for k, f in google_cloudfunctions2_function.fn : k => f.service_config[0].uri }
}

output "runtime_service_accounts" {
  description = "Runtime service account email of each function."
  value       = { for k, sa in google_service_account.runtime : k => sa.email }
}

output "push_subscriptions" {
  description = "Push subscription of each function."
  value       = module.push_subscriptions["functions"].ids
}

output "dead_letter_subscriptions" {
  description = "Pull subscription on each dead-letter topic (where failed messages wait for an operator)."
  value       = module.dead_letter_pulls["functions"].ids
}

output "topics" {
  description = "Project topics by name."
  value       = { for k, t in google_pubsub_topic.topic : k => t.id }
}

output "evidence_bucket" {
  description = "Preserved-evidence bucket (RLCLEANUP_PRESERVE_ROOT)."
  value       = google_storage_bucket.evidence.url
}

output "bundle_object" {
  description = "Source bundle the functions are built from."
  value       = "gs://${google_storage_bucket.source.name}/${google_storage_bucket_object.bundle.name}"
}

output "firestore_database" {
  description = "Firestore database holding the records."
  value       = google_firestore_database.records.id
}

# The run buckets exist outside this module (it only grants access on them), so their lifecycle configuration is
# theirs to hold: this is the rule to merge into each run bucket's (GCS: `gcloud storage buckets update
# gs://<bucket> --lifecycle-file=<this as JSON>`; S3: the same prefix and days as an Expiration rule, plus
# AbortIncompleteMultipartUpload). It deletes only objects under the quarantine prefix, N days after the move
# created them there.
output "quarantine_lifecycle_rule" {
  description = "Lifecycle rule for each run bucket: delete quarantined objects quarantine_days after the reclaim moved them."
  value       = local.quarantine_lifecycle_rule
}

output "notify_webhook_secret" {
  description = "Secret Manager secret to hold the chat webhook URL (add its value with gcloud); null when notifications.webhook is off."
  value       = var.notifications.webhook ? google_secret_manager_secret.notify_webhook[0].secret_id : null
}
