# The daily sweep: Cloud Scheduler calls sweep with an OIDC token for its own service account.
resource "google_cloud_scheduler_job" "sweep" {
  name             = "${var.name_prefix}-sweep"
  description      = "Reminds about old questions, abandons dead ones, narrates silent sessions."
  region           = var.region
  schedule         = var.sweep.schedule
  time_zone        = var.sweep.time_zone
  attempt_deadline = "${local.functions.sweep.timeout}s"

  retry_config {
    retry_count          = 2
    min_backoff_duration = "60s"
    max_backoff_duration = "600s"
  }

  http_target {
    http_method = "POST"
    uri         = google_cloudfunctions2_function.this["sweep"].url
    body        = base64encode("{}")
    headers = {
      "Content-Type" = "application/json"
    }

    oidc_token {
      service_account_email = google_service_account.scheduler.email
      audience              = local.function_urls["sweep"]
    }
  }

  depends_on = [google_cloud_run_service_iam_member.private]
}

# Every few minutes: sessions left queued or whose worker died are queued again, so nothing waits for the daily sweep.
resource "google_cloud_scheduler_job" "rescue" {
  name             = "${var.name_prefix}-rescue"
  description      = "Queues again sessions left queued for over a minute and running sessions whose worker died."
  region           = var.region
  schedule         = var.sweep.rescue_schedule
  time_zone        = var.sweep.time_zone
  attempt_deadline = "${local.functions.sweep.timeout}s"

  retry_config {
    retry_count = 0 # the next run comes in a few minutes
  }

  http_target {
    http_method = "POST"
    uri         = google_cloudfunctions2_function.this["sweep"].url
    body        = base64encode(jsonencode({ job = "rescue" }))
    headers = {
      "Content-Type" = "application/json"
    }

    oidc_token {
      service_account_email = google_service_account.scheduler.email
      audience              = local.function_urls["sweep"]
    }
  }

  depends_on = [google_cloud_run_service_iam_member.private]
}
