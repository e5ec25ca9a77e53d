# ---------------------------------------------------------------------------------------------------------------------
# Deployment inputs (set per project, e.g. in a -var-file; see infra/README.md and deploy.tfvars.example)
# ---------------------------------------------------------------------------------------------------------------------

variable "project_id" {
  description = "GCP project that hosts the topics, functions, Firestore database and buckets."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project_id))
    error_message = "project_id must be a GCP project ID: 6-30 characters, lowercase letters, digits and hyphens."
  }
}

variable "region" {
  description = "Region for the functions (Cloud Run) and buckets, e.g. us-central1."
  type        = string

  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]+$", var.region))
    error_message = "region must be a GCP region such as us-central1 or europe-west4."
  }
}

variable "firestore_location" {
  description = "Firestore location (a region or multi-region such as nam5). Defaults to var.region."
  type        = string
  default     = null

  validation {
    condition     = var.firestore_location == null || can(regex("^[a-z0-9-]+$", var.firestore_location))
    error_message = "firestore_location must be a location ID such as nam5, eur3 or us-central1."
  }
}

variable "name_prefix" {
  description = "Short prefix for project-wide names (service accounts, source bucket, custom role, alert)."
  type        = string
  default     = "rlc"

  validation {
    condition     = can(regex("^[a-z][a-z0-9]{1,7}$", var.name_prefix))
    error_message = "name_prefix must be 2-8 lowercase letters/digits, starting with a letter (service account IDs are at most 30 characters)."
  }
}

variable "run_buckets" {
  description = "Buckets holding the training runs rlcleanup reads. Functions get read access; only the grant function may delete there (reclaim)."
  type        = list(string)

  validation {
    condition     = length(var.run_buckets) > 0 && alltrue([for b in var.run_buckets : can(regex("^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$", b))])
    error_message = "run_buckets must be a non-empty list of bucket names (no gs:// prefix)."
  }
}

variable "preserve_bucket" {
  description = "Name of the preserved-evidence bucket this module creates (write-once evidence copies)."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$", var.preserve_bucket))
    error_message = "preserve_bucket must be a bucket name (no gs:// prefix)."
  }
}

variable "evidence_retention_days" {
  description = "Retention policy on the preserved-evidence bucket: objects cannot be deleted or overwritten for this many days."
  type        = number
  default     = 365

  validation {
    condition     = var.evidence_retention_days >= 1 && var.evidence_retention_days <= 3650 && floor(var.evidence_retention_days) == var.evidence_retention_days
    error_message = "evidence_retention_days must be a whole number of days between 1 and 3650."
  }
}

variable "lock_evidence_retention" {
  description = "Lock the evidence retention policy. IRREVERSIBLE: a locked policy can never be shortened or removed, and the bucket cannot be deleted before every object expires."
  type        = bool
  default     = false
}

variable "soft_delete_retention_days" {
  description = "Soft-delete window on the evidence and source buckets (0 disables, otherwise 7-90 days)."
  type        = number
  default     = 30

  validation {
    condition     = var.soft_delete_retention_days == 0 || (var.soft_delete_retention_days >= 7 && var.soft_delete_retention_days <= 90)
    error_message = "soft_delete_retention_days must be 0 or between 7 and 90."
  }
}

variable "approver_principals" {
  description = "IAM principals allowed to publish signed grants to the authority-grants topic, e.g. [\"group:ml-approvers@example.com\"]. Nobody else may publish there."
  type        = list(string)

  validation {
    condition     = length(var.approver_principals) > 0 && alltrue([for p in var.approver_principals : can(regex("^(user|group|serviceAccount):[^@\\s]+@[^@\\s]+\\.[a-z]+$", p))])
    error_message = "approver_principals must be a non-empty list of \"user:\", \"group:\" or \"serviceAccount:\" members with an email address."
  }
}

variable "allowed_destination_prefixes" {
  description = "gs:// (and hf://namespace/) prefixes that grants may hand off or publish to. The grant function gets write access on these buckets; the prefix itself is enforced in code."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for p in var.allowed_destination_prefixes : can(regex("^(gs://[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]|hf://[A-Za-z0-9][A-Za-z0-9._-]*)/", p))])
    error_message = "allowed_destination_prefixes entries must look like gs://bucket/prefix/ or hf://namespace/ (followed by a slash)."
  }
}

