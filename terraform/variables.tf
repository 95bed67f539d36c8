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
  description = "Slack user ids (U...) allowed to answer and approve the agent's questions (OPERATOR_USER_IDS)."
  default     = []

  validation {
    condition     = alltrue([for id in var.operator_user_ids : can(regex("^[UW][A-Z0-9]{2,}$", id))])
    error_message = "operator_user_ids must be Slack member ids such as U0123456789 (profile -> ... -> Copy member ID)."
  }
}

variable "operator_channel" {
  type        = string
  description = "Slack channel id (C...) where operator alerts also go, besides the thread (OPERATOR_CHANNEL); empty: only the thread. Invite the bot there."
  default     = ""

  validation {
    condition     = can(regex("^([CG][A-Z0-9]{2,})?$", var.operator_channel))
    error_message = "operator_channel must be empty or a Slack channel id such as C0123456789."
  }
}

variable "allow_requester_answers" {
  type        = bool
  description = "Let the person who started a session answer its questions too, besides the operators (ALLOW_REQUESTER_ANSWERS)."
  default     = false
}

variable "allow_requester_approvals" {
  type        = bool
  description = "Let the person who started a session approve or deny its risky calls too, besides the operators (ALLOW_REQUESTER_APPROVALS)."
  default     = false
}

variable "assistant_prompts" {
  type = list(object({
    message = string
    title   = string
  }))
  description = "Suggested prompts shown when someone opens the app in Slack's assistant pane, at most 4 (ASSISTANT_PROMPTS; `make slack-manifest` writes them into the manifest too); [] shows none."
  default = [
    { message = "What can you do, and which tools can you use?", title = "What can you do?" },
    { message = "Fetch https://www.example.com and summarise it in three bullet points.", title = "Summarise a page" },
    { message = "Help me plan a change: ask me what you need to know first.", title = "Plan a change" },
  ]

  validation {
    condition     = length(var.assistant_prompts) <= 4 && alltrue([for p in var.assistant_prompts : trimspace(p.title) != "" && trimspace(p.message) != ""])
    error_message = "assistant_prompts holds at most 4 prompts (Slack shows no more), each with a non-empty title and message."
  }
}

variable "tool_tiers" {
  # any: a value is a tier (a string) or a rule (an object), which no single Terraform type holds.
  type        = any
  description = "Tool name (or glob, e.g. \"mcp.tickets.*\") to a tier (safe, approve or deny) or a rule { tier, approvers, approvals, when, otherwise } (README, \"Who may approve\"); wins over the tool's own tier (TOOL_TIERS). agent_session refuses to start with a bad rule, naming it."
  default     = {}

  validation {
    condition     = alltrue([for name, rule in var.tool_tiers : contains(["safe", "approve", "deny"], try(rule.tier, rule))])
    error_message = "tool_tiers: every value is a tier (safe, approve or deny) or a rule object whose tier is one (the values shared/config.py accepts)."
  }
}

variable "mcp_servers" {
  type = map(object({
    url             = string
    secret          = optional(bool, false) # a bearer token, from Secret Manager secret <name_prefix>-mcp-<name>
    include         = optional(list(string))
    exclude         = optional(list(string), [])
    timeout_seconds = optional(number, 30)
  }))
  description = "MCP servers (streamable HTTP) whose tools agent_session may use as mcp.<name>.<tool>, by name (MCP_SERVERS). With secret = true, Terraform creates the secret <name_prefix>-mcp-<name> and gives it to agent_session only, as MCP_CREDENTIAL_<NAME>."
  default     = {}

  validation {
    condition = alltrue([
      for name, server in var.mcp_servers :
      can(regex("^[a-z][a-z0-9_-]{0,23}$", name)) && startswith(server.url, "https://") &&
      try(server.timeout_seconds, 30) > 0 && try(server.timeout_seconds, 30) <= 600
    ])
    error_message = "mcp_servers: a name is 1-24 of a-z, 0-9, _ or -, starting with a letter; a url is https://; timeout_seconds is 0..600 (what shared/config_values.py accepts)."
  }
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
    model         = optional(string)
  })
  description = "How agent_session reaches Gemini: Vertex AI with its own identity (location is the Vertex AI location), or, when use_vertex_ai is false, an API key kept in Secret Manager. model sets GEMINI_MODEL; null keeps the default of shared/config.py."
  default     = {}
}

