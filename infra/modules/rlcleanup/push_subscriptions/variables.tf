variable "subscriptions" {
  description = "Push subscriptions by key (the resource's instance key): the subscription's name, the id and name of the topic it reads, the function (a key of `functions`) it pushes to, and its labels."
  type = map(object({
    name       = string
    topic_id   = string
    topic_name = string
    function   = string
    labels     = map(string)
  }))
}

variable "functions" {
  description = "What a subscription takes from the function it pushes to: its URI (the OIDC audience), its push endpoint up to the topic's name (<uri>/projects/P/topics: functions-framework puts the topic into the CloudEvent `source`), its invoker's e-mail, its topology push settings and the id of its dead-letter topic."
  type = map(object({
    uri                   = string
    topics_endpoint       = string
    invoker_email         = string
    ack_deadline_seconds  = number
    minimum_backoff       = string
    maximum_backoff       = string
    dead_letter_topic_id  = string
    max_delivery_attempts = number
  }))
}
