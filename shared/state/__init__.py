"""The durable state: typed models (the session in typed parts, ``session_model``), the typed writes
(``updates``), one factory per kind of session (``new_sessions``), deterministic ids, the Firestore layer split by
aggregate (events, sessions with their claim and lease, a stop's request, steps and notes, questions and threads,
approvals, a paused turn's waiting record, children and their results, the tool-call ledger, routed posts, DM
conversations, rate limits and spend, feedback, the sweep's queries, the index list), and what a new record copies
from the session it comes from (``origin``).

May import the core modules only. Storage holds no product rules: it offers transactional reads and writes, and
the use cases decide. (Cloud Tasks is ``shared.queue``, OIDC ``shared.auth``.)
"""