variable "session" {
  type = object({
    wall_seconds   = optional(number, 420)
    max_turns      = optional(number, 20)
    max_tool_calls = optional(number, 40)
    max_fetches    = optional(number, 10)
  })
  description = "Budgets of one agent session (SESSION_WALL_SECONDS, SESSION_MAX_TURNS, SESSION_MAX_TOOL_CALLS, FETCH_MAX_PER_SESSION). The wall budget must end well before tasks.dispatch_deadline_seconds, which is also agent_session's timeout."
  default     = {}

  validation {
    condition = (
      var.session.wall_seconds >= 10 && var.session.wall_seconds <= 1700 &&
      var.session.max_turns >= 1 && var.session.max_turns <= 200 &&
      var.session.max_tool_calls >= 0 && var.session.max_tool_calls <= 1000 &&
      var.session.max_fetches >= 0 && var.session.max_fetches <= 1000
    )
    error_message = "session: wall_seconds 10..1700, max_turns 1..200, max_tool_calls 0..1000, max_fetches 0..1000 (the ranges shared/config.py accepts)."
  }
}

variable "tasks" {
  type = object({
    queue_name                = optional(string, "agent-sessions")
    dispatch_deadline_seconds = optional(number, 900)
    # Cloud Tasks stops retrying only once BOTH max_attempts attempts were made AND
    # max_retry_duration_seconds has passed. The duration is kept short so that max_attempts decides.
    max_attempts               = optional(number, 5)
    max_retry_duration_seconds = optional(number, 60)
    min_backoff_seconds        = optional(number, 10)
    max_backoff_seconds        = optional(number, 600)
    max_doublings              = optional(number, 4)
    max_dispatches_per_second  = optional(number, 5)
    max_concurrent_dispatches  = optional(number, 20)
  })
  description = "The Cloud Tasks queue of agent sessions: its name (a deleted name is blocked for 7 days), how long a task may run (also agent_session's timeout), its retries (agent_session fails a session on its third crashed attempt; later attempts only follow crashes that never reached the code) and its rate limits (max_concurrent_dispatches is also agent_session's instance limit)."
  default     = {}

  validation {
    condition     = var.tasks.dispatch_deadline_seconds >= 15 && var.tasks.dispatch_deadline_seconds <= 1800
    error_message = "Cloud Tasks accepts a dispatch deadline of 15 to 1800 seconds for HTTP targets."
  }

  validation {
    condition     = var.tasks.max_attempts >= 3 && var.tasks.max_attempts <= 10
    error_message = "tasks.max_attempts must be 3 to 10: agent_session gives a session up (and tells its thread) on its third crashed attempt, so fewer attempts never reach that, and unlimited ones never stop."
  }

  validation {
    condition     = var.tasks.max_retry_duration_seconds >= 1 && var.tasks.max_retry_duration_seconds <= 600
    error_message = "tasks.max_retry_duration_seconds must be 1 to 600: Cloud Tasks retries until both it and max_attempts are reached, so a long duration keeps retrying long after max_attempts."
  }

  validation {
    condition     = var.tasks.min_backoff_seconds >= 1 && var.tasks.min_backoff_seconds <= var.tasks.max_backoff_seconds
    error_message = "tasks.min_backoff_seconds must be at least 1 and at most max_backoff_seconds."
  }
}

