# Alert when any dead-letter subscription holds messages: every dead letter is a step that failed
# max_delivery_attempts times and needs an operator.

resource "google_monitoring_alert_policy" "dead_letter_backlog" {
  display_name = "${var.name_prefix}: rlcleanup dead-letter backlog"
  combiner     = "OR"
  severity     = "ERROR"

  conditions {
    display_name = "Undelivered messages on a *-dlq-sub subscription"

    condition_threshold {
      filter = join(" AND ", [
        "resource.type = \"pubsub_subscription\"",
        "metric.type = \"pubsub.googleapis.com/subscription/num_undelivered_messages\"",
        "resource.label.subscription_id = one_of(${join(", ", [for s in concat(keys(local.dead_letter_subscriptions), [for d in values(local.sink_dead_letters) : d.subscription]) : "\"${s}\""])})",
      ])
      comparison      = "COMPARISON_GT"
      threshold_value = 0
      duration        = "300s"

      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_MAX"
        cross_series_reducer = "REDUCE_MAX"
        group_by_fields      = ["resource.label.subscription_id"]
      }

      trigger {
        count = 1
      }
    }
  }

  notification_channels = [var.alert_notification_channel]

  alert_strategy {
    auto_close = "86400s"
  }

  documentation {
    mime_type = "text/markdown"
    content   = <<-EOT
      A dead-letter subscription of rlcleanup holds messages: a function failed on them
      `max_delivery_attempts` times. The subscription is named `<function>-dlq-sub`; pull the messages
      (`gcloud pubsub subscriptions pull <function>-dlq-sub --limit 10`), read the function's logs for the
      message IDs, fix the cause, then republish them to the function's trigger topic and acknowledge.
    EOT
  }

  depends_on = [module.dead_letter_pulls]
}
