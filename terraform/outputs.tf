output "events_url" {
  description = "Slack Events API request URL (the manifest's event_subscriptions.request_url)."
  value       = google_cloudfunctions2_function.this["slack_events"].url
}

output "interactivity_url" {
  description = "Slack interactivity request URL: its own function when there is one, else slack_events."
  value       = try(google_cloudfunctions2_function.this["slack_interactivity"].url, google_cloudfunctions2_function.this["slack_events"].url)
}

output "function_names" {
  description = "Cloud Functions (and their Cloud Run services) by entry point."
  value       = { for key, fn in google_cloudfunctions2_function.this : key => fn.name }
}

output "region" {
  description = "Region of the functions, for the gcloud commands in the README."
  value       = var.region
}

output "secret_ids" {
  description = "Secret Manager secret ids by environment variable: where `gcloud secrets versions add` puts each value."
  value       = { for name, secret in google_secret_manager_secret.this : name => secret.secret_id }
}

output "project_id" {
  description = "The project everything was deployed to, for the gcloud commands in the README."
  value       = var.project_id
}

output "assistant_prompts" {
  description = "The assistant pane's suggested prompts, for the manifest `make slack-manifest` writes (features.assistant_view)."
  value       = var.assistant_prompts
}