variable "sweep" {
  type = object({
    schedule               = optional(string, "0 8 * * *")
    rescue_schedule        = optional(string, "*/2 * * * *")
    time_zone              = optional(string, "Etc/UTC")
    question_remind_hours  = optional(number, 24)
    question_abandon_hours = optional(number, 48)
    stale_lease_minutes    = optional(number, 60)
    page_size              = optional(number, 200)
  })
  description = "The daily sweep: when Cloud Scheduler runs it (cron syntax, in time_zone), and when the rescue runs (rescue_schedule, every few minutes: sessions left queued or whose worker died are queued again); the age at which an open question gets its one reminder (QUESTION_REMIND_HOURS) and the further time after which it is abandoned (QUESTION_ABANDON_HOURS); how long past its lease a running session must be before its worker counts as dead (STALE_LEASE_MINUTES); documents read per page (SWEEP_PAGE_SIZE)."
  default     = {}

  validation {
    condition = (
      var.sweep.question_remind_hours >= 1 && var.sweep.question_remind_hours <= 720 &&
      var.sweep.question_abandon_hours >= 1 && var.sweep.question_abandon_hours <= 2160 &&
      var.sweep.stale_lease_minutes >= 1 && var.sweep.stale_lease_minutes <= 1440 &&
      var.sweep.page_size >= 10 && var.sweep.page_size <= 1000
    )
    error_message = "sweep: question_remind_hours 1..720, question_abandon_hours 1..2160, stale_lease_minutes 1..1440, page_size 10..1000 (the ranges shared/config.py accepts)."
  }
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
  description = "How long Slack event de-duplication records live before Firestore's TTL policy deletes them (EVENT_TTL_HOURS)."
  default     = 72

  validation {
    condition     = var.event_ttl_hours >= 1 && var.event_ttl_hours <= 8760
    error_message = "event_ttl_hours must be 1 to 8760 (a year)."
  }
}

variable "min_instances" {
  type        = map(number)
  description = "Warm instances per entry point, e.g. { slack_events = 1 } to keep cold starts away from Slack's 3-second limit (billed while idle)."
  default     = {}
}

variable "extra_environment" {
  type        = map(string)
  description = "More variables from shared/config.py for every function (SESSION_LEASE_SECONDS, MODEL_TIMEOUT_SECONDS, ...). Not for what Terraform sets itself, secrets, OIDC or local-only switches: those are refused."
  default     = {}

  validation {
    condition = length(setintersection(keys(var.extra_environment), [
      "SLACK_SIGNING_SECRET", "SLACK_BOT_TOKEN", "GEMINI_API_KEY",
      "SLACK_API_BASE_URL", "GOOGLE_GEMINI_BASE_URL", "REQUIRE_OIDC", "OIDC_AUDIENCE", "SCHEDULER_SERVICE_ACCOUNT",
      "TASKS_QUEUE", "TASKS_TARGET_URL", "TASKS_SERVICE_ACCOUNT", "TASKS_DISPATCH_DEADLINE_SECONDS",
      "GOOGLE_CLOUD_PROJECT", "FIRESTORE_DATABASE", "LOG_LEVEL", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_CLOUD_LOCATION",
      "GEMINI_MODEL", "OPERATOR_USER_IDS", "OPERATOR_CHANNEL", "ALLOW_REQUESTER_ANSWERS", "EVENT_TTL_HOURS",
      "ALLOW_REQUESTER_APPROVALS", "ASSISTANT_PROMPTS", "TOOL_TIERS", "FETCH_MAX_PER_SESSION", "MCP_SERVERS",
      "SESSION_WALL_SECONDS", "SESSION_MAX_TURNS", "SESSION_MAX_TOOL_CALLS",
      "QUESTION_REMIND_HOURS", "QUESTION_ABANDON_HOURS", "STALE_LEASE_MINUTES", "SWEEP_PAGE_SIZE",
      ])) == 0 && alltrue([
      for name in keys(var.extra_environment) : !endswith(name, "_EMULATOR_HOST") && !startswith(name, "MCP_CREDENTIAL_")
    ])
    error_message = "extra_environment must not set secrets (use Secret Manager), OIDC settings, emulator or stub addresses, or a variable that has its own Terraform variable (operator_user_ids, operator_channel, gemini, session, tasks, sweep, log_level, event_ttl_hours, assistant_prompts, ...)."
  }
}

variable "labels" {
  type        = map(string)
  description = "Labels added to every resource that takes labels."
  default     = {}
}