variable "alert_notification_channel" {
  description = "Cloud Monitoring notification channel for the dead-letter backlog alert (projects/P/notificationChannels/ID)."
  type        = string

  validation {
    condition     = can(regex("^projects/[^/]+/notificationChannels/[0-9]+$", var.alert_notification_channel))
    error_message = "alert_notification_channel must be a notification channel resource name: projects/<project>/notificationChannels/<id>."
  }
}

variable "bundle_path" {
  description = "Path of the prebuilt function bundle (the path printed by scripts/build_bundle.py, relative to where terraform runs)."
  type        = string

  validation {
    condition     = can(regex("bundle-[0-9a-f]{16}\\.zip$", var.bundle_path)) && fileexists(var.bundle_path)
    error_message = "bundle_path must name an existing bundle-<hash>.zip built by scripts/build_bundle.py."
  }
}

variable "max_event_age_seconds" {
  description = "Job events older than this are ledgered and dropped (RLCLEANUP_MAX_EVENT_AGE_SECONDS)."
  type        = number
  default     = 604800

  validation {
    condition     = var.max_event_age_seconds > 0
    error_message = "max_event_age_seconds must be positive."
  }
}

variable "limit_warn_fraction" {
  description = "Share of a function's timeout or memory above which an invocation is logged at WARNING (RLCLEANUP_LIMIT_WARN_FRACTION)."
  type        = number
  default     = 0.8

  validation {
    condition     = var.limit_warn_fraction > 0 && var.limit_warn_fraction <= 1
    error_message = "limit_warn_fraction must be in (0, 1]."
  }
}

variable "record_store_timeout_seconds" {
  description = "Deadline of every Firestore call, retries included (RLCLEANUP_RECORD_STORE_TIMEOUT_SECONDS)."
  type        = number
  default     = 30

  validation {
    condition     = var.record_store_timeout_seconds > 0
    error_message = "record_store_timeout_seconds must be positive."
  }
}

variable "log_level" {
  description = "Log level of the functions (RLCLEANUP_LOG_LEVEL)."
  type        = string
  default     = "INFO"

  validation {
    condition     = contains(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], var.log_level)
    error_message = "log_level must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL."
  }
}

variable "iris_status_cmd" {
  description = "Command the pre-cancel capture runs for an Iris job's state, {job_id} substituted (RLCLEANUP_IRIS_STATUS_CMD)."
  type        = string
  default     = "iris job status {job_id} --json"
}

variable "ray_dashboard" {
  description = "Ray dashboard URL for the pre-cancel capture of Ray jobs, e.g. http://head:8265; empty for none (RLCLEANUP_RAY_DASHBOARD)."
  type        = string
  default     = ""
}

# ---------------------------------------------------------------------------------------------------------------------
# Topology (GENERATED: infra/topology.auto.tfvars.json from shared/rlcleanup/runtime/topology.yaml — do not set by hand)
# ---------------------------------------------------------------------------------------------------------------------

variable "topology_topics" {
  description = "Project topics keyed by name. Generated by `python -m rlcleanup.runtime.tfvars`."
  type = map(object({
    description = string
  }))
}

variable "topology_functions" {
  description = "Functions keyed by name, with trigger topic, published topics and push/dead-letter settings. Generated."
  type = map(object({
    entry_point              = string
    description              = string
    trigger                  = optional(string) # null: the dead-letter recorder (pushed the dead-letter topics)
    stage                    = string
    publishes                = list(string)
    timeout_seconds          = number
    ack_deadline_seconds     = number
    memory                   = string
    max_instances            = number
    max_delivery_attempts    = number
    minimum_backoff          = string
    maximum_backoff          = string
    push_subscription        = string
    dead_letter_topic        = string
    dead_letter_subscription = string
    # the recorder's push subscription on this function's dead-letter topic (null: the recorder itself)
    dead_letter_record_subscription = optional(string)
  }))

  validation {
    condition     = alltrue([for f in values(var.topology_functions) : f.ack_deadline_seconds >= f.timeout_seconds && f.ack_deadline_seconds <= 600])
    error_message = "Every function needs timeout_seconds <= ack_deadline_seconds <= 600 (the push ack deadline is the HTTP timeout)."
  }

  validation {
    condition     = alltrue([for f in values(var.topology_functions) : f.max_delivery_attempts >= 5 && f.max_delivery_attempts <= 100])
    error_message = "max_delivery_attempts must be between 5 and 100 (Pub/Sub dead-letter limits)."
  }

  validation {
    condition     = !anytrue([for f in values(var.topology_functions) : contains(f.publishes, "authority-grants")])
    error_message = "No function may publish to authority-grants: only var.approver_principals may."
  }
}

