output "function_uris" {
  description = "Cloud Run URI of each function, keyed by function name (internal ingress only)."
  value       = module.rlcleanup.function_uris
}

output "runtime_service_accounts" {
  description = "Runtime service account email of each function."
  value       = module.rlcleanup.runtime_service_accounts
}

output "push_subscriptions" {
  description = "Push subscription of each function."
  value       = module.rlcleanup.push_subscriptions
}

output "dead_letter_subscriptions" {
  description = "Pull subscription on each dead-letter topic (where failed messages wait for an operator)."
  value       = module.rlcleanup.dead_letter_subscriptions
}

output "topics" {
  description = "Project topics by name."
  value       = module.rlcleanup.topics
}

output "evidence_bucket" {
  description = "Preserved-evidence bucket (RLCLEANUP_PRESERVE_ROOT)."
  value       = module.rlcleanup.evidence_bucket
}

output "bundle_object" {
  description = "Source bundle the functions are built from."
  value       = module.rlcleanup.bundle_object
}

output "firestore_database" {
  description = "Firestore database holding the records."
  value       = module.rlcleanup.firestore_database
}

output "quarantine_lifecycle_rule" {
  description = "Lifecycle rule to merge into each run bucket (the reclaim quarantine's expiry); see the module."
  value       = module.rlcleanup.quarantine_lifecycle_rule
}

output "notify_webhook_secret" {
  description = "Secret Manager secret to hold the chat webhook URL: printf %s \"$URL\" | gcloud secrets versions add <it> --data-file=-"
  value       = module.rlcleanup.notify_webhook_secret
}
