terraform {
  # optional() attribute defaults need 1.3; check blocks and postconditions need 1.5.
  required_version = ">= 1.5"

  required_providers {
    # The schema check in tests/deploy validates every resource against this provider's 8.7 schema.
    google = {
      source  = "hashicorp/google"
      version = "~> 8.7"
    }
  }
}

provider "google" {
  project               = var.project_id
  region                = var.region
  default_labels        = local.labels
  user_project_override = true
  billing_project       = var.project_id
}
