"""Everything that speaks Slack: the Web API client and the one posting path, signature verification,
Events API classification, block action parsing, Block Kit builders, mrkdwn, and the thread surface the agent
shows its progress on.

May import the core modules (``shared.config``, ``shared.logs``, ``shared.errors``, ``shared.deps``) only:
nothing here knows about sessions, Firestore or the model.
"""
