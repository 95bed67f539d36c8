# What is deployed: one Cloud Function per entry point in functions/main.py.
#
# Adding an entry point is one more entry in local.functions.
# tests/deploy/test_terraform.py cross-checks this table against the code: every entry
# point exists, and every variable shared/config.py requires reaches the function.
locals {
  functions = {
    slack_events = {
      description = "Slack Events API: verifies, de-duplicates, enqueues, answers within 3 s."
      short_name  = "events"
      invoker     = "public" # Slack cannot send OIDC tokens; every request is verified by its Slack signature.
      timeout     = 60
      memory      = "512Mi"
      cpu         = "1"
      concurrency = 20
      max         = 20
      environment = ["common", "tasks", "slack", "answers", "assistant"]
      secrets     = ["SLACK_SIGNING_SECRET", "SLACK_BOT_TOKEN"]
      calls_model = false
    }
    slack_interactivity = {
      description = "Slack interactivity: signed button clicks on question posts, the same answer path as replies."
      short_name  = "interact"
      invoker     = "public"
      timeout     = 60
      memory      = "512Mi"
      cpu         = "1"
      concurrency = 20
      max         = 10
      environment = ["common", "tasks", "slack", "answers"]
      secrets     = ["SLACK_SIGNING_SECRET", "SLACK_BOT_TOKEN"]
      calls_model = false
    }
    agent_session = {
      description = "Runs one bounded agent session per Cloud Task (OIDC only)."
      short_name  = "session"
      invoker     = "tasks"
      # Cloud Tasks waits dispatch_deadline_seconds for the answer; the function may run as long, no longer.
      timeout     = var.tasks.dispatch_deadline_seconds
      memory      = "1Gi"
      cpu         = "1"
      concurrency = 1
      # One session per instance, as many instances as Cloud Tasks may dispatch at once.
      max         = var.tasks.max_concurrent_dispatches
      environment = concat(["common", "tasks", "internal", "answers", "agent"], var.gemini.use_vertex_ai ? ["vertex_ai"] : [])
      # Only agent_session talks to MCP servers, so only it reads their credentials.
      secrets     = concat(["SLACK_BOT_TOKEN"], var.gemini.use_vertex_ai ? [] : ["GEMINI_API_KEY"], keys(local.mcp_credentials))
      calls_model = true
    }
    sweep = {
      description = "Daily sweep of stale questions and silent sessions (Cloud Scheduler, OIDC only)."
      short_name  = "sweep"
      invoker     = "scheduler"
      timeout     = 540
      memory      = "512Mi"
      cpu         = "1"
      concurrency = 1
      max         = 1
      environment = ["common", "tasks", "internal", "sweep"]
      secrets     = ["SLACK_BOT_TOKEN"]
      calls_model = false
    }
  }

  function_names = { for key in keys(local.functions) : key => "${var.name_prefix}-${replace(key, "_", "-")}" }

  # A gen2 function's URL is known before it exists. agent_session enqueues its own follow-up
  # tasks, so its URL cannot come from the resource itself; a postcondition checks the two agree.
  function_urls = { for key, name in local.function_names : key => "https://${var.region}-${var.project_id}.cloudfunctions.net/${name}" }

  # Non-secret environment, in groups a function opts into. Names and meanings: shared/config.py.
  environment_groups = {
    common = {
      GOOGLE_CLOUD_PROJECT = var.project_id
      FIRESTORE_DATABASE   = google_firestore_database.main.name
      LOG_LEVEL            = var.log_level
      OPERATOR_USER_IDS    = join(",", var.operator_user_ids)
      # Every function writes de-duplication records: the ingress of Slack events, the others of alerts and reminders.
      EVENT_TTL_HOURS = tostring(var.event_ttl_hours)
    }
    tasks = {
      TASKS_QUEUE                     = google_cloud_tasks_queue.sessions.id
      TASKS_TARGET_URL                = local.function_urls["agent_session"]
      TASKS_SERVICE_ACCOUNT           = google_service_account.platform["tasks_invoker"].email
      TASKS_DISPATCH_DEADLINE_SECONDS = tostring(var.tasks.dispatch_deadline_seconds)
    }
    slack = {
      ALLOW_REQUESTER_APPROVALS = tostring(var.allow_requester_approvals)
    }
    # The Slack functions take a requester's answer; agent_session asks a question in a direct message only if the
    # requester may answer it there (shared/asks/routing.py's nobody_can_answer).
    answers = {
      ALLOW_REQUESTER_ANSWERS = tostring(var.allow_requester_answers)
    }
    # slack_events sets these on every thread opened in Slack's assistant pane (shared/usecases/assistant_pane.py).
    assistant = {
      ASSISTANT_PROMPTS = jsonencode(var.assistant_prompts)
    }
    # agent_session and sweep: OIDC checked in the code too, never switched off in the cloud;
    # alerts about unreported work also go to the operator channel, when there is one;
    # the question ages: the sweep reminds and expires, agent_session shows an approval's expiry on its card.
    internal = merge(
      {
        REQUIRE_OIDC           = "true"
        QUESTION_REMIND_HOURS  = tostring(var.sweep.question_remind_hours)
        QUESTION_ABANDON_HOURS = tostring(var.sweep.question_abandon_hours)
      },
      var.operator_channel == "" ? {} : { OPERATOR_CHANNEL = var.operator_channel },
    )
    # agent_session accepts only the tasks invoker's token for TASKS_TARGET_URL (shared/worker.py):
    # both come from the "tasks" group, the same values the enqueuers put in each task.
    agent = merge(
      {
        SESSION_WALL_SECONDS   = tostring(var.session.wall_seconds)
        SESSION_MAX_TURNS      = tostring(var.session.max_turns)
        SESSION_MAX_TOOL_CALLS = tostring(var.session.max_tool_calls)
        TOOL_TIERS             = jsonencode(var.tool_tiers)
        FETCH_MAX_PER_SESSION  = tostring(var.session.max_fetches)
        MCP_SERVERS            = jsonencode(local.mcp_servers)
      },
      var.gemini.model == null ? {} : { GEMINI_MODEL = var.gemini.model },
    )
    # sweep accepts only Cloud Scheduler's token, for its own URL (shared/sweep.py, shared/auth.py):
    # the same account and audience as the scheduler job's oidc_token.
    sweep = {
      SCHEDULER_SERVICE_ACCOUNT = google_service_account.platform["scheduler"].email
      OIDC_AUDIENCE             = local.function_urls["sweep"]
      STALE_LEASE_MINUTES       = tostring(var.sweep.stale_lease_minutes)
      SWEEP_PAGE_SIZE           = tostring(var.sweep.page_size)
    }
    # google-genai's own variables: Vertex AI with the function's identity.
    vertex_ai = {
      GOOGLE_GENAI_USE_VERTEXAI = "true"
      GOOGLE_CLOUD_LOCATION     = var.gemini.location
    }
  }

  # Secret environment variables: name -> Secret Manager secret id.
  secrets = merge(
    {
      SLACK_SIGNING_SECRET = "${var.name_prefix}-slack-signing-secret"
      SLACK_BOT_TOKEN      = "${var.name_prefix}-slack-bot-token"
    },
    var.gemini.use_vertex_ai ? {} : { GEMINI_API_KEY = "${var.name_prefix}-gemini-api-key" },
    local.mcp_credentials,
  )

  # MCP servers (README, "MCP servers"): MCP_SERVERS as shared/config_values.py reads it. A server with a credential
  # names the variable that holds it, MCP_CREDENTIAL_<NAME>, filled from its own secret (local.mcp_credentials).
  # (try() restates the optional() defaults: the offline checks in deploy/ fill them only at a variable's top level.)
  mcp_credentials = {
    for name, server in var.mcp_servers :
    "MCP_CREDENTIAL_${upper(replace(name, "-", "_"))}" => "${var.name_prefix}-mcp-${name}" if try(server.secret, false)
  }
  mcp_servers = [
    for name, server in var.mcp_servers : merge(
      { name = name, url = server.url, exclude = try(server.exclude, []), timeout_seconds = try(server.timeout_seconds, 30) },
      try(server.include, null) == null ? {} : { include = server.include },
      try(server.secret, false) ? { credential_env = "MCP_CREDENTIAL_${upper(replace(name, "-", "_"))}" } : {},
    )
  ]

  labels = merge(var.labels, { app = var.name_prefix, managed-by = "terraform" })
}
