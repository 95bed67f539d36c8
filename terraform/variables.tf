variable "project_id" {
  type        = string
  description = "Google Cloud project that hosts everything; billing must be enabled on it."
}

variable "region" {
  type        = string
  description = "Region of the functions, the Cloud Tasks queue and the Cloud Scheduler job."
  default     = "us-central1"
}

variable "name_prefix" {
  type        = string
  description = "Prefix of every resource name (functions, service accounts, secrets, bucket)."
  default     = "opagent"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{2,14}[a-z0-9]$", var.name_prefix))
    error_message = "name_prefix must be 4-16 characters of lower-case letters, digits and hyphens, starting with a letter."
  }
}

variable "operator_user_ids" {
  type        = list(string)
  description = "Slack user ids (U...) allowed to answer and approve the agent's questions."
  default     = []
}

variable "source_archive" {
  type        = string
  description = "Path of the function source zip built by `make package`; null means build/function-source.zip in the repo."
  default     = null
}

variable "runtime" {
  type        = string
  description = "Cloud Functions Python runtime."
  default     = "python312"

  validation {
    condition     = can(regex("^python3(1[2-9]|[2-9][0-9])$", var.runtime))
    error_message = "runtime must be python312 or newer."
  }
}

variable "log_level" {
  type        = string
  description = "Log level of the functions' JSON logs."
  default     = "INFO"

  validation {
    condition     = contains(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], var.log_level)
    error_message = "log_level must be DEBUG, INFO, WARNING, ERROR or CRITICAL."
  }
}

variable "gemini" {
  type = object({
    use_vertex_ai = optional(bool, true)
    location      = optional(string, "global")
  })
  description = "How agent_session reaches Gemini: Vertex AI with its own identity (location is the Vertex AI location), or, when use_vertex_ai is false, an API key kept in Secret Manager."
  default     = {}
}

variable "tasks" {
  type = object({
    queue_name                 = optional(string, "agent-sessions")
    dispatch_deadline_seconds  = optional(number, 900)
    max_attempts               = optional(number, 5)
    max_retry_duration_seconds = optional(number, 86400)
    min_backoff_seconds        = optional(number, 10)
    max_backoff_seconds        = optional(number, 600)
    max_doublings              = optional(number, 4)
    max_dispatches_per_second  = optional(number, 5)
    max_concurrent_dispatches  = optional(number, 20)
  })
  description = "The Cloud Tasks queue of agent sessions: its name (a deleted name is blocked for 7 days), how long a task may run (also agent_session's timeout), its retries and its rate limits."
  default     = {}

  validation {
    condition     = var.tasks.dispatch_deadline_seconds >= 15 && var.tasks.dispatch_deadline_seconds <= 1800
    error_message = "Cloud Tasks accepts a dispatch deadline of 15 to 1800 seconds for HTTP targets."
  }
}

variable "sweep" {
  type = object({
    schedule  = optional(string, "0 8 * * *")
    time_zone = optional(string, "Etc/UTC")
  })
  description = "When Cloud Scheduler runs the daily sweep (cron syntax, in time_zone)."
  default     = {}
}

variable "firestore" {
  type = object({
    database_id            = optional(string, "(default)")
    location_id            = optional(string)
    deletion_protection    = optional(bool, true)
    point_in_time_recovery = optional(bool, true)
  })
  description = "The Firestore database in native mode: its id, its location (null means the region), and whether it is protected from deletion."
  default     = {}
}

variable "event_ttl_hours" {
  type        = number
  description = "How long Slack event de-duplication records live before Firestore's TTL policy deletes them."
  default     = 72
}

variable "min_instances" {
  type        = map(number)
  description = "Warm instances per entry point, e.g. { slack_events = 1 } to keep cold starts away from Slack's 3-second limit (billed while idle)."
  default     = {}
}

variable "extra_environment" {
  type        = map(string)
  description = "More variables from shared/config.py (a model name, budgets) for every function; the ones Terraform manages win."
  default     = {}
}

variable "labels" {
  type        = map(string)
  description = "Labels added to every resource that takes labels."
  default     = {}
}
