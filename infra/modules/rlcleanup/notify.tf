# Notifications (docs/operator.md): the notify function tells a person when a run needs one, on a chat webhook
# and/or by e-mail. The webhook URL carries its token, so it is a Secret Manager secret: Terraform creates the
# secret, never its value (nothing in state); add it with
#   printf %s "$WEBHOOK_URL" | gcloud secrets versions add <prefix>-notify-webhook --data-file=-
# Only the notify function's service account may read it (secretAccessor on this one secret); the function reads
# the version RLCLEANUP_NOTIFY_WEBHOOK_SECRET names at run time (functions.tf).

resource "google_secret_manager_secret" "notify_webhook" {
  count = var.notifications.webhook ? 1 : 0

  secret_id = "${var.name_prefix}-notify-webhook"
  labels    = { app = "rlcleanup", purpose = "notify-webhook" }

  replication {
    auto {}
  }

  depends_on = [google_project_service.enabled]
}

resource "google_secret_manager_secret_iam_member" "notify_webhook_reader" {
  count = var.notifications.webhook ? 1 : 0

  secret_id = google_secret_manager_secret.notify_webhook[0].id
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.runtime[local.event_sources.notify].member
}
