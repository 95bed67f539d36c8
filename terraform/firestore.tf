# Firestore in native mode: the only store. Every composite index a query in shared/store.py
# needs is declared here (store.INDEXES; tests/deploy checks the two agree).

resource "google_firestore_database" "main" {
  name                              = var.firestore.database_id
  location_id                       = coalesce(var.firestore.location_id, var.region)
  type                              = "FIRESTORE_NATIVE"
  point_in_time_recovery_enablement = var.firestore.point_in_time_recovery ? "POINT_IN_TIME_RECOVERY_ENABLED" : "POINT_IN_TIME_RECOVERY_DISABLED"
  delete_protection_state           = var.firestore.deletion_protection ? "DELETE_PROTECTION_ENABLED" : "DELETE_PROTECTION_DISABLED"
  # `terraform destroy` deletes the database once deletion_protection is false (see the README).
  deletion_policy = "DELETE"

  depends_on = [google_project_service.enabled]
}

# Slack de-duplication records delete themselves: TTL on events.expires_at (store.EVENT_EXPIRES_FIELD).
resource "google_firestore_field" "event_ttl" {
  database   = google_firestore_database.main.name
  collection = "events"
  field      = "expires_at"

  ttl_config {}

  # Nothing queries by expiry; no single-field index on a steadily increasing timestamp.
  index_config {}
}

# Rate-limit counters (an hour's starts; a person's or channel's running sessions) expire once unused.
resource "google_firestore_field" "limits_ttl" {
  database   = google_firestore_database.main.name
  collection = "limits"
  field      = "expires_at"

  ttl_config {}

  index_config {}
}

# The sweep: open questions by age.
resource "google_firestore_index" "questions_by_age" {
  database    = google_firestore_database.main.name
  collection  = "questions"
  query_scope = "COLLECTION"

  fields {
    field_path = "status"
    order      = "ASCENDING"
  }
  fields {
    field_path = "asked_at"
    order      = "ASCENDING"
  }
}

# The sweep: sessions in a status, oldest first.
# The sweep: pending approvals by age.
resource "google_firestore_index" "approvals_by_age" {
  database    = google_firestore_database.main.name
  collection  = "approvals"
  query_scope = "COLLECTION"

  fields {
    field_path = "status"
    order      = "ASCENDING"
  }
  fields {
    field_path = "asked_at"
    order      = "ASCENDING"
  }
}

resource "google_firestore_index" "sessions_by_age" {
  database    = google_firestore_database.main.name
  collection  = "sessions"
  query_scope = "COLLECTION"

  fields {
    field_path = "status"
    order      = "ASCENDING"
  }
  fields {
    field_path = "updated_at"
    order      = "ASCENDING"
  }
}

# The sweep: delegated children paused (on their question to their parent), oldest first.
resource "google_firestore_index" "paused_children" {
  database    = google_firestore_database.main.name
  collection  = "sessions"
  query_scope = "COLLECTION"

  fields {
    field_path = "status"
    order      = "ASCENDING"
  }
  fields {
    field_path = "kind"
    order      = "ASCENDING"
  }
  fields {
    field_path = "updated_at"
    order      = "ASCENDING"
  }
}

# The sweep: silent exits not yet narrated or escalated, oldest first.
resource "google_firestore_index" "silent_exits_to_follow_up" {
  database    = google_firestore_database.main.name
  collection  = "sessions"
  query_scope = "COLLECTION"

  fields {
    field_path = "status"
    order      = "ASCENDING"
  }
  fields {
    field_path = "followed_up"
    order      = "ASCENDING"
  }
  fields {
    field_path = "updated_at"
    order      = "ASCENDING"
  }
}

# The sweep: running sessions whose lease expired long ago.
resource "google_firestore_index" "sessions_by_lease" {
  database    = google_firestore_database.main.name
  collection  = "sessions"
  query_scope = "COLLECTION"

  fields {
    field_path = "status"
    order      = "ASCENDING"
  }
  fields {
    field_path = "lease_until"
    order      = "ASCENDING"
  }
}

# Messages during a running session: the running session of a thread.
resource "google_firestore_index" "sessions_in_thread" {
  database    = google_firestore_database.main.name
  collection  = "sessions"
  query_scope = "COLLECTION"

  fields {
    field_path = "channel"
    order      = "ASCENDING"
  }
  fields {
    field_path = "thread_ts"
    order      = "ASCENDING"
  }
  fields {
    field_path = "status"
    order      = "ASCENDING"
  }
}