variable "topology_dead_letter_recorder" {
  description = "The function every other function's dead-letter topic is pushed to (topology.yaml dead_letters.recorder). Generated."
  type        = string
}

variable "topology_sinks" {
  description = "Pull subscriptions on output topics that other systems consume, keyed by subscription name. Generated."
  type = map(object({
    topic                    = string
    dead_letter_topic        = optional(string)
    dead_letter_subscription = optional(string)
  }))
}

# ---------------------------------------------------------------------------------------------------------------------
# Event sources (events.tf, docs/events.md)
# ---------------------------------------------------------------------------------------------------------------------

variable "notify_run_buckets" {
  description = "Create a Cloud Storage notification (OBJECT_FINALIZE, JSON_API_V1) on every run bucket, feeding on-storage-event. The buckets must be in var.project_id (their project's GCS service agent publishes)."
  type        = bool
  default     = true
}

variable "run_bucket_notification_prefixes" {
  description = "Optional object_name_prefix per run bucket (bucket name => prefix), e.g. { \"team-runs\" = \"experiments/\" }. GCS allows 100 notification configs per bucket."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for p in values(var.run_bucket_notification_prefixes) : !startswith(p, "/")])
    error_message = "run_bucket_notification_prefixes values are object name prefixes (no leading slash)."
  }
}

variable "sweep_schedule" {
  description = "Cloud Scheduler cron (UTC) of the reconciling sweep."
  type        = string
  default     = "*/15 * * * *"
}

variable "gpu_prices_usd_per_hour" {
  description = "USD per GPU-hour by accelerator type (e.g. { H100 = 2.99 }): the report's compute cost. A type without a price is reported unknown."
  type        = map(number)
  default     = {}
}

variable "sweep_roots" {
  description = "Run roots the sweep lists: Marin output prefixes (depth 2: <prefix>/<name>/<version>) and Layout C roots (depth 1)."
  type        = list(object({ uri = string, depth = optional(number, 2) }))
  default     = []

  validation {
    condition     = alltrue([for r in var.sweep_roots : can(regex("^gs://[a-z0-9][a-z0-9._-]{1,61}[a-z0-9](/.*)?$", r.uri)) && r.depth >= 1 && r.depth <= 6])
    error_message = "sweep_roots entries need a gs:// uri (s3:// roots cannot be listed page by page yet) and a depth between 1 and 6."
  }
}

variable "iris_controller_url" {
  description = "Iris controller URL the sweep polls (ListJobs/GetJobStatus over Connect JSON); empty turns the Iris poller off."
  type        = string
  default     = ""
}

variable "iris_cluster" {
  description = "Name of that Iris cluster (part of the (cluster, job uid) dedupe key); defaults to the URL."
  type        = string
  default     = ""
}

variable "iris_token_secret" {
  description = "Secret Manager secret ID (in var.project_id) holding the Iris bearer token; the sweep reads it as RLCLEANUP_IRIS_TOKEN."
  type        = string
  default     = ""
}

variable "iris_run_uri_template" {
  description = "Fallback run URI for an Iris job without RLCLEANUP_RUN_URI in its environment, over {job_name}, {run_id}, {attempt_id}."
  type        = string
  default     = ""
}

variable "sweep_tuning" {
  description = "The sweep's tunables, 0 = its default: stall_seconds (2 x the slowest function timeout), page_size (100 names a listing page), lock_stale_seconds (900), quiescent_seconds (a day; Layout C)."
  type = object({
    stall_seconds      = optional(number, 0)
    page_size          = optional(number, 0)
    lock_stale_seconds = optional(number, 0)
    quiescent_seconds  = optional(number, 0)
  })
  default = {}

  validation {
    condition     = var.sweep_tuning.page_size >= 0 && var.sweep_tuning.page_size <= 1000 && var.sweep_tuning.stall_seconds >= 0
    error_message = "sweep_tuning.page_size must be 0..1000 and the durations non-negative."
  }
}

variable "k8s_log_sink" {
  description = "Create a Cloud Logging sink of GKE Job endings into k8s-job-events (read by on-k8s-log-entry)."
  type        = bool
  default     = false
}

