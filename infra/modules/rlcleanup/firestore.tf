# The records database (completion records, idempotency claims, grants, approver keys).

resource "google_firestore_database" "records" {
  name                              = "(default)"
  location_id                       = coalesce(var.firestore_location, var.region)
  type                              = "FIRESTORE_NATIVE"
  concurrency_mode                  = "PESSIMISTIC"
  point_in_time_recovery_enablement = "POINT_IN_TIME_RECOVERY_ENABLED"
  delete_protection_state           = "DELETE_PROTECTION_ENABLED"
  deletion_policy                   = "ABANDON"

  depends_on = [google_project_service.enabled]
}

# Composite indexes for the console queries docs/firestore-console.md lists (one field filtered, newest run first
# by ended_at). Their single source is rlcleanup/adapters/firestore_queries.py; tests/unit/test_infra.py checks
# that every query there has its index here, and that nothing else is declared.

resource "google_firestore_index" "runs_by_status" {
  database    = google_firestore_database.records.name
  collection  = "runs"
  query_scope = "COLLECTION"

  fields {
    field_path = "status"
    order      = "ASCENDING"
  }
  fields {
    field_path = "ended_at"
    order      = "DESCENDING"
  }
}

resource "google_firestore_index" "runs_by_classification" {
  database    = google_firestore_database.records.name
  collection  = "runs"
  query_scope = "COLLECTION"

  fields {
    field_path = "classification.kind"
    order      = "ASCENDING"
  }
  fields {
    field_path = "ended_at"
    order      = "DESCENDING"
  }
}

resource "google_firestore_index" "runs_by_problem_code" {
  database    = google_firestore_database.records.name
  collection  = "runs"
  query_scope = "COLLECTION"

  fields {
    field_path   = "problem_codes"
    array_config = "CONTAINS"
  }
  fields {
    field_path = "ended_at"
    order      = "DESCENDING"
  }
}

resource "google_firestore_index" "runs_by_error_code" {
  database    = google_firestore_database.records.name
  collection  = "runs"
  query_scope = "COLLECTION"

  fields {
    field_path   = "error_codes"
    array_config = "CONTAINS"
  }
  fields {
    field_path = "ended_at"
    order      = "DESCENDING"
  }
}

# Learning across runs (docs/failures.md): the console's failure-class filter, and the lookups of earlier runs
# with the same signature and of an experiment's later runs (FirestoreRunRecords.runs_where).
resource "google_firestore_index" "runs_by_failure_class" {
  database    = google_firestore_database.records.name
  collection  = "runs"
  query_scope = "COLLECTION"

  fields {
    field_path = "failure_class"
    order      = "ASCENDING"
  }
  fields {
    field_path = "ended_at"
    order      = "DESCENDING"
  }
}

resource "google_firestore_index" "runs_by_signature" {
  database    = google_firestore_database.records.name
  collection  = "runs"
  query_scope = "COLLECTION"

  fields {
    field_path = "signature"
    order      = "ASCENDING"
  }
  fields {
    field_path = "ended_at"
    order      = "DESCENDING"
  }
}

resource "google_firestore_index" "runs_by_experiment" {
  database    = google_firestore_database.records.name
  collection  = "runs"
  query_scope = "COLLECTION"

  fields {
    field_path = "experiment"
    order      = "ASCENDING"
  }
  fields {
    field_path = "ended_at"
    order      = "DESCENDING"
  }
}

# The fan-ins' query over a run's claims: state == "done" and a key range (ports/records.py done_count/results).
resource "google_firestore_index" "steps_done_by_key" {
  database    = google_firestore_database.records.name
  collection  = "steps"
  query_scope = "COLLECTION"

  fields {
    field_path = "state"
    order      = "ASCENDING"
  }
  fields {
    field_path = "key"
    order      = "ASCENDING"
  }
}
