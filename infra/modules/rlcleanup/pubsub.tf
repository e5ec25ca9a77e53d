# Topics and subscriptions, all generated from the topology (var.topology_* in topology.auto.tfvars.json).

resource "google_pubsub_topic" "topic" {
  for_each = var.topology_topics

  name                       = each.key
  message_retention_duration = "604800s"
  labels                     = { app = "rlcleanup" }

  # checkov:skip=CKV_GCP_83: Google-managed encryption is sufficient; messages carry run IDs, URIs and signed grants, never artifact bytes or secrets.

  depends_on = [google_project_service.enabled]
}

resource "google_pubsub_topic" "dead_letter" {
  for_each = local.dead_letter_topics

  name                       = each.key
  message_retention_duration = "604800s"
  labels                     = { app = "rlcleanup", dead_letter_for = each.value }

  # checkov:skip=CKV_GCP_83: Google-managed encryption is sufficient; dead letters are copies of the messages above.

  depends_on = [google_project_service.enabled]
}

# One direct push subscription per function (Google's recommended Pub/Sub trigger): we own the ack deadline,
# retry policy and dead-letter policy. The endpoint path /projects/P/topics/T makes functions-framework put the
# topic into the CloudEvent `source`.
resource "google_pubsub_subscription" "push" {
  for_each = local.triggered_functions

  name                       = each.value.push_subscription
  topic                      = google_pubsub_topic.topic[each.value.trigger].id
  ack_deadline_seconds       = each.value.ack_deadline_seconds
  message_retention_duration = "604800s"
  labels                     = { app = "rlcleanup", function = each.key }

  push_config {
    push_endpoint = "${google_cloudfunctions2_function.fn[each.key].service_config[0].uri}/projects/${var.project_id}/topics/${each.value.trigger}"

    oidc_token {
      service_account_email = google_service_account.invoker[each.key].email
      audience              = google_cloudfunctions2_function.fn[each.key].service_config[0].uri
    }
  }

  retry_policy {
    minimum_backoff = each.value.minimum_backoff
    maximum_backoff = each.value.maximum_backoff
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.dead_letter[each.value.dead_letter_topic].id
    max_delivery_attempts = each.value.max_delivery_attempts
  }

  expiration_policy {
    ttl = ""
  }

  depends_on = [
    google_cloud_run_service_iam_member.push_invoker,
    google_pubsub_topic_iam_member.dead_letter_publisher,
  ]
}

# A pull subscription on every dead-letter topic, or dead-lettered messages would be lost.
resource "google_pubsub_subscription" "dead_letter" {
  for_each = local.dead_letter_subscriptions

  name                       = each.key
  topic                      = google_pubsub_topic.dead_letter[each.value.topic].id
  ack_deadline_seconds       = 60
  message_retention_duration = "604800s"
  retain_acked_messages      = true
  labels                     = { app = "rlcleanup", dead_letter_for = each.value.function }

  expiration_policy {
    ttl = ""
  }
}

# Every dead-letter topic but the recorder's own is also pushed to the dead-letter recorder (topology.yaml
# `dead_letters`): a message Pub/Sub gave up on lands on its run's record (runtime/dead_letters.py); the parked copy
# stays on the pull subscription above. The recorder's own settings and its own dead-letter topic apply.
resource "google_pubsub_subscription" "dead_letter_record" {
  for_each = local.dead_letter_records

  name                       = each.key
  topic                      = google_pubsub_topic.dead_letter[each.value.topic].id
  ack_deadline_seconds       = var.topology_functions[var.topology_dead_letter_recorder].ack_deadline_seconds
  message_retention_duration = "604800s"
  labels                     = { app = "rlcleanup", function = var.topology_dead_letter_recorder, dead_letter_for = each.value.function }

  push_config {
    push_endpoint = "${google_cloudfunctions2_function.fn[var.topology_dead_letter_recorder].service_config[0].uri}/projects/${var.project_id}/topics/${each.value.topic}"

    oidc_token {
      service_account_email = google_service_account.invoker[var.topology_dead_letter_recorder].email
      audience              = google_cloudfunctions2_function.fn[var.topology_dead_letter_recorder].service_config[0].uri
    }
  }

  retry_policy {
    minimum_backoff = var.topology_functions[var.topology_dead_letter_recorder].minimum_backoff
    maximum_backoff = var.topology_functions[var.topology_dead_letter_recorder].maximum_backoff
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.dead_letter[var.topology_functions[var.topology_dead_letter_recorder].dead_letter_topic].id
    max_delivery_attempts = var.topology_functions[var.topology_dead_letter_recorder].max_delivery_attempts
  }

  expiration_policy {
    ttl = ""
  }

  depends_on = [
    google_cloud_run_service_iam_member.push_invoker,
    google_pubsub_topic_iam_member.dead_letter_publisher,
  ]
}

# Pull subscriptions on output topics that other systems consume.
resource "google_pubsub_subscription" "sink" {
  for_each = var.topology_sinks

  name                       = each.key
  topic                      = google_pubsub_topic.topic[each.value.topic].id
  ack_deadline_seconds       = 60
  message_retention_duration = "604800s"
  labels                     = { app = "rlcleanup" }

  # A consumer that keeps failing (nacks or lets the ack deadline pass) parks the message on the sink's own
  # dead-letter topic after max_delivery_attempts, instead of redelivering it for the retention period.
  dynamic "dead_letter_policy" {
    for_each = contains(keys(local.sink_dead_letters), each.key) ? [local.sink_dead_letters[each.key].topic] : []
    content {
      dead_letter_topic     = google_pubsub_topic.sink_dead_letter[dead_letter_policy.value].id
      max_delivery_attempts = 10
    }
  }

  expiration_policy {
    ttl = ""
  }

  depends_on = [google_pubsub_topic_iam_member.sink_dead_letter_publisher]
}

resource "google_pubsub_topic" "sink_dead_letter" {
  for_each = { for sub, d in local.sink_dead_letters : d.topic => sub }

  name                       = each.key
  message_retention_duration = "604800s"
  labels                     = { app = "rlcleanup", dead_letter_for = each.value }

  # checkov:skip=CKV_GCP_83: Google-managed encryption is sufficient; dead letters are copies of the sink's events.

  depends_on = [google_project_service.enabled]
}

# A pull subscription on every sink's dead-letter topic, or its dead letters would be lost.
resource "google_pubsub_subscription" "sink_dead_letter" {
  for_each = { for sub, d in local.sink_dead_letters : d.subscription => { sink = sub, topic = d.topic } }

  name                       = each.key
  topic                      = google_pubsub_topic.sink_dead_letter[each.value.topic].id
  ack_deadline_seconds       = 60
  message_retention_duration = "604800s"
  retain_acked_messages      = true
  labels                     = { app = "rlcleanup", dead_letter_for = each.value.sink }

  expiration_policy {
    ttl = ""
  }
}