variable "k8s_log_sink_filter" {
  description = "The sink's filter: Job events that end a Job, and Job status audit entries (which carry the Job's annotations)."
  type        = string
  default     = "resource.type=\"k8s_cluster\" AND ((logName:\"/logs/events\" AND jsonPayload.involvedObject.kind=\"Job\" AND jsonPayload.reason=(\"Completed\" OR \"BackoffLimitExceeded\" OR \"DeadlineExceeded\" OR \"PodFailurePolicy\" OR \"MaxFailedIndexesExceeded\")) OR protoPayload.methodName=(\"io.k8s.batch.v1.jobs.status.update\" OR \"io.k8s.batch.v1.jobs.status.patch\"))"
}

variable "k8s_run_uri_template" {
  description = "Run URI of a Job seen in the events log (no annotations there), over {cluster}, {namespace}, {job_name}."
  type        = string
  default     = ""
}

variable "job_event_publishers" {
  description = "IAM members allowed to publish job events (publisher on job-events only), e.g. a SkyPilot controller's service account."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for p in var.job_event_publishers : can(regex("^(user|group|serviceAccount):[^@\\s]+@[^@\\s]+\\.[a-z]+$", p))])
    error_message = "job_event_publishers must be \"user:\", \"group:\" or \"serviceAccount:\" members with an email address."
  }
}

variable "restore_operators" {
  description = "IAM members who run `rlcleanup restore` against this deployment: publisher on the model events topic only, to announce a restore (docs/events-out.md)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for p in var.restore_operators : can(regex("^(user|group|serviceAccount):[^@\\s]+@[^@\\s]+\\.[a-z]+$", p))])
    error_message = "restore_operators must be \"user:\", \"group:\" or \"serviceAccount:\" members with an email address."
  }
}

variable "s3_endpoints" {
  description = "S3-compatible run stores (CoreWeave, R2), by name: each gets one Secret Manager secret <prefix>-s3-<name> holding its endpoint JSON (docs/s3.md), readable only by the functions that read runs. The buckets are documentation here; the secret's JSON routes them."
  type        = map(object({ buckets = list(string) }))
  default     = {}

  validation {
    condition     = alltrue([for name in keys(var.s3_endpoints) : can(regex("^[a-z][a-z0-9-]{0,20}$", name))])
    error_message = "s3_endpoints names must be lower-case letters, digits and dashes (at most 21 characters), e.g. coreweave."
  }
}

variable "enable_hub_destination" {
  description = "Create the HF token secret and the Cloud Run job that uploads large hand-offs to the Hugging Face Hub."
  type        = bool
  default     = false
}

variable "hf_endpoint" {
  description = "The Hugging Face Hub endpoint the upload job talks to."
  type        = string
  default     = "https://huggingface.co"
}

variable "hub_upload_image" {
  description = "Container image of the Hub upload job (the rlcleanup package; built by Cloud Build). Required when enable_hub_destination is true."
  type        = string
  default     = ""

  validation {
    condition     = var.hub_upload_image == "" || can(regex("^[a-z0-9.-]+(:[0-9]+)?/\\S+$", var.hub_upload_image))
    error_message = "hub_upload_image must be an image reference such as us-docker.pkg.dev/PROJECT/REPO/rlcleanup:TAG."
  }
}

variable "max_run_objects" {
  description = "The most objects a run may hold (RLCLEANUP_MAX_RUN_OBJECTS); the capture and log-scan plans refuse a larger run as run_too_large."
  type        = number
  default     = 200000 # checked at start-up: a whole number, 1 or more (settings.py)
}

variable "capture_page_objects" {
  description = "Objects one plan-capture invocation lists (RLCLEANUP_CAPTURE_PAGE_OBJECTS); a larger run is planned in pages, each a continuation message on capture-parts."
  type        = number
  default     = 5000

  validation {
    condition     = var.capture_page_objects >= 1 && floor(var.capture_page_objects) == var.capture_page_objects
    error_message = "capture_page_objects must be a whole number, 1 or more."
  }
}

variable "hub_audit" {
  description = "Read back (never write) the Hub repos a run's own export job published to, at wrap-up (RLCLEANUP_HUB_AUDIT; docs/hub.md). On by default: a run that published to the Hub is checked; anonymous reads see public repos only (see hub_audit_token_secret)."
  type        = bool
  default     = true
}

variable "hub_audit_token_secret" {
  description = "Secret Manager secret ID (in var.project_id) holding a READ-ONLY Hugging Face token for the Hub audit, so private repos can be read back; select-candidate alone reads it, as RLCLEANUP_HUB_AUDIT_TOKEN. Never the write token (hf_token). Empty: the audit reads anonymously and a private repo reads as not found."
  type        = string
  default     = ""
}

