output "ids" {
  description = "Each subscription's id, by key."
  value       = { for k, s in google_pubsub_subscription.this : k => s.id }
}
