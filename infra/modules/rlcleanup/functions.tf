# One Cloud Run function (gen2) per topology function, all built from the same content-addressed bundle
# (thin main.py + the rlcleanup package + requirements.txt). Triggered only by its push subscription (pubsub.tf).

resource "google_cloudfunctions2_function" "fn" {
  for_each = var.topology_functions

  name        = each.key
  location    = var.region
  description = each.value.description
  labels      = { app = "rlcleanup" }

  build_config {
    runtime         = "python311"
    entry_point     = each.value.entry_point
    service_account = google_service_account.builder.id

    source {
      storage_source {
        bucket = google_storage_bucket.source.name
        object = google_storage_bucket_object.bundle.name
      }
    }
  }

  service_config {
    timeout_seconds                = each.value.timeout_seconds
    available_memory               = each.value.memory
    min_instance_count             = 0
    max_instance_count             = each.value.max_instances
    ingress_settings               = "ALLOW_INTERNAL_ONLY"
    all_traffic_on_latest_revision = true
    service_account_email          = google_service_account.runtime[each.key].email

    # Exactly the variables rlcleanup.settings reads (tests/unit/test_infra.py checks both name the same set), plus
    # LOG_EXECUTION_ID, which functions-framework reads. The claim lease is the function's timeout, as on the stack.
    environment_variables = {
      GOOGLE_CLOUD_PROJECT                   = var.project_id
      LOG_EXECUTION_ID                       = "true"
      RLCLEANUP_FUNCTION                     = each.key
      RLCLEANUP_PRESERVE_ROOT                = "gs://${google_storage_bucket.evidence.name}/"
      RLCLEANUP_RUN_BUCKETS                  = join(",", var.run_buckets)
      RLCLEANUP_ALLOWED_DESTINATION_PREFIXES = join(",", var.allowed_destination_prefixes)
      RLCLEANUP_READABLE_ROOTS               = "" # the local default only: deployments read inside run_buckets
      RLCLEANUP_LEASE_SECONDS                = tostring(each.value.timeout_seconds)
      RLCLEANUP_MAX_EVENT_AGE_SECONDS        = tostring(var.max_event_age_seconds)
      RLCLEANUP_LIMIT_WARN_FRACTION          = tostring(var.limit_warn_fraction)
      RLCLEANUP_RECORD_STORE_TIMEOUT_SECONDS = tostring(var.record_store_timeout_seconds)
      RLCLEANUP_LOG_LEVEL                    = var.log_level
      RLCLEANUP_GPU_PRICES_USD_PER_HOUR      = jsonencode(var.gpu_prices_usd_per_hour) # the report's compute cost
      RLCLEANUP_IRIS_STATUS_CMD              = var.iris_status_cmd
      RLCLEANUP_RAY_DASHBOARD                = var.ray_dashboard
      # Event sources (modules/rlcleanup/events.tf): the sweep reads these (and RLCLEANUP_RAY_DASHBOARD), on-k8s-log-entry the last.
      RLCLEANUP_SWEEP_ROOTS              = jsonencode(var.sweep_roots)
      RLCLEANUP_IRIS_URL                 = var.iris_controller_url
      RLCLEANUP_IRIS_CLUSTER             = var.iris_cluster
      RLCLEANUP_IRIS_RUN_URI_TEMPLATE    = var.iris_run_uri_template
      RLCLEANUP_K8S_RUN_URI_TEMPLATE     = var.k8s_run_uri_template
      RLCLEANUP_STALL_SECONDS            = tostring(var.sweep_tuning.stall_seconds)
      RLCLEANUP_SWEEP_PAGE_SIZE          = tostring(var.sweep_tuning.page_size)
      RLCLEANUP_SWEEP_LOCK_STALE_SECONDS = tostring(var.sweep_tuning.lock_stale_seconds)
      RLCLEANUP_SWEEP_QUIESCENT_SECONDS  = tostring(var.sweep_tuning.quiescent_seconds)
      # Hub hand-offs above the threshold are uploaded by the Cloud Run job (hub.tf); "" = always inline.
      RLCLEANUP_HUB_UPLOAD_JOB          = var.enable_hub_destination ? google_cloud_run_v2_job.hub_upload[0].id : ""
      RLCLEANUP_HUB_JOB_THRESHOLD_BYTES = tostring(var.hub_job_threshold_bytes)
      # Capture parts over the threshold are copied by the large-copy job (copy_job.tf); "" = always inline.
      RLCLEANUP_LARGE_COPY_JOB           = local.large_copy ? google_cloud_run_v2_job.large_copy[0].id : ""
      RLCLEANUP_COPY_JOB_THRESHOLD_BYTES = tostring(var.copy_job_threshold_bytes)
      RLCLEANUP_COPY_JOB_MAX_TASKS       = tostring(var.copy_job_limits.max_tasks)
      # Wrap-up reads back the Hub repos a run's own export job published to (docs/hub.md).
      RLCLEANUP_HUB_AUDIT = tostring(var.hub_audit)
      # Pre-cancel capture waits at most this long for every node's final sync-manifest.json.
      RLCLEANUP_PRECANCEL_SYNC_WAIT_SECONDS = tostring(var.precancel_sync_wait_seconds)
      # A run over this many objects is capture-planned in pages (bounded work per invocation).
      RLCLEANUP_CAPTURE_PAGE_OBJECTS = tostring(var.capture_page_objects)
      # A run holding more objects than this is refused (run_too_large): work per run stays bounded.
      RLCLEANUP_MAX_RUN_OBJECTS = tostring(var.max_run_objects)
      # A reclaim moves what it removes to <bucket>/<prefix>/ for this many days (the run buckets' lifecycle rule,
      # output quarantine_lifecycle_rule, deletes it then; `rlcleanup restore` puts it back before).
      RLCLEANUP_QUARANTINE_PREFIX = var.quarantine_prefix
      RLCLEANUP_QUARANTINE_DAYS   = tostring(var.quarantine_days)
      # Notifications (notify.tf): the webhook URL is a secret, never a plain variable: the notify function reads
      # the Secret Manager version RLCLEANUP_NOTIFY_WEBHOOK_SECRET names at run time; WEBHOOK_URL stays empty here.
      RLCLEANUP_NOTIFY_WEBHOOK_URL            = ""
      RLCLEANUP_NOTIFY_WEBHOOK_SECRET         = var.notifications.webhook && each.key == local.event_sources.notify ? "${google_secret_manager_secret.notify_webhook[0].id}/versions/latest" : ""
      RLCLEANUP_NOTIFY_WEBHOOK_KIND           = var.notifications.webhook_kind
      RLCLEANUP_NOTIFY_SMTP_HOST              = var.notifications.smtp_host
      RLCLEANUP_NOTIFY_SMTP_PORT              = tostring(var.notifications.smtp_port)
      RLCLEANUP_NOTIFY_SMTP_STARTTLS          = tostring(var.notifications.smtp_starttls)
      RLCLEANUP_NOTIFY_SMTP_FROM              = var.notifications.smtp_from
      RLCLEANUP_NOTIFY_SMTP_TO                = join(",", var.notifications.smtp_to)
      RLCLEANUP_NOTIFY_ON_COMPLETE            = tostring(var.notifications.on_complete)
      RLCLEANUP_NOTIFY_DEADLINE_WARNING_HOURS = tostring(var.notifications.deadline_warning_hours)
      RLCLEANUP_NOTIFY_MAX_ATTEMPTS           = "3"
      RLCLEANUP_NOTIFY_TIMEOUT_SECONDS        = "10"
      RLCLEANUP_NOTIFY_CHANNELS               = join(",", var.notifications.channels)
      # Export grants (docs/authority.md §9): what an owed export runs and where, on the grant-applying functions
      # only (elsewhere empty: refused); the preflight's default throughput and margin are plain numbers everywhere.
      RLCLEANUP_EXPORT_CONVERTER                   = contains(local.grant_appliers, each.key) && length(var.export_grants.converter) > 0 ? jsonencode(var.export_grants.converter) : ""
      RLCLEANUP_EXPORT_CONTROLLER                  = contains(local.grant_appliers, each.key) ? var.export_grants.controller : ""
      RLCLEANUP_EXPORT_ALLOWED_PREFIXES            = contains(local.grant_appliers, each.key) ? join(",", var.export_grants.allowed_prefixes) : ""
      RLCLEANUP_EXPORT_THROUGHPUT_BYTES_PER_SECOND = tostring(var.export_grants.throughput_bytes_per_second)
      RLCLEANUP_EXPORT_MARGIN_SECONDS              = tostring(var.export_grants.margin_seconds)
      # Grant lifetime limits (settings.GrantLimits, read once at cold start): the package's defaults, 7 days, 120 s.
      RLCLEANUP_GRANT_MAX_LIFETIME_SECONDS = "604800"
      RLCLEANUP_GRANT_CLOCK_SKEW_SECONDS   = "120"
    }

    # The Iris bearer token (Secret Manager), for the sweep only and only when configured.
    dynamic "secret_environment_variables" {
      for_each = each.key == local.event_sources.sweep_function && var.iris_token_secret != "" ? [var.iris_token_secret] : []
      content {
        key        = "RLCLEANUP_IRIS_TOKEN"
        project_id = var.project_id
        secret     = secret_environment_variables.value
        version    = "latest"
      }
    }

    # Credentials come from Secret Manager, never from plain variables: each S3 endpoint's secret only on the
    # functions that read runs, the HF token only on the grant-applying functions (s3.tf, hub.tf).
    dynamic "secret_environment_variables" {
      for_each = contains(local.s3_readers, each.key) ? var.s3_endpoints : {}
      content {
        key        = "RLCLEANUP_S3_ENDPOINT_${upper(replace(secret_environment_variables.key, "-", "_"))}"
        project_id = var.project_id
        secret     = google_secret_manager_secret.s3_endpoint[secret_environment_variables.key].secret_id
        version    = "latest"
      }
    }
    # The Hub audit's read-only token (hub.tf), on the function that runs the audit at wrap-up only.
    dynamic "secret_environment_variables" {
      for_each = var.hub_audit && var.hub_audit_token_secret != "" && each.key == local.event_sources.hub_audit ? [var.hub_audit_token_secret] : []
      content {
        key        = "RLCLEANUP_HUB_AUDIT_TOKEN"
        project_id = var.project_id
        secret     = secret_environment_variables.value
        version    = "latest"
      }
    }
    dynamic "secret_environment_variables" {
      for_each = var.enable_hub_destination && contains(local.grant_appliers, each.key) ? [google_secret_manager_secret.hf_token[0].secret_id] : []
      content {
        key        = "HF_TOKEN"
        project_id = var.project_id
        secret     = secret_environment_variables.value
        version    = "latest"
      }
    }
  }

  depends_on = [
    google_project_service.enabled,
    google_project_iam_member.builder,
    google_storage_bucket_iam_member.builder_source_reader,
    google_secret_manager_secret_iam_member.s3_endpoint_reader,
    google_secret_manager_secret_iam_member.hf_token_reader,
    google_secret_manager_secret_iam_member.notify_webhook_reader,
  ]
}
