# The functions, their source and build, and who may invoke them.

locals {
  source_archive = coalesce(var.source_archive, "${path.module}/../build/function-source.zip")

  # Who may call each function: invoker bindings go on the underlying Cloud Run service.
  invoker_members = {
    tasks     = "serviceAccount:${google_service_account.platform["tasks_invoker"].email}"
    scheduler = "serviceAccount:${google_service_account.platform["scheduler"].email}"
  }
  public_functions  = { for key, fn in local.functions : key => fn if fn.invoker == "public" }
  private_functions = { for key, fn in local.functions : key => fn if fn.invoker != "public" }
}

resource "google_storage_bucket" "source" {
  #checkov:skip=CKV_GCP_62:The bucket holds only the function source zips Terraform uploads (the repo's code, no data or secrets); Cloud Audit Logs record who changed it, and a second bucket for access logs would have no reader.
  name                        = "${var.project_id}-${var.name_prefix}-source"
  location                    = var.region
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = true

  versioning {
    enabled = true
  }

  # Source objects are named by content hash; old ones stay for rollback, overwritten versions go.
  lifecycle_rule {
    condition {
      days_since_noncurrent_time = 30
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.enabled]
}

# The object name carries the zip's SHA-256 (the zip is built reproducibly), so a code change
# is a new object and a redeploy, and an unchanged tree changes nothing.
resource "google_storage_bucket_object" "source" {
  name   = "function-source/${filesha256(local.source_archive)}.zip"
  bucket = google_storage_bucket.source.name
  source = local.source_archive
}

resource "google_artifact_registry_repository" "functions" {
  #checkov:skip=CKV_GCP_84:The images contain only the repo's source and public packages, no data or secrets; Google-managed encryption is enough, and a customer-managed key would add a KMS key ring that outlives a teardown.
  repository_id = "${var.name_prefix}-functions"
  location      = var.region
  format        = "DOCKER"
  description   = "Images Cloud Build makes from the function source."

  cleanup_policies {
    id     = "keep-recent"
    action = "KEEP"
    most_recent_versions {
      keep_count = 10
    }
  }

  cleanup_policies {
    id     = "delete-old"
    action = "DELETE"
    condition {
      older_than = "2592000s"
    }
  }

  depends_on = [google_project_service.enabled]
}

resource "google_cloudfunctions2_function" "this" {
  #checkov:skip=CKV_GCP_124:Slack calls slack_events from the internet; Cloud Tasks and Cloud Scheduler call agent_session and sweep on their cloudfunctions.net URL, which internal-only ingress does not admit. Only slack_events is public (signature-verified); the others need an OIDC token for their one invoker account, checked by Cloud Run and again by the code.
  for_each = local.functions

  name        = local.function_names[each.key]
  location    = var.region
  description = each.value.description

  build_config {
    runtime           = var.runtime
    entry_point       = each.key
    service_account   = google_service_account.platform["build"].id
    docker_repository = google_artifact_registry_repository.functions.id

    source {
      storage_source {
        bucket = google_storage_bucket.source.name
        object = google_storage_bucket_object.source.name
      }
    }
  }

  service_config {
    service_account_email            = google_service_account.function[each.key].email
    timeout_seconds                  = each.value.timeout
    available_memory                 = each.value.memory
    available_cpu                    = each.value.cpu
    max_instance_request_concurrency = each.value.concurrency
    min_instance_count               = lookup(var.min_instances, each.key, 0)
    max_instance_count               = each.value.max
    # Reachable from the internet: Slack for the public ones; Cloud Tasks and Cloud Scheduler
    # (with OIDC tokens that Cloud Run checks against the invoker bindings) for the others.
    ingress_settings               = "ALLOW_ALL"
    all_traffic_on_latest_revision = true

    environment_variables = merge(var.extra_environment, [for group in each.value.environment : local.environment_groups[group]]...)

    dynamic "secret_environment_variables" {
      for_each = toset(each.value.secrets)
      content {
        key        = secret_environment_variables.value
        project_id = var.project_id
        secret     = google_secret_manager_secret.this[secret_environment_variables.value].secret_id
        version    = "latest"
      }
    }
  }

  lifecycle {
    # agent_session's timeout is the dispatch deadline; the session must wrap up before either ends
    # (shared/config.py refuses SESSION_WALL_SECONDS >= TASKS_DISPATCH_DEADLINE_SECONDS at run time).
    precondition {
      condition     = var.session.wall_seconds < var.tasks.dispatch_deadline_seconds
      error_message = "session.wall_seconds must be below tasks.dispatch_deadline_seconds (agent_session's timeout), or every session would fail its configuration check."
    }
    postcondition {
      condition     = self.url == local.function_urls[each.key]
      error_message = "The function's URL is not the one TASKS_TARGET_URL and the Slack manifest were given (local.function_urls)."
    }
  }

  # The function's identity must be able to read its secrets, and the build must be able to run,
  # before the first revision starts.
  depends_on = [
    google_secret_manager_secret_iam_member.access,
    google_secret_manager_secret_version.placeholder,
    google_project_iam_member.build,
    google_project_iam_member.build_gcf_sources_reader,
    google_storage_bucket_iam_member.build_source_reader,
    google_artifact_registry_repository_iam_member.build_writer,
  ]
}

resource "google_cloud_run_service_iam_member" "public" {
  #checkov:skip=CKV_GCP_102:The Slack endpoints must be public: Slack cannot send Google identity tokens. Every request is verified with the Slack signing secret (slack-sdk SignatureVerifier, 5-minute window) before anything else happens.
  for_each = local.public_functions

  project  = var.project_id
  location = var.region
  service  = google_cloudfunctions2_function.this[each.key].service_config[0].service
  role     = "roles/run.invoker"
  member   = "allUsers"
}

resource "google_cloud_run_service_iam_member" "private" {
  for_each = local.private_functions

  project  = var.project_id
  location = var.region
  service  = google_cloudfunctions2_function.this[each.key].service_config[0].service
  role     = "roles/run.invoker"
  member   = local.invoker_members[each.value.invoker]
}
