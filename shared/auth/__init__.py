"""Who may call the internal entry points: the OIDC token Cloud Tasks and Cloud Scheduler sign (``oidc``).

May import the core modules only. (Slack's request signatures are checked in ``shared.slack.verify``; who may
answer or approve in Slack is decided in ``shared.asks``.)
"""
