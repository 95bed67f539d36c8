# The Slack bot token and signing secret (and a Gemini API key when Vertex AI is not used).
# Terraform creates each secret with a placeholder version so the functions can deploy; the
# real values go in with `gcloud secrets versions add` and never pass through Terraform state.
resource "google_secret_manager_secret" "this" {
  for_each = local.secrets

  secret_id = each.value

  replication {
    auto {}
  }

  depends_on = [google_project_service.enabled]
}

resource "google_secret_manager_secret_version" "placeholder" {
  for_each = local.secrets

  secret      = google_secret_manager_secret.this[each.key].id
  secret_data = "unset: add the real value with gcloud secrets versions add ${each.value}"

  # The real value is added outside Terraform; leave it and this placeholder alone afterwards.
  lifecycle {
    ignore_changes = [secret_data, enabled]
  }
}
