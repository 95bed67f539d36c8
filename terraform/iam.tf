# Identities, one per function, each with only what its function does.

resource "google_service_account" "function" {
  for_each = local.functions

  account_id   = "${var.name_prefix}-${each.value.short_name}"
  display_name = "${local.function_names[each.key]} function"
  description  = "Runtime identity of the ${each.key} function."

  depends_on = [google_project_service.enabled]
}

# The identities Google's services act as for the product: Cloud Tasks and Cloud Scheduler sign their OIDC tokens to
# agent_session and sweep as theirs; Cloud Build builds the function images as its own instead of a default one.
locals {
  platform_accounts = {
    tasks_invoker = {
      account_id   = "tasks"
      display_name = "Cloud Tasks invoker"
      description  = "Identity in the OIDC tokens Cloud Tasks sends to agent_session."
    }
    scheduler = {
      account_id   = "scheduler"
      display_name = "Cloud Scheduler invoker"
      description  = "Identity in the OIDC tokens Cloud Scheduler sends to sweep."
    }
    build = {
      account_id   = "build"
      display_name = "function builds"
      description  = "Identity Cloud Build uses to build the function images."
    }
  }
}

resource "google_service_account" "platform" {
  for_each = local.platform_accounts

  account_id   = "${var.name_prefix}-${each.value.account_id}"
  display_name = "${var.name_prefix} ${each.value.display_name}"
  description  = each.value.description

  depends_on = [google_project_service.enabled]
}

# Every function reads and writes the product's state, and only in the product's own database (an IAM condition).
resource "google_project_iam_member" "firestore_user" {
  for_each = local.functions

  project = var.project_id
  role    = "roles/datastore.user"
  member  = "serviceAccount:${google_service_account.function[each.key].email}"

  condition {
    title       = "product-database-only"
    description = "Only the product's Firestore database."
    expression  = "resource.name == \"projects/${var.project_id}/databases/${google_firestore_database.main.name}\""
  }
}

# Only where the model is called, and only when it is called through Vertex AI.
resource "google_project_iam_member" "vertex_ai_user" {
  for_each = { for key, fn in local.functions : key => fn if fn.calls_model && var.gemini.use_vertex_ai }

  project = var.project_id
  role    = "roles/aiplatform.user"
  member  = "serviceAccount:${google_service_account.function[each.key].email}"
}

# Every function enqueues: the ingress starts sessions, sessions continue themselves, the sweep
# enqueues narrations. Enqueuing a task with an OIDC token acts as the tasks invoker account.
resource "google_cloud_tasks_queue_iam_member" "enqueuer" {
  for_each = local.functions

  project  = var.project_id
  location = var.region
  name     = google_cloud_tasks_queue.sessions.name
  role     = "roles/cloudtasks.enqueuer"
  member   = "serviceAccount:${google_service_account.function[each.key].email}"
}

resource "google_service_account_iam_member" "tasks_act_as" {
  for_each = local.functions

  service_account_id = google_service_account.platform["tasks_invoker"].name
  role               = "roles/iam.serviceAccountUser"
  member             = "serviceAccount:${google_service_account.function[each.key].email}"
}

# Each function reads only the secrets it is given.
resource "google_secret_manager_secret_iam_member" "access" {
  for_each = merge([
    for key, fn in local.functions : {
      for name in fn.secrets : "${key}/${name}" => { function = key, secret = name }
    }
  ]...)

  project   = var.project_id
  secret_id = google_secret_manager_secret.this[each.value.secret].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.function[each.value.function].email}"
}

# The build account: write build logs, read the source zip, push the image.
resource "google_project_iam_member" "build" {
  project = var.project_id
  role    = "roles/logging.logWriter"
  member  = "serviceAccount:${google_service_account.platform["build"].email}"
}

# Cloud Functions copies the source zip into its own gcf-v2-sources-<project number>-<region> bucket
# (created on the first deploy) and the build fetches it from there, so reading our bucket is not
# enough. Object reads are granted on that bucket only, by name, through an IAM condition.
resource "google_project_iam_member" "build_gcf_sources_reader" {
  project = var.project_id
  role    = "roles/storage.objectViewer"
  member  = "serviceAccount:${google_service_account.platform["build"].email}"

  condition {
    title       = "gcf-v2-sources only"
    description = "The bucket Cloud Functions copies function sources into before a build."
    expression  = "resource.name.startsWith(\"projects/_/buckets/gcf-v2-sources-\")"
  }
}

resource "google_storage_bucket_iam_member" "build_source_reader" {
  bucket = google_storage_bucket.source.name
  role   = "roles/storage.objectViewer"
  member = "serviceAccount:${google_service_account.platform["build"].email}"
}

resource "google_artifact_registry_repository_iam_member" "build_writer" {
  project    = var.project_id
  location   = var.region
  repository = google_artifact_registry_repository.functions.name
  role       = "roles/artifactregistry.writer"
  member     = "serviceAccount:${google_service_account.platform["build"].email}"
}
