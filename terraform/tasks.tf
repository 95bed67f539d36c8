# The queue agent sessions run through. Task names are derived from what caused them, so
# Cloud Tasks itself refuses a duplicate; a failed delivery (non-2xx) is retried with backoff.
#
# How the retries fit the product: a redelivered task takes the session over and resumes it from
# its stored transcript (shared/worker.py, shared/store.py claim_session). agent_session answers
# 500 to ask for a retry only on its first two crashed attempts and fails the session on the third
# (worker.GIVE_UP_AFTER_ATTEMPTS), so max_attempts is at least 3; the spare attempts only follow
# crashes that never reached the code (timeout, out of memory). Cloud Tasks stops once both
# max_attempts and max_retry_duration are reached, so the duration is short and max_attempts decides.
# A session whose last attempt died that way stays `running`; the sweep narrates it once its lease
# has expired sweep.stale_lease_minutes ago, which is longer than any wait between two attempts.
resource "google_cloud_tasks_queue" "sessions" {
  name     = var.tasks.queue_name
  location = var.region

  rate_limits {
    max_dispatches_per_second = var.tasks.max_dispatches_per_second
    max_concurrent_dispatches = var.tasks.max_concurrent_dispatches
  }

  retry_config {
    max_attempts       = var.tasks.max_attempts
    max_retry_duration = "${var.tasks.max_retry_duration_seconds}s"
    min_backoff        = "${var.tasks.min_backoff_seconds}s"
    max_backoff        = "${var.tasks.max_backoff_seconds}s"
    max_doublings      = var.tasks.max_doublings
  }

  stackdriver_logging_config {
    sampling_ratio = 1.0
  }

  lifecycle {
    precondition {
      condition     = var.tasks.dispatch_deadline_seconds + var.tasks.max_backoff_seconds < var.sweep.stale_lease_minutes * 60
      error_message = "The sweep takes a running session for dead once its lease expired sweep.stale_lease_minutes ago; Cloud Tasks may wait up to tasks.dispatch_deadline_seconds + tasks.max_backoff_seconds before the next attempt. Keep that below stale_lease_minutes, or the sweep narrates sessions that are about to be retried."
    }
  }

  depends_on = [google_project_service.enabled]
}
