"""Everything that speaks Slack: the Web API client and the one posting path, signature verification,
Events API classification, block action parsing, Block Kit builders, mrkdwn, the thread surface the agent
shows its progress on, and the back-pressure every Web API call retries under (``backpressure``).

May import the core modules (``shared.config``, ``shared.logs``, ``shared.errors``, ``shared.deps``) only:
nothing here knows about sessions, Firestore or the model.
"""