variable "precancel_sync_wait_seconds" {
  description = "How long a pre-cancel capture waits for every node's final sync-manifest.json before it records what was not synced (RLCLEANUP_PRECANCEL_SYNC_WAIT_SECONDS)."
  type        = number
  default     = 60 # 0..600: the function refuses anything else when it reads its settings
}

variable "hub_job_threshold_bytes" {
  description = "Hand-offs to the Hub whose export is larger than this (bytes) are uploaded by the Cloud Run job apply-grant starts (RLCLEANUP_HUB_JOB_THRESHOLD_BYTES); smaller ones inline in apply-grant."
  type        = number
  default     = 1073741824

  validation {
    condition     = var.hub_job_threshold_bytes >= 0 && floor(var.hub_job_threshold_bytes) == var.hub_job_threshold_bytes
    error_message = "hub_job_threshold_bytes must be a whole number of bytes, 0 or more (0: every Hub hand-off runs as the job)."
  }
}

variable "hub_upload_timeout_seconds" {
  description = "Timeout of one Hub upload job task (each retry resumes where the last stopped)."
  type        = number
  default     = 21600

  validation {
    condition     = var.hub_upload_timeout_seconds >= 600 && var.hub_upload_timeout_seconds <= 604800
    error_message = "hub_upload_timeout_seconds must be between 600 and 604800 (7 days, Cloud Run's limit)."
  }
}

variable "quarantine_prefix" {
  description = "Prefix of each run bucket where a reclaim moves what it removes (RLCLEANUP_QUARANTINE_PREFIX); never taken from a run."
  type        = string
  default     = "_rlcleanup-quarantine"

  validation {
    condition     = can(regex("^[A-Za-z0-9_][A-Za-z0-9._=-]{0,100}$", var.quarantine_prefix))
    error_message = "quarantine_prefix must be one path segment of letters, digits, '_', '.', '=', '-'."
  }
}

variable "quarantine_days" {
  description = "Days a reclaimed object stays restorable in quarantine before the lifecycle rule on the prefix deletes it (RLCLEANUP_QUARANTINE_DAYS)."
  type        = number
  default     = 7

  validation {
    condition     = var.quarantine_days >= 1 && var.quarantine_days <= 3650 && floor(var.quarantine_days) == var.quarantine_days
    error_message = "quarantine_days must be a whole number of days between 1 and 3650."
  }
}

variable "notifications" {
  description = "Who is told when a run needs a person (the notify function, docs/operator.md): webhook = true creates the Secret Manager secret that holds the chat webhook URL (its value is added with gcloud, never here), readable by the notify function only; webhook_kind = slack | google_chat; smtp_* an SMTP relay and recipients (empty smtp_host: no e-mail); on_complete also posts one line for a run that needs nobody; deadline_warning_hours: how close a deadline is before the sweep has notify say it again; channels: post only on these (names of adapters/notify_registry.py; empty: every channel configured here, an unknown name is refused)."
  type = object({
    webhook                = optional(bool, false)
    webhook_kind           = optional(string, "slack")
    smtp_host              = optional(string, "")
    smtp_port              = optional(number, 25)
    smtp_starttls          = optional(bool, false)
    smtp_from              = optional(string, "")
    smtp_to                = optional(list(string), [])
    channels               = optional(list(string), [])
    on_complete            = optional(bool, false)
    deadline_warning_hours = optional(number, 24)
  })
  default = {}

  validation {
    condition     = contains(["slack", "google_chat"], var.notifications.webhook_kind)
    error_message = "notifications.webhook_kind must be slack or google_chat (both take {\"text\": ...})."
  }

  validation {
    condition     = var.notifications.smtp_host == "" || length(var.notifications.smtp_to) > 0
    error_message = "notifications.smtp_host needs at least one address in notifications.smtp_to."
  }
}

