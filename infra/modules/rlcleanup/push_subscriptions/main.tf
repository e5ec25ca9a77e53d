# Direct push subscriptions (Google's recommended Pub/Sub trigger), one typed map driving one resource: each
# subscription names only what is its own (its name, the topic it reads, the function it pushes to, its labels);
# the ack deadline, retry policy, dead-letter policy, endpoint and OIDC identity are the function's. The endpoint
# path <uri>/projects/P/topics/T makes functions-framework put the topic into the CloudEvent `source`.
resource "google_pubsub_subscription" "this" {
  for_each = var.subscriptions

  name                       = each.value.name
  topic                      = each.value.topic_id
  ack_deadline_seconds       = var.functions[each.value.function].ack_deadline_seconds
  message_retention_duration = "604800s"
  labels                     = each.value.labels

  push_config {
    push_endpoint = "${var.functions[each.value.function].topics_endpoint}/${each.value.topic_name}"

    oidc_token {
      service_account_email = var.functions[each.value.function].invoker_email
      audience              = var.functions[each.value.function].uri
    }
  }

  retry_policy {
    minimum_backoff = var.functions[each.value.function].minimum_backoff
    maximum_backoff = var.functions[each.value.function].maximum_backoff
  }

  dead_letter_policy {
    dead_letter_topic     = var.functions[each.value.function].dead_letter_topic_id
    max_delivery_attempts = var.functions[each.value.function].max_delivery_attempts
  }

  expiration_policy {
    ttl = ""
  }
}
