variable "subscriptions" {
  description = "Pull subscriptions by name: the id of the dead-letter topic each reads, and whose dead letters they are (a function's or a sink's)."
  type = map(object({
    topic_id        = string
    dead_letter_for = string
  }))
}
