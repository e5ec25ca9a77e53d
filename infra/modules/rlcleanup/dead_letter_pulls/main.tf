# A pull subscription on a dead-letter topic, or the messages dead-lettered there would be lost: kept a week, acked
# ones too (an operator reads them again), never expiring. One typed map drives the one resource.
resource "google_pubsub_subscription" "this" {
  for_each = var.subscriptions

  name                       = each.key
  topic                      = each.value.topic_id
  ack_deadline_seconds       = 60
  message_retention_duration = "604800s"
  retain_acked_messages      = true
  labels                     = { app = "rlcleanup", dead_letter_for = each.value.dead_letter_for }

  expiration_policy {
    ttl = ""
  }
}
