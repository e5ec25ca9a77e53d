# Pure derivations from the variables: no resource or data references here, so tests/unit/test_infra.py can
# evaluate every map below with `terraform console` offline (no provider needed).

locals {
  grants_topic = "authority-grants"

  # The event sources' endpoints in the topology (modules/rlcleanup/events.tf; tests/unit/test_infra.py checks they exist),
  # the function that reads the notification webhook's secret (notify.tf), and the one that runs the Hub audit.
  event_sources = {
    storage_events = "storage-events"
    sweep          = "sweep"
    sweep_function = "sweep"
    k8s_job_events = "k8s-job-events"
    job_events     = "job-events"
    notify         = "notify"
    hub_audit      = "select-candidate" # runs the Hub audit at wrap-up; reads its read-only token (hub.tf)
  }

  # The work handed to Cloud Run jobs (copy_job.tf, docs/runtime.md "Inline or job"): the function that starts the
  # large-copy job, and the topic the job publishes the finished part's message on (capture-part's trigger).
  job_hand_offs = {
    large_copy_starter = "capture-part"
    large_copy_topic   = "capture-parts"
    # Where a verified publish / hand-off / reclaim / restore is announced (topology.yaml: apply-grant's `announce`
    # route): the Hub upload job (hub.tf) and var.restore_operators publish there too.
    model_events_topic = "model-events"
  }

  # What each function touches beyond Firestore and its own `publishes` topics. Keys must equal the topology's
  # functions (tests/unit/test_infra.py checks this; plan fails on a missing key, see local.access). Least privilege:
  #   read_runs          roles/storage.objectViewer on every run bucket
  #   delete_in_runs     roles/storage.objectUser on every run bucket (reclaim deletes sources) — apply-grant only
  #   read_evidence      roles/storage.objectViewer on the preserved-evidence bucket
  #   write_evidence     roles/storage.objectCreator on the preserved-evidence bucket (write-once: no overwrite/delete)
  #   write_destinations objectCreator + objectViewer + bucket metadata/IAM read (visibility check) on the
  #                      buckets of var.allowed_destination_prefixes (hand-off / publish)
  # What each function's code touches (steps write derived evidence: metrics, listings, reports).
  # retry-waiting-grants applies grants that arrived early, so it needs exactly what apply-grant needs.
  function_access = {
    "on-job-event"             = { read_runs = true, delete_in_runs = false, read_evidence = false, write_evidence = false, write_destinations = false }
    "establish-terminal-state" = { read_runs = true, delete_in_runs = false, read_evidence = true, write_evidence = true, write_destinations = false }
    "scan-log-part"            = { read_runs = true, delete_in_runs = false, read_evidence = true, write_evidence = true, write_destinations = false }
    "plan-capture"             = { read_runs = true, delete_in_runs = false, read_evidence = true, write_evidence = true, write_destinations = false }
    "capture-part"             = { read_runs = true, delete_in_runs = false, read_evidence = true, write_evidence = true, write_destinations = false }
    "validate-candidate"       = { read_runs = true, delete_in_runs = false, read_evidence = true, write_evidence = false, write_destinations = false }
    "select-candidate"         = { read_runs = true, delete_in_runs = false, read_evidence = true, write_evidence = true, write_destinations = false }
    "capture-pre-cancel"       = { read_runs = true, delete_in_runs = false, read_evidence = true, write_evidence = true, write_destinations = false }
    "apply-grant"              = { read_runs = true, delete_in_runs = true, read_evidence = true, write_evidence = true, write_destinations = true }
    "retry-waiting-grants"     = { read_runs = true, delete_in_runs = true, read_evidence = true, write_evidence = true, write_destinations = true }
    "on-storage-event"         = { read_runs = true, delete_in_runs = false, read_evidence = false, write_evidence = false, write_destinations = false }
    "sweep"                    = { read_runs = true, delete_in_runs = false, read_evidence = false, write_evidence = false, write_destinations = false }
    "notify"                   = { read_runs = false, delete_in_runs = false, read_evidence = false, write_evidence = false, write_destinations = false }
    "on-k8s-log-entry"         = { read_runs = false, delete_in_runs = false, read_evidence = false, write_evidence = false, write_destinations = false }
    # completes a dead-lettered member as failed and runs its fan-ins (the capture manifest), or fails the run
    "record-dead-letter" = { read_runs = true, delete_in_runs = false, read_evidence = true, write_evidence = true, write_destinations = false }
  }

  # Indexing by every topology function makes plan fail when a function has no access entry; iterating over
  # this map (not function_access) makes an entry for a function that no longer exists a no-op.
  access = { for fn in keys(var.topology_functions) : fn => local.function_access[fn] }

  # Dead-letter topics and their pull subscriptions, keyed by topic / subscription name.
  dead_letter_topics = { for fn, f in var.topology_functions : f.dead_letter_topic => fn }
  # Functions with a trigger topic get a push subscription on it; the recorder is pushed the others' dead letters.
  triggered_functions = { for fn, f in var.topology_functions : fn => f if f.trigger != null }
  dead_letter_records = {
    for fn, f in var.topology_functions : f.dead_letter_record_subscription => { function = fn, topic = f.dead_letter_topic }
    if f.dead_letter_record_subscription != null
  }
  dead_letter_subscriptions = {
    for fn, f in var.topology_functions : f.dead_letter_subscription => { function = fn, topic = f.dead_letter_topic }
  }

  # A sink (an output topic's pull subscription) that declares `dead_letter` parks what its consumer keeps failing
  # on its own "<subscription>-dlq" topic, read on "<subscription>-dlq-sub" (model-events-sub: docs/events-out.md).
  sink_dead_letters = {
    for sub, s in var.topology_sinks : sub => { topic = s.dead_letter_topic, subscription = s.dead_letter_subscription }
    if s.dead_letter_topic != null
  }

  # Service account IDs (6-30 chars): "<prefix>-<kind>-<function, truncated>-<4 hex of sha1(function)>".
  # kind "fn" = the function's runtime identity, "iv" = the push subscription's OIDC (invoker) identity.
  runtime_sa_ids = {
    for fn in keys(var.topology_functions) :
    fn => format("%s-%s", trimsuffix(substr("${var.name_prefix}-fn-${fn}", 0, 25), "-"), substr(sha1(fn), 0, 4))
  }
  invoker_sa_ids = {
    for fn in keys(var.topology_functions) :
    fn => format("%s-%s", trimsuffix(substr("${var.name_prefix}-iv-${fn}", 0, 25), "-"), substr(sha1(fn), 0, 4))
  }

  # Topic-scoped roles/pubsub.publisher: each function on exactly the topics its `publishes` names ("<fn>/<topic>"),
  # split into project topics and its own dead-letter topic (it parks a copy of each permanent error there itself:
  # infra/README.md "Dead letters"). authority-grants is excluded by construction (and rejected by the
  # topology_functions validation); a dead-letter topic of another function gets no binding at all.
  function_publishers = merge([
    for fn, f in var.topology_functions : {
      for t in f.publishes : "${fn}/${t}" => { function = fn, topic = t }
      if t != local.grants_topic && !contains(keys(local.dead_letter_topics), t)
    }
  ]...)
  function_dead_letter_publishers = {
    for fn, f in var.topology_functions : fn => { topic = f.dead_letter_topic } if contains(f.publishes, f.dead_letter_topic)
  }

  # hf:// prefixes (Hub hand-off, hub.tf) carry no bucket IAM: only gs:// prefixes name destination buckets.
  destination_buckets = toset([for p in var.allowed_destination_prefixes : regex("^gs://([^/]+)/", p)[0] if startswith(p, "gs://")])

  # S3 endpoint secrets (s3.tf): every function that reads runs gets each endpoint's secret ("<fn>/<endpoint>").
  s3_readers = sort([for fn, a in local.access : fn if a.read_runs])
  s3_secret_readers = merge([
    for fn in local.s3_readers : { for ep in keys(var.s3_endpoints) : "${fn}/${ep}" => { function = fn, endpoint = ep } }
  ]...)

  # The functions that apply grants (and so may hand off to the Hub), and who may read the HF token (hub.tf).
  grant_appliers = sort([for fn, a in local.access : fn if a.write_destinations])

  # Bucket-scoped storage bindings ("<fn>/<role>/<bucket>" => binding).
  storage_bindings = merge(
    merge([
      for fn, a in local.access : {
        for b in var.run_buckets : "${fn}/objectViewer/${b}" => { function = fn, bucket = b, role = "roles/storage.objectViewer" }
      } if a.read_runs && !a.delete_in_runs
    ]...),
    merge([
      for fn, a in local.access : {
        for b in var.run_buckets : "${fn}/objectUser/${b}" => { function = fn, bucket = b, role = "roles/storage.objectUser" }
      } if a.delete_in_runs
    ]...),
    merge([
      for fn, a in local.access : {
        for b in local.destination_buckets : "${fn}/objectCreator/${b}" => { function = fn, bucket = b, role = "roles/storage.objectCreator" }
      } if a.write_destinations
    ]...),
    merge([
      for fn, a in local.access : {
        for b in local.destination_buckets : "${fn}/objectViewer/${b}" => { function = fn, bucket = b, role = "roles/storage.objectViewer" }
      } if a.write_destinations
    ]...),
  )

  # Bindings on the preserved-evidence bucket (created here, so kept apart from the external buckets above).
  evidence_bindings = merge(
    { for fn, a in local.access : "${fn}/objectViewer" => { function = fn, role = "roles/storage.objectViewer" } if a.read_evidence },
    { for fn, a in local.access : "${fn}/objectCreator" => { function = fn, role = "roles/storage.objectCreator" } if a.write_evidence },
  )

  # Functions that read destination bucket metadata and IAM to verify the actual visibility before a hand-off.
  destination_inspectors = merge([
    for fn, a in local.access : {
      for b in local.destination_buckets : "${fn}/${b}" => { function = fn, bucket = b }
    } if a.write_destinations
  ]...)
}

# The quarantine's lifecycle rule (output quarantine_lifecycle_rule): GCS's bucket lifecycle JSON, deleting only
# objects under the quarantine prefix quarantine_days after the reclaim moved them there. A local of variables
# only, so the test evaluates it with `terraform console`. No bucket this module owns holds quarantined objects
# (a reclaim moves an object within its own run bucket; the evidence bucket is never reclaimed from).
locals {
  quarantine_lifecycle_rule = {
    rule = [{
      action    = { type = "Delete" }
      condition = { age = var.quarantine_days, matchesPrefix = ["${var.quarantine_prefix}/"] }
    }]
  }
}
