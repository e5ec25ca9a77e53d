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

# The push subscriptions (push_subscriptions/: one typed map, one resource). One per function on its trigger topic
# (we own the ack deadline, retry policy and dead-letter policy), and one on every dead-letter topic but the
# recorder's own, pushed to the dead-letter recorder (topology.yaml `dead_letters`): a message Pub/Sub gave up on
# lands on its run's record (runtime/dead_letters.py); the parked copy stays on the pull subscription below. A
# subscription takes its settings and its own dead-letter topic from the function it pushes to.
locals {
  push_targets = { for fn, f in var.topology_functions : fn => {
    uri                   = google_cloudfunctions2_function.fn[fn].service_config[0].uri
    topics_endpoint       = "${google_cloudfunctions2_function.fn[fn].service_config[0].uri}/projects/${var.project_id}/topics"
    invoker_email         = google_service_account.invoker[fn].email
    ack_deadline_seconds  = f.ack_deadline_seconds
    minimum_backoff       = f.minimum_backoff
    maximum_backoff       = f.maximum_backoff
    dead_letter_topic_id  = google_pubsub_topic.dead_letter[f.dead_letter_topic].id
    max_delivery_attempts = f.max_delivery_attempts
  } }
  push_subscriptions = {
    functions = { for fn, f in local.triggered_functions : fn => {
      name       = f.push_subscription
      topic_id   = google_pubsub_topic.topic[f.trigger].id
      topic_name = f.trigger
      function   = fn
      labels     = { app = "rlcleanup", function = fn }
    } }
    dead-letter-records = { for sub, r in local.dead_letter_records : sub => {
      name       = sub
      topic_id   = google_pubsub_topic.dead_letter[r.topic].id
      topic_name = r.topic
      function   = var.topology_dead_letter_recorder
      labels     = { app = "rlcleanup", function = var.topology_dead_letter_recorder, dead_letter_for = r.function }
    } }
  }
}

# The functions' former resource, moved whole (every instance under its key): nothing is recreated.
moved {
  from = google_pubsub_subscription.push
  to   = module.push_subscriptions["functions"].google_pubsub_subscription.this
}

module "push_subscriptions" {
  source   = "./push_subscriptions"
  for_each = local.push_subscriptions

  subscriptions = each.value
  functions     = local.push_targets

  depends_on = [
    google_cloud_run_service_iam_member.push_invoker,
    google_pubsub_topic_iam_member.dead_letter_publisher,
  ]
}

# The recorder's former resource, moved whole (every instance under its key): nothing is recreated.
moved {
  from = google_pubsub_subscription.dead_letter_record
  to   = module.push_subscriptions["dead-letter-records"].google_pubsub_subscription.this
}

# The functions' former resource, moved whole: nothing is recreated.
moved {
  from = google_pubsub_subscription.dead_letter
  to   = module.dead_letter_pulls["functions"].google_pubsub_subscription.this
}

# A pull subscription on every dead-letter topic, a function's or a sink's, or dead-lettered messages would be lost
# (dead_letter_pulls/: one typed map, one resource; moved there whole, every instance under its name).
module "dead_letter_pulls" {
  source = "./dead_letter_pulls"
  for_each = {
    functions = { for sub, d in local.dead_letter_subscriptions : sub => {
      topic_id        = google_pubsub_topic.dead_letter[d.topic].id
      dead_letter_for = d.function
    } }
    sinks = { for sink, d in local.sink_dead_letters : d.subscription => {
      topic_id        = google_pubsub_topic.sink_dead_letter[d.topic].id
      dead_letter_for = sink
    } }
  }

  subscriptions = each.value
}

# The sinks' former resource, moved whole: nothing is recreated.
moved {
  from = google_pubsub_subscription.sink_dead_letter
  to   = module.dead_letter_pulls["sinks"].google_pubsub_subscription.this
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

# Its pull subscription (<subscription>-dlq-sub): module.dead_letter_pulls["sinks"] above.
