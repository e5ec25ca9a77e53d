output "ids" {
  description = "Each subscription's id, by name."
  value       = { for k, s in google_pubsub_subscription.this : k => s.id }
}