variable "export_grants" {
  description = "Export grants (docs/authority.md §9): converter = the argv of the command an owed Hugging Face export runs as a job (RLCLEANUP_EXPORT_CONVERTER, e.g. [\"python\", \"-m\", \"skyrl_train.entrypoints.checkpoint_export\"]; upstream's ++checkpoint_export.* overrides follow it); controller = the controller the jobs are submitted to (RLCLEANUP_EXPORT_CONTROLLER: ray, whose dashboard is ray_dashboard); allowed_prefixes = where a request's model_path / model_source_uri may lie (RLCLEANUP_EXPORT_ALLOWED_PREFIXES; empty: none); throughput_bytes_per_second and margin_seconds = the expiry preflight's stated default throughput and the time the job needs beyond it. Set on the grant-applying functions only; the default (no converter, no controller) refuses every export grant."
  type = object({
    converter                   = optional(list(string), [])
    controller                  = optional(string, "")
    allowed_prefixes            = optional(list(string), [])
    throughput_bytes_per_second = optional(number, 50000000)
    margin_seconds              = optional(number, 1800)
  })
  default = {}

  validation {
    condition     = (length(var.export_grants.converter) == 0) == (var.export_grants.controller == "")
    error_message = "export_grants.converter and export_grants.controller are set together (either alone refuses every export grant)."
  }

  validation {
    condition     = alltrue([for arg in var.export_grants.converter : arg != ""])
    error_message = "export_grants.converter is an argv list of non-empty strings, never one shell string to split."
  }

  validation {
    condition     = contains(["", "ray"], var.export_grants.controller)
    error_message = "export_grants.controller must be ray (the controller with an export submitter; Iris has none yet) or empty."
  }

  validation {
    condition     = alltrue([for p in var.export_grants.allowed_prefixes : can(regex("^([a-z][a-z0-9+.-]*://[^/\\s]+/?|/)\\S*$", p)) && !strcontains(p, ",")])
    error_message = "export_grants.allowed_prefixes must be URIs (gs://bucket/prefix/, s3://..., hf://namespace/) or absolute paths, without commas."
  }

  validation {
    condition     = var.export_grants.throughput_bytes_per_second > 0 && var.export_grants.margin_seconds >= 0
    error_message = "export_grants.throughput_bytes_per_second must be above 0 and export_grants.margin_seconds 0 or more."
  }
}

variable "large_copy_image" {
  description = "Container image of the large-copy job (the rlcleanup package, as hub_upload_image). Empty: no job; every capture part is copied inline by capture-part."
  type        = string
  default     = ""
  validation {
    condition     = can(regex("^$|^[a-z0-9.-]+(:[0-9]+)?/\\S+$", var.large_copy_image))
    error_message = "large_copy_image must be empty or an image reference such as us-docker.pkg.dev/PROJECT/REPO/rlcleanup:TAG."
  }
}

variable "copy_job_threshold_bytes" {
  description = "A capture part planned to copy more than this (bytes) goes to the large-copy job (RLCLEANUP_COPY_JOB_THRESHOLD_BYTES), about one task per this many bytes; smaller parts are copied inline."
  type        = number
  default     = 53687091200 # 50 GiB: about half capture-part's 540 s at a server-side copy's ~200 MB/s

  validation {
    condition     = var.copy_job_threshold_bytes >= 0 && floor(var.copy_job_threshold_bytes) == var.copy_job_threshold_bytes
    error_message = "copy_job_threshold_bytes must be a whole number of bytes, 0 or more."
  }
}

variable "copy_job_limits" {
  description = "The large-copy job's limits: the most tasks one part is split into (RLCLEANUP_COPY_JOB_MAX_TASKS, Cloud Run allows 10000), how many copy at once, one task's timeout (each retry resumes where the last stopped; Cloud Run allows 7 days), retries of a failed task (the last attempt files its objects as not copied; Cloud Run allows 10), and a task's CPU and memory (server-side copies: the bytes never pass through it)."
  type = object({
    max_tasks       = number
    parallelism     = number
    timeout_seconds = number
    max_retries     = number
    cpu             = string
    memory          = string
  })
  default = { max_tasks = 16, parallelism = 8, timeout_seconds = 86400, max_retries = 3, cpu = "1", memory = "1Gi" }

  validation {
    condition = alltrue([
      var.copy_job_limits.max_tasks >= 1, var.copy_job_limits.max_tasks <= 10000,
      var.copy_job_limits.parallelism >= 1, var.copy_job_limits.parallelism <= var.copy_job_limits.max_tasks,
      var.copy_job_limits.timeout_seconds >= 600, var.copy_job_limits.timeout_seconds <= 604800,
      var.copy_job_limits.max_retries >= 0, var.copy_job_limits.max_retries <= 10,
    ])
    error_message = "copy_job_limits: max_tasks 1..10000, parallelism 1..max_tasks, timeout_seconds 600..604800, max_retries 0..10."
  }
}
