# Firestore in native mode: the only store. Every composite index a query in shared/state/ needs
# is declared here (shared/state/indexes.py's INDEXES; tests/deploy checks the two agree).

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

# The composite indexes, by name: a collection and its fields, every field ascending, in order.
locals {
  firestore_indexes = {
    # The sweep: open questions by age.
    questions_by_age = { collection = "questions", fields = ["status", "asked_at"] }
    # The sweep: pending approvals by age.
    approvals_by_age = { collection = "approvals", fields = ["status", "asked_at"] }
    # The sweep: sessions in a status (queued too long, or paused), oldest first.
    sessions_by_age = { collection = "sessions", fields = ["status", "updated_at"] }
    # The sweep: silent exits not yet narrated or escalated, oldest first.
    silent_exits_to_follow_up = { collection = "sessions", fields = ["status", "followed_up", "updated_at"] }
    # The sweep: running sessions whose lease expired long ago.
    sessions_by_lease = { collection = "sessions", fields = ["status", "lease_until"] }
    # Messages during a running session: the running session of a thread.
    sessions_in_thread = { collection = "sessions", fields = ["channel", "thread_ts", "status"] }
  }
}

resource "google_firestore_index" "composite" {
  for_each = local.firestore_indexes

  database    = google_firestore_database.main.name
  collection  = each.value.collection
  query_scope = "COLLECTION"

  dynamic "fields" {
    for_each = each.value.fields
    content {
      field_path = fields.value
      order      = "ASCENDING"
    }
  }
}
