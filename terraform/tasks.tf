# The queue agent sessions run through. Task names are derived from what caused them, so
# Cloud Tasks itself refuses a duplicate; a failed delivery (non-2xx) is retried with backoff.
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

  depends_on = [google_project_service.enabled]
}
