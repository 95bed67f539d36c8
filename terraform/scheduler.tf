# Cloud Scheduler calls sweep with an OIDC token for its own service account: the daily sweep, and every few
# minutes the rescue (sessions left queued or whose worker died are queued again, so nothing waits for the daily
# sweep). One job per entry; they differ in when they run, what they ask for and how they retry.
locals {
  sweep_jobs = {
    sweep = {
      description = "Reminds about old questions, abandons dead ones, narrates silent sessions."
      schedule    = var.sweep.schedule
      body        = "{}"
      retry_count = 2
      min_backoff = "60s"
      max_backoff = "600s"
    }
    rescue = {
      description = "Queues again sessions left queued for over a minute and running sessions whose worker died."
      schedule    = var.sweep.rescue_schedule
      body        = jsonencode({ job = "rescue" })
      retry_count = 0 # the next run comes in a few minutes
      min_backoff = null
      max_backoff = null
    }
  }
}

resource "google_cloud_scheduler_job" "this" {
  for_each = local.sweep_jobs

  name             = "${var.name_prefix}-${each.key}"
  description      = each.value.description
  region           = var.region
  schedule         = each.value.schedule
  time_zone        = var.sweep.time_zone
  attempt_deadline = "${local.functions.sweep.timeout}s"

  retry_config {
    retry_count          = each.value.retry_count
    min_backoff_duration = each.value.min_backoff
    max_backoff_duration = each.value.max_backoff
  }

  http_target {
    http_method = "POST"
    uri         = google_cloudfunctions2_function.this["sweep"].url
    body        = base64encode(each.value.body)
    headers = {
      "Content-Type" = "application/json"
    }

    oidc_token {
      service_account_email = google_service_account.platform["scheduler"].email
      audience              = local.function_urls["sweep"]
    }
  }

  depends_on = [google_cloud_run_service_iam_member.private]
}
